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
//! here.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use super::raw::{RawConfig, RawPubsub};
use super::{
    Config, GatewayConfig, ListenAddr, ListenerConfig, RouteTable, UpstreamConfig, UpstreamTarget,
};
use crate::dialect::Dialect;

use super::listener::listener;
use super::observability::{admin_config, log_config, tracing_config};
use super::upstream::upstream;

/// Longest Unix socket path: `sun_path` is 108 bytes including the NUL.
const MAX_SOCKET_PATH_BYTES: usize = 107;

/// Why a configuration could not be used. Each variant holds one message per
/// problem, and `Display` prints them one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The configuration could not be read or deserialized: missing file,
    /// TOML syntax, unknown key, wrongly typed value.
    #[error("{}", .0.join("\n"))]
    Load(Vec<String>),
    /// The configuration was read but its values are inconsistent or out of
    /// range.
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

/// Collects problem messages, each prefixed with the key path it is about.
#[derive(Debug, Default)]
pub(super) struct Problems(Vec<String>);

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
    if p.0.is_empty() {
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
        Err(ConfigError::Invalid(p.0))
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

/// A required `socket` key: `~` expanded and checked against `sun_path`.
pub(super) fn socket_path(key: &str, socket: Option<&str>, p: &mut Problems) -> Option<PathBuf> {
    let Some(text) = socket else {
        p.at(key, "socket", "required for dialect ndjson");
        return None;
    };
    let path = match text.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => match std::env::var_os("HOME") {
            Some(mut home) => {
                home.push(rest);
                PathBuf::from(home)
            }
            None => {
                p.at(key, "socket", "starts with ~ but $HOME is not set");
                return None;
            }
        },
        _ => PathBuf::from(text),
    };
    let len = path.as_os_str().len();
    if text.is_empty() {
        p.at(key, "socket", "must not be empty");
    } else if len > MAX_SOCKET_PATH_BYTES {
        let max = MAX_SOCKET_PATH_BYTES;
        let msg = format!("{len} bytes after ~ expansion; at most {max} fit in sun_path");
        p.at(key, "socket", msg);
    } else {
        return Some(path);
    }
    None
}

pub(super) fn dialect(key: &str, name: Option<&str>, p: &mut Problems) -> Option<Dialect> {
    match name.map(str::parse::<Dialect>) {
        None => p.at(key, "dialect", "required"),
        Some(Err(e)) => p.at(key, "dialect", e),
        Some(Ok(d)) => return Some(d),
    }
    None
}

/// Names appear in logs, metric labels and env variable names.
pub(super) fn check_name(key: &str, name: &str, p: &mut Problems) {
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || !name.chars().all(ok) {
        p.push(key, "name must be ASCII letters, digits, '-' or '_'");
    }
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

/// The candidate closest to `word` if it is close enough to be a likely
/// misspelling, for "did you mean" hints (Jaro-Winkler similarity, as
/// clap uses for subcommands).
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    /// Below this similarity a suggestion is more confusing than none.
    const LIKELY: f64 = 0.8;
    let lower = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&lower, &c.to_ascii_lowercase()), c))
        .filter(|(score, _)| *score >= LIKELY)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

// === impl ConfigError ===

impl ConfigError {
    /// A load error with a single message (e.g. an unreadable file).
    pub fn load(message: impl Into<String>) -> Self {
        Self::Load(vec![message.into()])
    }

    /// Every problem, one message each.
    pub fn problems(&self) -> &[String] {
        match self {
            Self::Load(problems) | Self::Invalid(problems) => problems,
        }
    }
}

impl From<figment::Error> for ConfigError {
    /// Lists every error figment collected, not just the first.
    fn from(error: figment::Error) -> Self {
        Self::Load(error.into_iter().map(|e| e.to_string()).collect())
    }
}

// === impl Problems ===

impl Problems {
    pub(super) fn push(&mut self, key: impl Display, message: impl Display) {
        self.0.push(format!("{key}: {message}"));
    }

    pub(super) fn at(&mut self, key: &str, field: &str, message: impl Display) {
        self.0.push(format!("{key}.{field}: {message}"));
    }

    /// One of a closed set of names.
    pub(super) fn choice<T: Copy>(
        &mut self,
        key: &str,
        field: &str,
        v: &str,
        of: &[(&str, T)],
    ) -> Option<T> {
        let found = of.iter().find(|(name, _)| *name == v).map(|(_, t)| *t);
        if found.is_none() {
            let names: Vec<String> = of.iter().map(|(name, _)| format!("{name:?}")).collect();
            let mut msg = format!(
                "unknown value {v:?} (expected one of: {})",
                names.join(", ")
            );
            if let Some(near) = closest(v, of.iter().map(|(name, _)| *name)) {
                msg.push_str(&format!("; did you mean {near:?}?"));
            }
            self.at(key, field, msg);
        }
        found
    }

    pub(super) fn nonzero(&mut self, key: &str, field: &str, value: usize) -> Option<NonZeroUsize> {
        let nz = NonZeroUsize::new(value);
        if nz.is_none() {
            self.at(key, field, "must be greater than 0");
        }
        nz
    }

    pub(super) fn millis(&mut self, key: &str, field: &str, value: u64) -> Duration {
        if value == 0 {
            self.at(key, field, "must be greater than 0");
        }
        Duration::from_millis(value)
    }

    /// A problem with `field` when `bad`.
    pub(super) fn at_if(&mut self, key: &str, field: &str, bad: bool, message: impl Display) {
        if bad {
            self.at(key, field, message);
        }
    }

    /// Problems found so far.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn not_allowed(&mut self, key: &str, field: &str, set: bool, d: Dialect) {
        if set {
            self.at(key, field, format!("not allowed for dialect {d}"));
        }
    }
}
