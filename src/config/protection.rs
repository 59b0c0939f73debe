//! Validation of a listener's protection keys: allow-lists, token, rates.

use std::net::SocketAddr;
use std::num::NonZeroU32;

use super::raw::RawListener;
use super::validate::Problems;
use super::Protection;
use crate::limits::origin::Origin;
use crate::limits::policy::{MethodPolicy, Pattern, MAX_PATTERNS};
use crate::limits::rate::Rate;

/// The `allowed_origins` entry that opts in to every origin.
const ANY_ORIGIN: &str = "*";

/// A WebSocket listener reachable from other hosts must say which web pages
/// may drive it: an empty `allowed_origins` there would let any page use
/// the daemon through a published port.
pub(super) fn check_exposed(key: &str, addr: SocketAddr, raw: &RawListener, p: &mut Problems) {
    if addr.ip().is_loopback() || !raw.allowed_origins.is_empty() {
        return;
    }
    let msg = format!(
        "required when the listener is bound to a non-loopback address ({addr}): \
         list the origins of the pages allowed to connect, e.g. \
         [\"https://app.example.com\"], or [\"*\"] to allow any origin"
    );
    p.at(key, "allowed_origins", msg);
}

/// Builds a listener's [`Protection`], reporting every bad value.
pub(super) fn protection(key: &str, raw: &RawListener, p: &mut Problems) -> Protection {
    let any_origin = raw.allowed_origins.iter().any(|o| o == ANY_ORIGIN);
    if any_origin && raw.allowed_origins.len() > 1 {
        let msg = "\"*\" allows every origin; list nothing else with it";
        p.at(key, "allowed_origins", msg);
    }
    let allowed_origins = raw
        .allowed_origins
        .iter()
        .filter(|o| *o != ANY_ORIGIN)
        .enumerate()
        .filter_map(|(i, o)| {
            let parsed = Origin::parse(o);
            if parsed.is_none() {
                p.at(
                    key,
                    &format!("allowed_origins[{i}]"),
                    format!("{o:?} is not scheme://host[:port]"),
                );
            }
            parsed
        })
        .collect();
    let method_weights = raw
        .method_weights
        .iter()
        .filter_map(|(m, w)| {
            let weight = NonZeroU32::new(*w);
            if weight.is_none() {
                p.at(key, &format!("method_weights.{m}"), "must be at least 1");
            }
            weight.map(|w| (m.clone(), w))
        })
        .collect();
    if raw.header_read_timeout_ms == 0 {
        p.at(key, "header_read_timeout_ms", "must be at least 1");
    }
    if raw.auth_token.as_deref().is_some_and(str::is_empty) {
        p.at(
            key,
            "auth_token",
            "must not be empty (omit the key to disable)",
        );
    }
    let allow = patterns(key, "allow_methods", &raw.allow_methods, p);
    let deny = patterns(key, "deny_methods", &raw.deny_methods, p);
    let clients = super::clients::clients(
        key,
        &raw.clients,
        raw.auth_token.as_deref(),
        (&allow, &deny),
        (raw.dialect.as_deref() != Some("ndjson"), raw.jwt.is_some()),
        p,
    );
    if raw.jwt.is_some() && raw.dialect.as_deref() == Some("ndjson") {
        p.at(key, "jwt", "only WebSocket and HTTP listeners take JWTs");
    }
    let jwt = raw.jwt.as_ref().and_then(|j| {
        let names = clients.iter().map(|c| c.name.clone()).collect();
        super::jwt::jwt(key, j, names, p)
    });
    topic_patterns(key, "allow_topics", &raw.allow_topics, p);
    topic_patterns(key, "deny_topics", &raw.deny_topics, p);
    Protection {
        allowed_hosts: raw
            .allowed_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        allowed_origins,
        any_origin,
        auth_token: raw.auth_token.clone(),
        clients,
        jwt,
        allow_topics: (!raw.allow_topics.is_empty()).then(|| raw.allow_topics.clone()),
        deny_topics: raw.deny_topics.clone(),
        methods: MethodPolicy::new(allow, deny),
        rate: rate(raw.rate_per_second, raw.rate_burst),
        ip_rate: rate(raw.ip_rate_per_second, raw.ip_rate_burst),
        global_rate: rate(raw.global_rate_per_second, raw.global_rate_burst),
        method_weights,
        abuse_threshold: raw.abuse_threshold,
        header_read_timeout: std::time::Duration::from_millis(raw.header_read_timeout_ms.max(1)),
        max_connections: raw.max_connections,
        max_connections_per_ip: raw.max_connections_per_ip,
        idle_timeout: (raw.idle_timeout_ms > 0)
            .then(|| std::time::Duration::from_millis(raw.idle_timeout_ms)),
        slow_consumer_timeout: std::time::Duration::from_millis(
            raw.slow_consumer_timeout_ms.max(1),
        ),
        max_connection_lifetime: (raw.max_connection_lifetime_ms > 0)
            .then(|| std::time::Duration::from_millis(raw.max_connection_lifetime_ms)),
    }
}

/// A method pattern list, reporting every bad pattern by its index.
pub(super) fn patterns(key: &str, field: &str, raw: &[String], p: &mut Problems) -> Vec<Pattern> {
    if raw.len() > MAX_PATTERNS {
        p.at(
            key,
            field,
            format!("at most {MAX_PATTERNS} patterns (got {})", raw.len()),
        );
    }
    raw.iter()
        .enumerate()
        .filter_map(|(i, text)| match Pattern::parse(text) {
            Ok(pattern) => Some(pattern),
            Err(e) => {
                p.at(key, &format!("{field}[{i}]"), format!("{text:?}: {e}"));
                None
            }
        })
        .collect()
}

/// Checks a topic pattern list (`allow_topics`, `deny_topics`): valid
/// NATS-style patterns, at most [`MAX_PATTERNS`].
pub(super) fn topic_patterns(key: &str, field: &str, raw: &[String], p: &mut Problems) {
    if raw.len() > MAX_PATTERNS {
        p.at(
            key,
            field,
            format!("at most {MAX_PATTERNS} patterns (got {})", raw.len()),
        );
    }
    for (i, text) in raw.iter().enumerate() {
        if let Err(e) = crate::pubsub::topic::validate_pattern(text) {
            p.at(key, &format!("{field}[{i}]"), format!("{text:?}: {e}"));
        }
    }
}

/// A rate, or `None` when off (0); a zero burst means "same as the rate".
pub(super) fn rate(per_second: u32, burst: u32) -> Option<Rate> {
    let per_second = NonZeroU32::new(per_second)?;
    Some(Rate {
        per_second,
        burst: NonZeroU32::new(burst).unwrap_or(per_second),
    })
}
