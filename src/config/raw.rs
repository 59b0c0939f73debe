//! The serde mirror of the configuration file, before validation.
//!
//! [`RawConfig`] is what figment produces from built-in defaults ← TOML file ←
//! `SWITCHYARD_*` environment. It holds plain strings and integers with the
//! unit in the key name (`_ms`, `_bytes`), and is deliberately permissive about
//! *values*: enumerations and addresses stay strings here, so that
//! [`validate`](super::validate::validate) can report every bad value at once
//! instead of stopping at the first one serde meets. It is strict about *keys*
//! (`deny_unknown_fields`), because a misspelt key silently falling back to its
//! default is the worst kind of configuration bug.
//!
//! Nothing here checks semantics or touches the network.

use std::collections::BTreeMap;
use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};

use super::ConfigError;

/// Prefix of the environment variables that override the file.
pub const ENV_PREFIX: &str = "SWITCHYARD_";

/// Separator of nested keys in environment variable names, e.g.
/// `SWITCHYARD_LISTENERS__PUBLIC__ADDRESS` sets `listeners.public.address`.
pub const ENV_SEPARATOR: &str = "__";

/// Default `tracing.endpoint`: an OpenTelemetry Collector on this host.
pub const DEFAULT_OTLP_ENDPOINT: &str = "http://127.0.0.1:4318/v1/traces";

/// Default `tracing.service_name`.
pub const DEFAULT_SERVICE_NAME: &str = "switchyard";

/// The whole configuration file, as written.
// Not `Eq`: `tracing.sampling_ratio` is a float.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawConfig {
    /// `[gateway]`: process-wide settings (all keys have defaults).
    pub gateway: RawGateway,
    /// `[log]`: logging output (all keys have defaults).
    pub log: RawLog,
    /// `[listeners.<name>]`, in name order. Default: none (at least one is
    /// required by validation).
    pub listeners: BTreeMap<String, RawListener>,
    /// `[upstreams.<name>]`, in name order. Default: none.
    pub upstreams: BTreeMap<String, RawUpstream>,
    /// `[[routes]]`: which upstream serves which listener's methods.
    /// Default: none.
    pub routes: Vec<RawRoute>,
    /// `[admin]`: the admin listener (metrics, probes, status page).
    pub admin: RawAdmin,
    /// `[tracing]`: span export over OTLP (all keys have defaults; off).
    pub tracing: RawTracing,
}

/// `[tracing]`: span export (OpenTelemetry, OTLP).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawTracing {
    /// Export spans. Default `false`.
    pub enabled: bool,
    /// `http://` URL the spans are POSTed to. Default
    /// `"http://127.0.0.1:4318/v1/traces"`.
    pub endpoint: String,
    /// `"http/protobuf"` (the only one supported). Default `"http/protobuf"`.
    pub protocol: String,
    /// Share of new traces exported, `0.0` to `1.0`; a sampled `traceparent`
    /// is always followed. Default `1.0`.
    pub sampling_ratio: f64,
    /// Record client request ids on spans (`rpc.jsonrpc.request_id`).
    /// Default `false`: ids are client data.
    pub record_ids: bool,
    /// `service.name` of the exported spans. Default `"switchyard"`.
    pub service_name: String,
}

/// `[admin]`: the admin listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawAdmin {
    /// `IP:port` serving `/metrics`, `/livez`, `/readyz` and the status page
    /// (port 0 picks a free port). Default `""`: no admin listener, so two
    /// gateways (or test runs) on one host never fight over a fixed port;
    /// deployments set it, e.g. `"127.0.0.1:9090"`.
    pub address: String,
}

/// `[gateway]`: process-wide settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawGateway {
    /// Time in-flight requests get to finish after SIGTERM/SIGINT before they
    /// are answered with `unavailable`. Default `5000`.
    pub shutdown_grace_ms: u64,
    /// Runtime worker threads. `0` = one per CPU core. A sidecar sharing a
    /// small machine with its daemon does best with `1` (no cross-thread
    /// wake-ups). Default `0`.
    pub worker_threads: usize,
}

/// `[log]`: logging output.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawLog {
    /// `"text"` or `"json"`. Default `"text"`.
    pub format: String,
    /// A tracing `EnvFilter` directive such as `"info"` or
    /// `"switchyard=debug,info"`. Default `"info"`.
    pub level: String,
}

/// `[listeners.<name>]`: one place clients connect to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawListener {
    /// Client dialect: `"jsonrpc-ws"`, `"holon-rpc"`, `"sideband"`
    /// (WebSocket) or `"ndjson"` (Unix socket). Required; no default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dialect: Option<String>,
    /// WebSocket dialects: `IP:port` to bind (port 0 picks a free port).
    /// Required for them, not allowed for `ndjson`. No default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// WebSocket dialects: HTTP path that upgrades; must start with `/`.
    /// Default `"/"`; not allowed for `ndjson`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `ndjson`: Unix socket path (a leading `~/` expands to `$HOME`); must
    /// fit `sun_path` (107 bytes). Required for it, not allowed for
    /// WebSocket dialects. No default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// `ndjson`: socket file mode as an octal string. Default `"0600"`
    /// (owner only: the socket is the access control); not allowed for
    /// WebSocket dialects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_mode: Option<String>,
    /// WebSocket dialects: PEM certificate chain file; with `tls_key`, the
    /// listener serves `wss://`. Both or neither; listeners sharing an
    /// address must agree. Default: none (plain `ws://`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<String>,
    /// WebSocket dialects: PEM private key file for `tls_cert`. Default:
    /// none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<String>,
    /// Largest inbound message (WebSocket message or NDJSON line), checked
    /// in the framing layer before parsing. Default `1048576` (1 MiB).
    pub max_message_bytes: usize,
    /// Largest JSON-RPC batch, in items. Default `100`.
    pub max_batch_items: usize,
    /// Requests one client connection may have in flight before it gets
    /// `resource_exhausted`. Default `256`.
    pub max_in_flight: usize,
    /// Outbound messages queued per client before its writer applies
    /// backpressure; bounds memory held for a slow client. Default `1024`.
    pub outbox_capacity: usize,
    /// WebSocket ping period on idle connections. Default `30000`.
    pub ping_interval_ms: u64,
    /// How long a WebSocket peer may stay silent after a ping before it is
    /// dropped. Default `30000`.
    pub pong_timeout_ms: u64,
    /// Client request timeout, receipt to upstream reply. Default `30000`.
    pub request_timeout_ms: u64,
    /// Answer the JSON-RPC `ping` notification with a `pong` notification.
    /// Default `true`.
    pub answer_ping_notification: bool,
    /// Requests pushed to one client and not yet answered (holon `s<N>`).
    /// Default `64`.
    pub max_unanswered_pushes: usize,
    /// `sideband`: advertise CBOR envelopes (`encoding/cbor`). Default `true`.
    pub sideband_cbor: bool,
    /// `sideband`: accept the legacy `rpc/<method>` / `event/<name>`
    /// subjects on input. Default `false`.
    pub sideband_legacy_subjects: bool,
    /// `sideband`: what to do with `app/…` subjects: `"drop"` (counted) or
    /// `"reject"` (ErrorFrame 1003). Default `"drop"`.
    pub sideband_app_subjects: String,
    /// WebSocket: allowed `Host` names. Default `[]`: loopback names when
    /// bound to a loopback address, any otherwise.
    pub allowed_hosts: Vec<String>,
    /// WebSocket: allowed origins (`scheme://host[:port]`). Default `[]`:
    /// loopback origins (or none) when bound to loopback, any otherwise.
    pub allowed_origins: Vec<String>,
    /// WebSocket: bearer token required on the upgrade (`Authorization:
    /// Bearer …` or `?token=`). Default: none.
    pub auth_token: Option<String>,
    /// Messages per second per connection; 0 = off. Default `0`.
    pub rate_per_second: u32,
    /// Burst per connection; 0 = same as the rate. Default `0`.
    pub rate_burst: u32,
    /// Messages per second per client IP; 0 = off. Default `0`.
    pub ip_rate_per_second: u32,
    /// Burst per client IP; 0 = same as the rate. Default `0`.
    pub ip_rate_burst: u32,
    /// Messages per second for the whole listener; 0 = off. Default `0`.
    pub global_rate_per_second: u32,
    /// Listener-wide burst; 0 = same as the rate. Default `0`.
    pub global_rate_burst: u32,
    /// Weight of a method against the rates (default 1 each). Default `{}`.
    pub method_weights: BTreeMap<String, u32>,
    /// Rate-limited messages in a row before the connection is closed
    /// with 1008; 0 = never. Default `100`.
    pub abuse_threshold: u32,
    /// Open connections on this listener; 0 = unlimited. Default `10000`.
    pub max_connections: usize,
    /// Open connections per client IP; 0 = unlimited. Default `0`.
    pub max_connections_per_ip: usize,
    /// Close a connection that sends nothing for this long; 0 = never.
    /// Default `0`.
    pub idle_timeout_ms: u64,
    /// Close a connection after this long; 0 = never. Default `0`.
    pub max_connection_lifetime_ms: u64,
    /// A client whose outbox stays full this long is closed with 1008 and
    /// its pending calls purged. Default `10000`.
    pub slow_consumer_timeout_ms: u64,
}

/// `[upstreams.<name>]`: one backend switchyard forwards to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawUpstream {
    /// Upstream dialect: `"ndjson"` (Unix socket) or `"jsonrpc-ws"`,
    /// `"holon-rpc"`, `"sideband"` (WebSocket). Required; no default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dialect: Option<String>,
    /// `ndjson`: Unix socket path (a leading `~/` expands to `$HOME`); must
    /// fit `sun_path` (107 bytes). Required for it, not allowed otherwise.
    /// No default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// WebSocket dialects: `ws://` or `wss://` URL. Required for them, not
    /// allowed for `ndjson`. No default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `"shared"` (one pool multiplexed for all clients) or `"per-client"`
    /// (one upstream connection per client connection). Default `"shared"`.
    pub mode: String,
    /// Persistent connections in the shared pool. Default `4`.
    pub pool_size: usize,
    /// Requests in flight on one upstream connection. Default `32`.
    pub max_in_flight_per_connection: usize,
    /// Requests in flight on the whole upstream. Default `256`.
    pub max_pending: usize,
    /// Requests that may wait for a slot at `max_pending` before calls fail
    /// with `resource_exhausted`; 0 disables waiting. Default `1024`.
    pub max_queued: usize,
    /// Largest message sent upstream (NDJSON: including the `\n`).
    /// Default `1048576` (1 MiB; the `hld` profile raises it to 10 MiB).
    pub max_request_bytes: usize,
    /// Largest message read from the upstream. Default `16777216` (16 MiB).
    pub max_response_bytes: usize,
    /// Time allowed to establish a connection. Default `2000`.
    pub connect_timeout_ms: u64,
    /// First reconnect delay after a failure. Default `500`.
    pub backoff_initial_ms: u64,
    /// Upper bound of the reconnect delay. Default `30000`.
    pub backoff_max_ms: u64,
    /// `jsonrpc-ws`/`sideband`: WebSocket ping period. Default `30000`.
    pub ping_interval_ms: u64,
    /// `jsonrpc-ws`/`sideband`: how long the link may stay silent after a
    /// ping before it is closed. Default `30000`.
    pub pong_timeout_ms: u64,
    /// `holon-rpc`: `rpc.heartbeat` period. Default `15000`.
    pub heartbeat_interval_ms: u64,
    /// `holon-rpc`: time a heartbeat may go unanswered before the link is
    /// closed with 4000. Default `5000`.
    pub heartbeat_timeout_ms: u64,
    /// WebSocket upstreams: `Origin` header to send (some servers refuse
    /// upgrades without one). Default: none.
    pub origin: Option<String>,
    /// `jsonrpc-ws`: offer the `jsonrpc` subprotocol. Default `false`.
    pub offer_subprotocol: bool,
    /// `ndjson`: what client notifications become: `"forward"` (true
    /// notifications) or `"as-request"` (alias `"request"`: sent with a
    /// gateway id, reply discarded). Default `"forward"`.
    pub notifications: String,
    /// `ndjson`: the upstream replies in request order; checked, and
    /// `id:null` errors go to the oldest call. Default `false`.
    pub ordered_replies: bool,
    /// `ndjson`: send `"params":{}` when the client omitted params.
    /// Default `false`.
    pub fill_empty_params: bool,
    /// The upstream accepts JSON-RPC batches; otherwise they are fanned out.
    /// Default `false`.
    pub accepts_batches: bool,
    /// Methods that stream (one dedicated connection per call).
    /// Default `[]`.
    pub streaming_methods: Vec<String>,
    /// Readiness waits for this upstream to be connected. Default `false`.
    pub required: bool,
    /// `"none"` or `"hld"` (`ndjson` only). `hld` sets
    /// `notifications = "as-request"`, `ordered_replies = true`,
    /// `fill_empty_params = true`, `streaming_methods = ["Subscribe"]` and
    /// `max_request_bytes = 10485760` wherever those keys are left at their
    /// defaults. Default `"none"`.
    pub profile: String,
}

/// The top level only, to learn section names when the whole does not load.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Sections {
    gateway: IgnoredAny,
    log: IgnoredAny,
    listeners: BTreeMap<String, IgnoredAny>,
    upstreams: BTreeMap<String, IgnoredAny>,
    routes: Vec<figment::value::Value>,
    admin: IgnoredAny,
    tracing: IgnoredAny,
}

/// Request size the `hld` profile allows (hld's own line limit is 10 MiB).
const HLD_MAX_REQUEST_BYTES: usize = 10 << 20;

/// `[[routes]]`: send a listener's methods to an upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawRoute {
    /// Name of a `[listeners.<name>]`. Required; no default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
    /// Name of an `[upstreams.<name>]`. Required; no default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// Methods starting with this prefix go to `upstream` (longest prefix
    /// wins). Absent (the default): this is the listener's default route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method_prefix: Option<String>,
}

// === impl RawConfig ===

impl RawConfig {
    /// Merges defaults ← `file` (if given; a missing file is an error) ←
    /// `SWITCHYARD_*` environment (nested keys split on `__`, lower-cased).
    /// Unknown keys and wrongly typed values are load errors, all reported.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Self::default()));
        if let Some(path) = file {
            // Checked up front: figment would report a bare I/O error.
            if let Err(e) = std::fs::metadata(path) {
                return Err(ConfigError::load(format!(
                    "{}: cannot read configuration file: {e}",
                    path.display()
                )));
            }
            figment = figment.merge(Toml::file_exact(path));
        }
        extract(&figment.merge(Env::prefixed(ENV_PREFIX).split(ENV_SEPARATOR)))
    }

    /// Merges defaults ← the TOML document `text`; the environment is not
    /// consulted (tests, the embedded demo).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        extract(&Figment::from(Serialized::defaults(Self::default())).merge(Toml::string(text)))
    }

    /// Renders the effective configuration as TOML for `switchyard check`:
    /// defaults filled in and each upstream's profile applied.
    pub fn to_toml_string(&self) -> String {
        let mut effective = self.clone();
        for upstream in effective.upstreams.values_mut() {
            *upstream = upstream.with_profile_defaults();
        }
        toml::to_string(&effective).expect(
            "RawConfig holds only strings, integers, bools, arrays and string-keyed tables, which TOML can represent; qed",
        )
    }
}

/// Deserializes `figment`. Serde stops at the first error, so on failure
/// each section is deserialized on its own: a typo in one listener does not
/// hide a wrong type in an upstream.
fn extract(figment: &Figment) -> Result<RawConfig, ConfigError> {
    let whole = match figment.extract::<RawConfig>() {
        Ok(raw) => return Ok(raw),
        Err(e) => e,
    };
    let sections = figment.extract::<Sections>()?;
    let mut errors = Vec::new();
    errors.extend(section::<RawGateway>(figment, "gateway".into()));
    errors.extend(section::<RawLog>(figment, "log".into()));
    errors.extend(section::<RawAdmin>(figment, "admin".into()));
    errors.extend(section::<RawTracing>(figment, "tracing".into()));
    // A name containing '.' cannot be addressed by a figment path; such a
    // section is only checked as part of the whole.
    for name in sections.listeners.keys().filter(|n| !n.contains('.')) {
        errors.extend(section::<RawListener>(figment, format!("listeners.{name}")));
    }
    for name in sections.upstreams.keys().filter(|n| !n.contains('.')) {
        errors.extend(section::<RawUpstream>(figment, format!("upstreams.{name}")));
    }
    let mut problems: Vec<String> = errors
        .into_iter()
        .flatten()
        .map(|e| e.to_string())
        .collect();
    for (i, route) in sections.routes.iter().enumerate() {
        // A bare value has no source or path, so name the route here.
        let error = RawRoute::deserialize(route).err();
        problems.extend(error.map(|e| format!("routes[{i}]: {e}")));
    }
    if problems.is_empty() {
        problems.extend(whole.into_iter().map(|e| e.to_string()));
    }
    Err(ConfigError::Load(problems))
}

/// The error, if any, of deserializing the section at `path` on its own.
fn section<T: DeserializeOwned>(figment: &Figment, path: String) -> Option<figment::Error> {
    let mut error = figment.extract_inner::<T>(&path).err()?;
    // `extract_inner` appends `path` after the key inside the section: put
    // it first so the message names `listeners.public.address`.
    let inner = error.path.len().saturating_sub(path.split('.').count());
    error.path.rotate_left(inner);
    Some(error)
}

// === impl RawGateway ===

impl Default for RawGateway {
    fn default() -> Self {
        Self {
            shutdown_grace_ms: 5_000,
            worker_threads: 0,
        }
    }
}

// === impl RawLog ===

impl Default for RawLog {
    fn default() -> Self {
        Self {
            format: "text".to_owned(),
            level: "info".to_owned(),
        }
    }
}

// === impl RawTracing ===

impl Default for RawTracing {
    fn default() -> Self {
        Self {
            enabled: false,
            endpoint: DEFAULT_OTLP_ENDPOINT.to_owned(),
            protocol: "http/protobuf".to_owned(),
            sampling_ratio: 1.0,
            record_ids: false,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
        }
    }
}

// === impl RawListener ===

impl Default for RawListener {
    fn default() -> Self {
        Self {
            dialect: None,
            address: None,
            path: None,
            socket: None,
            socket_mode: None,
            tls_cert: None,
            tls_key: None,
            max_message_bytes: 1 << 20,
            max_batch_items: 100,
            max_in_flight: 256,
            outbox_capacity: 1024,
            ping_interval_ms: 30_000,
            pong_timeout_ms: 30_000,
            request_timeout_ms: 30_000,
            answer_ping_notification: true,
            max_unanswered_pushes: 64,
            sideband_cbor: true,
            sideband_legacy_subjects: false,
            sideband_app_subjects: String::from("drop"),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            auth_token: None,
            rate_per_second: 0,
            rate_burst: 0,
            ip_rate_per_second: 0,
            ip_rate_burst: 0,
            global_rate_per_second: 0,
            global_rate_burst: 0,
            method_weights: BTreeMap::new(),
            abuse_threshold: 100,
            max_connections: 10_000,
            max_connections_per_ip: 0,
            idle_timeout_ms: 0,
            max_connection_lifetime_ms: 0,
            slow_consumer_timeout_ms: 10_000,
        }
    }
}

// === impl RawUpstream ===

impl RawUpstream {
    /// This upstream with its `profile`'s values filled into the keys left
    /// at their defaults. Unchanged for `"none"`, unknown profiles and
    /// non-`ndjson` upstreams, which validation reports.
    pub fn with_profile_defaults(&self) -> Self {
        let mut out = self.clone();
        if self.profile != "hld" || self.dialect.as_deref() != Some("ndjson") {
            return out;
        }
        let defaults = Self::default();
        if self.notifications == defaults.notifications {
            out.notifications = "as-request".to_owned();
        }
        // Their defaults are `false`, so `true` is all the profile can add.
        out.ordered_replies = true;
        out.fill_empty_params = true;
        if self.streaming_methods.is_empty() {
            out.streaming_methods = vec!["Subscribe".to_owned()];
        }
        if self.max_request_bytes == defaults.max_request_bytes {
            out.max_request_bytes = HLD_MAX_REQUEST_BYTES;
        }
        out
    }
}

impl Default for RawUpstream {
    fn default() -> Self {
        Self {
            dialect: None,
            socket: None,
            url: None,
            mode: "shared".to_owned(),
            pool_size: 4,
            max_in_flight_per_connection: 32,
            max_pending: 256,
            max_queued: 1024,
            max_request_bytes: 1 << 20,
            max_response_bytes: 16 << 20,
            connect_timeout_ms: 2_000,
            backoff_initial_ms: 500,
            ping_interval_ms: 30_000,
            pong_timeout_ms: 30_000,
            heartbeat_interval_ms: 15_000,
            heartbeat_timeout_ms: 5_000,
            origin: None,
            offer_subprotocol: false,
            backoff_max_ms: 30_000,
            notifications: "forward".to_owned(),
            ordered_replies: false,
            fill_empty_params: false,
            accepts_batches: false,
            streaming_methods: Vec::new(),
            required: false,
            profile: "none".to_owned(),
        }
    }
}
