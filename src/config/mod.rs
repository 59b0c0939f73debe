//! Validated, typed configuration.
//!
//! Loading goes: built-in defaults ← TOML file ← `SWITCHYARD_*` environment
//! (figment), into the serde mirror [`raw::RawConfig`], which
//! [`validate::validate`] turns into this typed [`Config`] while collecting
//! *every* problem into one [`ConfigError`]. Nothing here opens a socket: the
//! binary checks the whole configuration before binding anything and exits
//! with code 64 (`EX_USAGE`) when it is invalid.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod clients;
mod http;
pub mod jwt;
mod listener;
mod observability;
mod persistence;
mod policy;
mod problems;
mod protection;
mod publish;
mod pubsub;
pub mod raw;
mod routes;
mod upstream;
pub mod validate;

pub use persistence::PersistenceConfig;
pub use problems::ConfigError;
pub use publish::{Feed, Publish};
pub use routes::RouteTable;
pub use upstream::{
    HttpTarget, NotificationPolicy, ProcessSpec, UpstreamConfig, UpstreamMode, UpstreamTarget,
};

use crate::dialect::Dialect;

/// Exit code for an invalid configuration (sysexits `EX_USAGE`).
pub const EXIT_CONFIG: i32 = 64;

/// The whole, validated configuration of one switchyard process.
#[derive(Debug, Clone)]
pub struct Config {
    /// Process-wide settings (timeouts, shutdown).
    pub gateway: GatewayConfig,
    /// Logging output.
    pub log: LogConfig,
    /// Listeners in name order.
    pub listeners: Vec<ListenerConfig>,
    /// Upstreams in name order.
    pub upstreams: Vec<UpstreamConfig>,
    /// Trace export (OpenTelemetry over OTLP); off by default.
    pub tracing: TracingConfig,
    /// The admin listener (metrics, probes, status page).
    pub admin: AdminConfig,
    /// Persistent subscriptions: the store and the persistent topics.
    pub persistence: PersistenceConfig,
    /// The bounds on clients' topic subscriptions (`[pubsub]`).
    pub pubsub: crate::pubsub::Limits,
    /// `[pubsub] backend = "nats"`: NATS core as the backbone of plain
    /// topics; `None`: the in-process broker only.
    pub pubsub_nats: Option<crate::pubsub::nats::Settings>,
}

/// The admin listener: `/metrics`, `/livez`, `/readyz` and a status page, on
/// its own address and never on a client port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Address to bind (port 0 picks a free port); `None` disables the admin
    /// listener.
    pub addr: Option<SocketAddr>,
    /// Bearer token `POST /reload` must carry; `None` (the default): the
    /// endpoint refuses every request.
    pub reload_token: Option<String>,
    /// Host names accepted in the `Host` header besides IP addresses and
    /// loopback names (DNS-rebinding defence), lower case.
    pub allowed_hosts: Vec<String>,
}

/// Process-wide settings.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// How long in-flight requests may take to finish after a shutdown signal
    /// before they are answered with `unavailable`.
    pub shutdown_grace: Duration,
    /// Runtime worker threads; `None` = one per CPU core.
    pub worker_threads: Option<std::num::NonZeroUsize>,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Logging settings.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Text or JSON lines.
    pub format: LogFormat,
    /// An `EnvFilter` directive such as `info` or `switchyard=debug`.
    pub level: String,
}

/// How spans travel to the OTLP collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// Protobuf over HTTP POST (`http/protobuf`, the collector's port 4318).
    HttpProtobuf,
}

/// Trace export settings (`[tracing]`).
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// Export spans. Off by default: nothing is sent anywhere unless asked.
    pub enabled: bool,
    /// The collector's URL for traces, e.g. `http://127.0.0.1:4318/v1/traces`.
    pub endpoint: String,
    /// Wire protocol to the collector.
    pub protocol: OtlpProtocol,
    /// Share of new traces (those without a sampled parent) that are
    /// exported, in `0.0..=1.0`.
    pub sampling_ratio: f64,
    /// Record client request ids on spans (`rpc.jsonrpc.request_id`); ids
    /// are client data, so this is opt-in.
    pub record_ids: bool,
    /// `service.name` of the exported resource.
    pub service_name: String,
}

/// Where a listener accepts connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A WebSocket endpoint: TCP address plus HTTP path.
    Ws {
        /// Address to bind (port 0 picks a free port).
        addr: SocketAddr,
        /// HTTP path that upgrades to this listener's dialect.
        path: String,
    },
    /// A Unix stream socket (NDJSON).
    Unix {
        /// Socket file path.
        path: PathBuf,
        /// File mode of the socket (default 0o600).
        mode: u32,
    },
}

/// One named listener.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// Config name, used in logs and metric labels.
    pub name: String,
    /// Dialect spoken by clients of this listener.
    pub dialect: Dialect,
    /// Where it listens.
    pub addr: ListenAddr,
    /// Largest inbound message (WebSocket message or NDJSON line) accepted.
    pub max_message_bytes: usize,
    /// Largest JSON-RPC batch accepted (items).
    pub max_batch_items: usize,
    /// Requests one client connection may have in flight; at the cap the
    /// connection is not read until a reply frees a slot (back-pressure).
    pub max_in_flight: usize,
    /// Outbound messages queued for one client before its writer applies
    /// backpressure.
    pub outbox_capacity: usize,
    /// Bytes of outbound frames queued for one client (its outbox's byte
    /// budget); at least `max_message_bytes`. An empty queue takes one
    /// frame of any size.
    pub outbox_max_bytes: usize,
    /// WebSocket ping period on idle connections.
    pub ping_interval: Duration,
    /// How long a WebSocket peer may stay silent after a ping before it is
    /// dropped.
    pub pong_timeout: Duration,
    /// Client request timeout (receipt → upstream reply).
    pub request_timeout: Duration,
    /// Answer the JSON-RPC `ping` notification with a `pong` notification.
    pub answer_ping_notification: bool,
    /// Requests switchyard may have pushed to one client and not yet seen
    /// answered (`s<N>` ids); further notifications are dropped, counted.
    pub max_unanswered_pushes: usize,
    /// Sideband: advertise CBOR envelopes (`encoding/cbor`); they are used
    /// when the peer advertises them too.
    pub sideband_cbor: bool,
    /// Sideband: accept the legacy `rpc/<method>` and `event/<name>`
    /// subjects on input.
    pub sideband_legacy_subjects: bool,
    /// Sideband: answer `app/…` subjects with ErrorFrame 1003 instead of
    /// dropping them (counted).
    pub sideband_reject_app: bool,
    /// Diagnostic echo: every text and binary message is answered with
    /// itself, never routed (`jsonrpc` over WebSocket only).
    pub echo: bool,
    /// Upgrade checks and rate limits.
    pub protection: Protection,
    /// Where this listener's methods go.
    pub routes: RouteTable,
    /// WebSocket dialects: serve `wss://` with this certificate and key
    /// (`None`: plain `ws://`). Listeners sharing an address agree on it.
    pub tls: Option<TlsFiles>,
}

/// PEM files of a WebSocket listener's TLS certificate and private key,
/// read when the listener is bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Browser safety and rate limits of one listener.
#[derive(Debug, Clone, Default)]
pub struct Protection {
    /// Allowed `Host` names; empty = loopback names when bound to loopback,
    /// else any.
    pub allowed_hosts: Vec<String>,
    /// Allowed origins (parsed); empty = loopback origins when bound to
    /// loopback. `null` is always refused. Validation requires a list (or
    /// `["*"]`) on a listener bound to a non-loopback address.
    pub allowed_origins: Vec<crate::limits::origin::Origin>,
    /// `allowed_origins = ["*"]`: any origin (except `null`) is allowed,
    /// an explicit opt-in.
    pub any_origin: bool,
    /// Bearer token required on the upgrade, if any.
    pub auth_token: Option<String>,
    /// Named clients (`[[listeners.<name>.clients]]`), each with its own
    /// token and method policy.
    pub clients: Vec<clients::Client>,
    /// JWT bearer tokens (`[listeners.<name>.jwt]`), if configured.
    pub jwt: Option<std::sync::Arc<crate::limits::jwt::Verifier>>,
    /// Topic patterns the unnamed client may subscribe to; `None`: the
    /// topics of the upstreams the listener routes to.
    pub allow_topics: Option<Vec<String>>,
    /// Topic patterns the unnamed client may not subscribe to.
    pub deny_topics: Vec<String>,
    /// Which methods clients may call (`allow_methods`, `deny_methods`);
    /// checked before routing.
    pub methods: crate::limits::policy::MethodPolicy,
    /// Per-connection message rate.
    pub rate: Option<crate::limits::rate::Rate>,
    /// Per-client-IP message rate.
    pub ip_rate: Option<crate::limits::rate::Rate>,
    /// Listener-wide message rate.
    pub global_rate: Option<crate::limits::rate::Rate>,
    /// Per-method weights (default 1).
    pub method_weights: std::collections::HashMap<String, std::num::NonZeroU32>,
    /// Rate-limited messages in a row before the connection is closed
    /// (1008); 0 = never.
    pub abuse_threshold: u32,
    /// WebSocket: time a new connection has for its TLS handshake, and
    /// again for each HTTP request head, before it is closed.
    pub header_read_timeout: std::time::Duration,
    /// Open connections on the listener; 0 = unlimited.
    pub max_connections: usize,
    /// Open connections per client IP; 0 = unlimited.
    pub max_connections_per_ip: usize,
    /// Close a connection silent for this long (`None` = never).
    pub idle_timeout: Option<std::time::Duration>,
    /// Close a connection after this long, whatever it does (`None` = never).
    pub max_connection_lifetime: Option<std::time::Duration>,
    /// A client whose outbox stays full this long is closed (1008).
    pub slow_consumer_timeout: std::time::Duration,
}

// === impl Config ===

impl Config {
    /// Loads and validates the configuration: defaults ← `file` (if any) ←
    /// `SWITCHYARD_*` environment. Every load error (unknown key, wrong
    /// type) and every semantic problem is reported, all at once.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::check(file).map(|(config, _)| config)
    }

    /// Like [`load`](Self::load), also returning the effective raw
    /// configuration that `switchyard check` prints.
    pub fn check(file: Option<&Path>) -> Result<(Self, raw::RawConfig), ConfigError> {
        checked(raw::RawConfig::read(file)?)
    }

    /// Parses and validates a TOML document (no environment), for tests and
    /// the embedded demo.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        checked(raw::RawConfig::read_toml(text)?).map(|(config, _)| config)
    }

    /// What is valid but probably not meant, one message each: a listener
    /// without any route (not an echo listener) answers every method but
    /// switchyard's own (`rpc.*`) with `-32601` and `data` "no route
    /// matched". Printed by `switchyard check`, logged at start and reload.
    pub fn warnings(&self) -> Vec<String> {
        self.listeners
            .iter()
            .filter(|l| !l.echo && l.routes.upstreams().next().is_none())
            .map(|l| {
                format!(
                    "listeners.{}: no [[routes]] entry names this listener; every method but \
                     switchyard's own (rpc.*) is answered -32601 \"no route matched\"",
                    l.name
                )
            })
            .collect()
    }

    /// Looks an upstream up by name.
    pub fn upstream(&self, name: &str) -> Option<&UpstreamConfig> {
        self.upstreams.iter().find(|u| u.name == name)
    }
}

/// Validates what was read and reports its load errors and semantic
/// problems together (a [`ConfigError::Load`] if there were load errors).
fn checked(read: raw::Read) -> Result<(Config, raw::RawConfig), ConfigError> {
    let raw = read.raw.clone();
    let invalid = match validate::validate(read.raw) {
        Ok(config) if read.problems.is_empty() => return Ok((config, raw)),
        Ok(_) => Vec::new(),
        Err(e) => e.problems().to_vec(),
    };
    if read.problems.is_empty() {
        return Err(ConfigError::Invalid(invalid));
    }
    // A refused key is missing now; saying so again would be noise.
    let about_refused = |problem: &String| {
        read.refused.iter().any(|key| {
            problem
                .strip_prefix(key.as_str())
                .is_some_and(|rest| rest.starts_with([':', '.', '[']))
        })
    };
    let mut problems = read.problems;
    problems.extend(invalid.into_iter().filter(|p| !about_refused(p)));
    Err(ConfigError::Load(problems))
}

// === impl TracingConfig ===

impl Default for TracingConfig {
    /// The built-in defaults: export off, a local collector, every trace.
    fn default() -> Self {
        Self {
            enabled: false,
            endpoint: raw::DEFAULT_OTLP_ENDPOINT.to_owned(),
            protocol: OtlpProtocol::HttpProtobuf,
            sampling_ratio: 1.0,
            record_ids: false,
            service_name: raw::DEFAULT_SERVICE_NAME.to_owned(),
        }
    }
}
