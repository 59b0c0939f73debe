//! Turns a [`RawConfig`] into the typed [`Config`], collecting every problem.
//!
//! Each check pushes a message naming the key path (`listeners.public.address:
//! required for dialect jsonrpc-ws`) and carries on, so one run of `switchyard
//! check` lists everything that is wrong; only at the end does [`validate`]
//! fail if anything was found. This module does no I/O besides reading
//! `$HOME` for `~` expansion: it never opens, binds or stats a socket.
//!
//! The checks of most tables live beside this file: `listener`,
//! `upstream`, `persistence`, and `observability` (`[log]`, `[admin]`,
//! `[tracing]`); routes, cross-table conflicts and `[pubsub]` are checked
//! here. This file assembles them and is the top of the folder: no section
//! imports it. What every section shares ([`Problems`], [`ConfigError`] and
//! the small checks of names, dialects and socket paths) is in `problems`,
//! which imports none of them.

use std::collections::BTreeMap;
use std::time::Duration;

use super::problems::{closest, ConfigError, Problems};
use super::raw::{RawConfig, RawPubsub};
use super::{
    Config, GatewayConfig, ListenAddr, ListenerConfig, RouteTable, UpstreamConfig, UpstreamTarget,
};

use super::listener::listener;
use super::observability::{admin_config, log_config, tracing_config};
use super::upstream::upstream;

/// `validate` checks everything and only fails at the end with all problems.
///
/// # Errors
///
/// [`ConfigError::Invalid`] listing every problem found.
pub fn validate(raw: RawConfig) -> Result<Config, ConfigError> {
    let mut p = Problems::default();
    let gateway = GatewayConfig {
        shutdown_grace: Duration::from_millis(raw.gateway.shutdown_grace_ms),
        worker_threads: std::num::NonZeroUsize::new(raw.gateway.worker_threads),
    };
    let log = log_config(&raw.log, &mut p);
    if raw.listeners.is_empty() {
        p.push("listeners", "at least one listener is required");
    }
    let mut tables = route_tables(&raw, &mut p);
    let listeners: Vec<_> = raw
        .listeners
        .iter()
        .filter_map(|(name, l)| {
            let routes = tables.remove(name).unwrap_or_else(empty_routes);
            listener(name, l, routes, &mut p)
        })
        .collect();
    let upstreams: Vec<_> = raw
        .upstreams
        .iter()
        .filter_map(|(name, u)| upstream(name, u, &mut p))
        .collect();
    check_conflicts(&listeners, &upstreams, &mut p);
    super::http::check_http_routes(&listeners, &upstreams, &mut p);
    let admin = admin_config(&raw.admin, &listeners, &mut p);
    let tracing = tracing_config(&raw.tracing, &mut p);
    let persistence =
        super::persistence::persistence(&raw.persistence, &raw.persistent_topics, &mut p);
    let pubsub = pubsub_limits(&raw.pubsub, &mut p);
    let pubsub_nats = super::pubsub::backbone(&raw.pubsub.backend, &raw.pubsub.nats, &mut p);
    let problems = p.into_messages();
    if problems.is_empty() {
        Ok(Config {
            gateway,
            log,
            listeners,
            upstreams,
            admin,
            tracing,
            persistence,
            pubsub,
            pubsub_nats,
        })
    } else {
        Err(ConfigError::Invalid(problems))
    }
}

/// `[pubsub]`: every bound at least 1 (pub/sub is turned off per listener
/// with the method policy, not here).
fn pubsub_limits(raw: &RawPubsub, p: &mut Problems) -> crate::pubsub::Limits {
    let key = "pubsub";
    let fields = [
        ("max_subscriptions", raw.max_subscriptions),
        ("max_pattern_tokens", raw.max_pattern_tokens),
        ("index_bytes_per_connection", raw.index_bytes_per_connection),
        ("index_bytes_per_ip", raw.index_bytes_per_ip),
        ("index_bytes_total", raw.index_bytes_total),
    ];
    for (field, value) in fields {
        if value == 0 {
            p.at(key, field, "must be at least 1");
        }
    }
    crate::pubsub::Limits {
        max_subscriptions: raw.max_subscriptions,
        max_pattern_tokens: raw.max_pattern_tokens,
        index_bytes_per_connection: raw.index_bytes_per_connection,
        index_bytes_per_ip: raw.index_bytes_per_ip,
        index_bytes_total: raw.index_bytes_total,
    }
}

fn empty_routes() -> RouteTable {
    RouteTable {
        default: None,
        prefixes: Vec::new(),
    }
}

/// Builds each listener's route table; listeners without routes are absent.
fn route_tables(raw: &RawConfig, p: &mut Problems) -> BTreeMap<String, RouteTable> {
    let mut tables: BTreeMap<String, RouteTable> = BTreeMap::new();
    for (i, route) in raw.routes.iter().enumerate() {
        let key = format!("routes[{i}]");
        let listener = route_ref(&key, "listener", route.listener.as_ref(), &raw.listeners, p);
        let upstream = route_ref(&key, "upstream", route.upstream.as_ref(), &raw.upstreams, p);
        let (Some(listener), Some(upstream)) = (listener, upstream) else {
            continue;
        };
        let table = tables.entry(listener.clone()).or_insert_with(empty_routes);
        let upstream = upstream.clone();
        match route.method_prefix.as_deref() {
            None if table.default.is_some() => {
                let msg = format!("listener {listener:?} already has a default route; give this one a method_prefix");
                p.push(&key, msg);
            }
            None => table.default = Some(upstream),
            Some("") => p.at(&key, "method_prefix", "must not be empty"),
            Some(prefix) if table.prefixes.iter().any(|(seen, _)| seen == prefix) => {
                let msg = format!("duplicate prefix {prefix:?} for listener {listener:?}");
                p.at(&key, "method_prefix", msg);
            }
            Some(prefix) => table.prefixes.push((prefix.to_owned(), upstream)),
        }
    }
    for table in tables.values_mut() {
        // Longest first so the first match in `upstream_for` is the longest.
        table
            .prefixes
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    }
    tables
}

/// A route's reference to a listener or upstream, which must exist.
fn route_ref<'a, T>(
    key: &str,
    field: &str,
    name: Option<&'a String>,
    known: &BTreeMap<String, T>,
    p: &mut Problems,
) -> Option<&'a String> {
    match name {
        None => p.at(key, field, "required"),
        Some(name) if known.contains_key(name) => return Some(name),
        Some(name) => {
            let names: Vec<&str> = known.keys().map(String::as_str).collect();
            let mut msg = format!("unknown {field} {name:?} (known: {})", names.join(", "));
            if let Some(near) = closest(name, names.iter().copied()) {
                msg.push_str(&format!("; did you mean {near:?}?"));
            }
            p.at(key, field, msg);
        }
    }
    None
}

/// Two listeners on one socket, or an upstream that is one of our listeners.
fn check_conflicts(listeners: &[ListenerConfig], upstreams: &[UpstreamConfig], p: &mut Problems) {
    for (i, l) in listeners.iter().enumerate() {
        // Port 0 too: listeners on one written address share one server
        // (one port), so one path can serve only one of them.
        let earlier = listeners[..i].iter().find(|other| other.addr == l.addr);
        if let Some(other) = earlier {
            let msg = format!("listens on the same address as listeners.{}", other.name);
            p.push(format!("listeners.{}", l.name), msg);
        }
        // One server per address: it is either TLS or not, with one cert.
        let ListenAddr::Ws { addr, .. } = &l.addr else {
            continue;
        };
        let disagrees = listeners[..i].iter().find(|other| {
            matches!(&other.addr, ListenAddr::Ws { addr: a, .. } if a == addr) && other.tls != l.tls
        });
        if let Some(other) = disagrees {
            let msg = format!(
                "shares its address with listeners.{} but not its tls_cert/tls_key",
                other.name
            );
            p.push(format!("listeners.{}", l.name), msg);
        }
    }
    for u in upstreams {
        let UpstreamTarget::Unix(path) = &u.target else {
            continue;
        };
        let loops = listeners
            .iter()
            .find(|l| matches!(&l.addr, ListenAddr::Unix { path: lp, .. } if lp == path));
        if let Some(l) = loops {
            let msg = format!("is listeners.{}'s own socket (a forwarding loop)", l.name);
            p.at(&format!("upstreams.{}", u.name), "socket", msg);
        }
    }
}
