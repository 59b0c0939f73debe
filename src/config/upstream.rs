//! One `[upstreams.<name>]` table: its typed form ([`UpstreamConfig`])
//! and its validation: target, mode, profile, pool and timing keys.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use super::raw::RawUpstream;
use super::validate::{check_name, dialect, socket_path, Problems};
use super::Publish;
use crate::dialect::Dialect;

/// How client messages share upstream connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamMode {
    /// One pool of connections multiplexed for all clients.
    Shared,
    /// One upstream connection per client connection.
    PerClient,
}

/// What a client notification becomes on an NDJSON upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationPolicy {
    /// Sent as a true JSON-RPC notification (no id).
    Forward,
    /// Sent as a request with a gateway id; the reply is read and discarded
    /// (for daemons such as hld that answer notifications).
    AsRequest,
}

/// Where an upstream is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamTarget {
    /// A Unix stream socket (NDJSON).
    Unix(PathBuf),
    /// A WebSocket URL (`ws://` or `wss://`).
    Ws(String),
    /// A child process speaking NDJSON on its stdin and stdout.
    Process(ProcessSpec),
    /// An HTTP JSON-RPC endpoint (`jsonrpc-http`): one POST per call.
    Http(HttpTarget),
}

/// Where and how a `jsonrpc-http` upstream is called.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpTarget {
    /// `http://…`, `https://…` or `http+unix:///path/to.sock` (then the
    /// request path is `/`).
    pub url: String,
    /// Extra headers sent with every request (name, value).
    pub headers: Vec<(String, String)>,
    /// `http2 = "prior-knowledge"`: HTTP/2 on every connection without
    /// asking (h2c on cleartext); otherwise only when ALPN chooses it.
    pub http2_prior_knowledge: bool,
}

impl std::fmt::Debug for HttpTarget {
    /// Header values masked: they often hold credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("HttpTarget")
            .field("url", &crate::redact::url(&self.url))
            .field("headers (values masked)", &names)
            .field("http2_prior_knowledge", &self.http2_prior_knowledge)
            .finish()
    }
}

/// How to start an upstream process (`command`, `env`, `cwd`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSpec {
    /// The program, then its arguments; run directly, never by a shell.
    pub argv: Vec<String>,
    /// Variables added to the environment switchyard passes on.
    pub env: BTreeMap<String, String>,
    /// The working directory (switchyard's when `None`).
    pub cwd: Option<PathBuf>,
}

/// One named upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// Config name, used in logs and metric labels.
    pub name: String,
    /// Dialect the upstream speaks.
    pub dialect: Dialect,
    /// Where it is.
    pub target: UpstreamTarget,
    /// `wss://` targets: the CA certificates trusted instead of the
    /// system's roots (read when the upstream starts).
    pub ca_file: Option<PathBuf>,
    /// Connection sharing mode.
    pub mode: UpstreamMode,
    /// Persistent connections in the shared pool.
    pub pool_size: NonZeroUsize,
    /// Requests in flight on one upstream connection.
    pub max_in_flight_per_connection: NonZeroUsize,
    /// Requests in flight on the whole upstream; above it (and the wait
    /// queue) calls fail with `resource_exhausted`.
    pub max_pending: NonZeroUsize,
    /// Requests allowed to wait for a free slot when the upstream is at
    /// `max_pending`.
    pub max_queued: usize,
    /// How long a request may wait for room (a pending slot and a
    /// connection below its in-flight cap); then `resource_exhausted`.
    pub queue_timeout: Duration,
    /// Largest message switchyard sends (what the upstream accepts,
    /// including the NDJSON `\n`).
    pub max_request_bytes: usize,
    /// Largest message switchyard reads from the upstream.
    pub max_response_bytes: usize,
    /// Time allowed to establish a connection when none is up.
    pub connect_timeout: Duration,
    /// First reconnect delay after a failure.
    pub backoff_initial: Duration,
    /// Upper bound of the reconnect delay.
    pub backoff_max: Duration,
    /// WebSocket ping period (JSON-RPC, Sideband upstreams).
    pub ping_interval: Duration,
    /// Silence allowed after a ping before the link is closed.
    pub pong_timeout: Duration,
    /// holon-rpc heartbeat period.
    pub heartbeat_interval: Duration,
    /// Time a holon heartbeat may go unanswered (then close 4000).
    pub heartbeat_timeout: Duration,
    /// `Origin` header sent to WebSocket upstreams.
    pub origin: Option<String>,
    /// Offer the `jsonrpc` subprotocol to JSON-RPC upstreams.
    pub offer_subprotocol: bool,
    /// NDJSON: what client notifications become.
    pub notifications: NotificationPolicy,
    /// NDJSON: replies come in request order (hld); check it, and attribute
    /// `id:null` errors to the oldest call.
    pub ordered_replies: bool,
    /// NDJSON: send `"params":{}` when the client omitted params.
    pub fill_empty_params: bool,
    /// The upstream accepts JSON-RPC batches; otherwise they are fanned out.
    pub accepts_batches: bool,
    /// Methods that stream (hld `Subscribe`): dedicated connection per call.
    pub streaming_methods: Vec<String>,
    /// The readiness probe waits for this upstream to be connected.
    pub required: bool,
    /// What it publishes to the pub/sub broker.
    pub publish: Publish,
    /// Process upstreams: processes alive at once, pool and per-client.
    pub max_processes: NonZeroUsize,
    /// Process upstreams: time between SIGTERM and SIGKILL when a process
    /// is stopped.
    pub stop_grace: Duration,
}

/// Accepted upstream `mode` values.
const MODES: [(&str, UpstreamMode); 2] = [
    ("shared", UpstreamMode::Shared),
    ("per-client", UpstreamMode::PerClient),
];

/// Accepted upstream `profile` values (`true`: hld).
const PROFILES: [(&str, bool); 2] = [("none", false), ("hld", true)];

/// Accepted `notifications` values.
const POLICIES: [(&str, NotificationPolicy); 3] = [
    ("forward", NotificationPolicy::Forward),
    ("as-request", NotificationPolicy::AsRequest),
    ("request", NotificationPolicy::AsRequest),
];

pub(super) fn upstream(name: &str, raw: &RawUpstream, p: &mut Problems) -> Option<UpstreamConfig> {
    let key = format!("upstreams.{name}");
    check_name(&key, name, p);
    let dialect = dialect(&key, raw.dialect.as_deref(), p);
    let ws = dialect.is_some_and(Dialect::is_websocket);
    if p.choice(&key, "profile", &raw.profile, &PROFILES) == Some(true) && ws {
        p.at(&key, "profile", "\"hld\" applies to ndjson upstreams only");
    }
    let raw = &raw.with_profile_defaults();
    let target = dialect.and_then(|d| target(&key, d, raw, p));
    let mode = p.choice(&key, "mode", &raw.mode, &MODES);
    let notifications = p.choice(&key, "notifications", &raw.notifications, &POLICIES);
    check_upstream_keys(&key, raw, dialect.filter(|_| ws), notifications, p);
    let pool_size = p.nonzero(&key, "pool_size", raw.pool_size);
    let per_conn = raw.max_in_flight_per_connection;
    let per_conn = p.nonzero(&key, "max_in_flight_per_connection", per_conn);
    let max_pending = p.nonzero(&key, "max_pending", raw.max_pending);
    p.nonzero(&key, "max_request_bytes", raw.max_request_bytes);
    p.nonzero(&key, "max_response_bytes", raw.max_response_bytes);
    let publish = super::publish::publish(&key, name, raw, dialect, p);
    let ca_file = ca_file(&key, target.as_ref(), raw, p);
    let max_processes = p.nonzero(&key, "max_processes", raw.max_processes);
    if raw.command.is_some() && !ws {
        check_process_keys(&key, raw, mode, max_processes, p);
    }
    Some(UpstreamConfig {
        publish,
        connect_timeout: p.millis(&key, "connect_timeout_ms", raw.connect_timeout_ms),
        backoff_initial: p.millis(&key, "backoff_initial_ms", raw.backoff_initial_ms),
        ping_interval: p.millis(&key, "ping_interval_ms", raw.ping_interval_ms),
        pong_timeout: p.millis(&key, "pong_timeout_ms", raw.pong_timeout_ms),
        heartbeat_interval: p.millis(&key, "heartbeat_interval_ms", raw.heartbeat_interval_ms),
        heartbeat_timeout: p.millis(&key, "heartbeat_timeout_ms", raw.heartbeat_timeout_ms),
        origin: raw.origin.clone(),
        offer_subprotocol: raw.offer_subprotocol,
        backoff_max: Duration::from_millis(raw.backoff_max_ms),
        name: name.to_owned(),
        dialect: dialect?,
        ca_file,
        target: target?,
        mode: mode?,
        pool_size: pool_size?,
        max_in_flight_per_connection: per_conn?,
        max_pending: max_pending?,
        max_queued: raw.max_queued,
        queue_timeout: p.millis(&key, "queue_timeout_ms", raw.queue_timeout_ms),
        max_request_bytes: raw.max_request_bytes,
        max_response_bytes: raw.max_response_bytes,
        notifications: notifications?,
        ordered_replies: raw.ordered_replies,
        fill_empty_params: raw.fill_empty_params,
        accepts_batches: raw.accepts_batches,
        streaming_methods: raw.streaming_methods.clone(),
        required: raw.required,
        max_processes: max_processes?,
        stop_grace: Duration::from_millis(raw.stop_grace_ms),
    })
}

/// Cross-key checks of one upstream; `ws` is its dialect if WebSocket.
fn check_upstream_keys(
    key: &str,
    raw: &RawUpstream,
    ws: Option<Dialect>,
    policy: Option<NotificationPolicy>,
    p: &mut Problems,
) {
    if policy == Some(NotificationPolicy::Forward) && raw.ordered_replies {
        let msg = "notifications = \"forward\" cannot be combined with ordered_replies = true: a daemon that replies in order also answers notifications, which would desynchronise replies; use notifications = \"as-request\"";
        p.push(key, msg);
    }
    if raw.accepts_batches && raw.ordered_replies {
        let msg = "accepts_batches = true cannot be combined with ordered_replies = true: a batch reply is one line whose items may come in any order";
        p.push(key, msg);
    }
    if let Some(d) = ws {
        let as_request = policy == Some(NotificationPolicy::AsRequest);
        p.not_allowed(key, "notifications", as_request, d);
        p.not_allowed(key, "ordered_replies", raw.ordered_replies, d);
        p.not_allowed(key, "fill_empty_params", raw.fill_empty_params, d);
    }
    if raw.backoff_max_ms < raw.backoff_initial_ms {
        p.at(key, "backoff_max_ms", "must be >= backoff_initial_ms");
    }
    for (i, method) in raw.streaming_methods.iter().enumerate() {
        if method.is_empty() {
            p.at(key, &format!("streaming_methods[{i}]"), "must not be empty");
        }
    }
}

fn target(key: &str, d: Dialect, raw: &RawUpstream, p: &mut Problems) -> Option<UpstreamTarget> {
    if raw.command.is_none() {
        p.at_if(
            key,
            "env",
            !raw.env.is_empty(),
            "applies to command upstreams only",
        );
        p.at_if(
            key,
            "cwd",
            raw.cwd.is_some(),
            "applies to command upstreams only",
        );
    }
    if d.is_http() {
        return http_target(key, d, raw, p);
    }
    p.at_if(
        key,
        "headers",
        !raw.headers.is_empty(),
        "applies to jsonrpc-http upstreams only",
    );
    p.at_if(
        key,
        "http2",
        raw.http2.is_some(),
        "applies to jsonrpc-http upstreams only",
    );
    if !d.is_websocket() {
        p.not_allowed(key, "url", raw.url.is_some(), d);
        if let Some(argv) = &raw.command {
            return process(key, argv, raw, p);
        }
        return socket_path(key, raw.socket.as_deref(), p).map(UpstreamTarget::Unix);
    }
    p.not_allowed(key, "socket", raw.socket.is_some(), d);
    p.not_allowed(key, "command", raw.command.is_some(), d);
    match raw.url.as_deref() {
        None => p.at(key, "url", format!("required for dialect {d}")),
        Some(url) if url.starts_with("ws://") || url.starts_with("wss://") => {
            return Some(UpstreamTarget::Ws(url.to_owned()));
        }
        Some(url) => {
            let shown = crate::redact::url(url);
            let msg = format!("must start with ws:// or wss:// (got {shown:?})");
            p.at(key, "url", msg);
        }
    }
    None
}

/// A `jsonrpc-http` upstream's URL, headers and HTTP/2 choice.
fn http_target(
    key: &str,
    d: Dialect,
    raw: &RawUpstream,
    p: &mut Problems,
) -> Option<UpstreamTarget> {
    p.not_allowed(key, "socket", raw.socket.is_some(), d);
    p.not_allowed(key, "command", raw.command.is_some(), d);
    // Each call is one POST: nothing to hold open per client or per stream.
    let streams = !raw.streaming_methods.is_empty() || !raw.feeds.is_empty();
    let unsupported = "not supported for jsonrpc-http upstreams (each call is one POST)";
    p.at_if(key, "streaming_methods", streams, unsupported);
    p.at_if(key, "mode", raw.mode == "per-client", unsupported);
    p.at_if(
        key,
        "required",
        raw.required,
        "not supported for jsonrpc-http upstreams (no standing connection to wait for)",
    );
    let before = p.len();
    for (name, value) in &raw.headers {
        let ok = http::HeaderName::from_bytes(name.as_bytes()).is_ok()
            && http::HeaderValue::from_str(value).is_ok();
        p.at_if(
            key,
            &format!("headers.{name}"),
            !ok,
            "must be a valid HTTP header name and value",
        );
    }
    let prior_knowledge = match raw.http2.as_deref() {
        None | Some("alpn") => false,
        Some("prior-knowledge") => true,
        Some(other) => {
            let msg = format!("must be \"alpn\" or \"prior-knowledge\" (got {other:?})");
            p.at(key, "http2", msg);
            false
        }
    };
    let Some(url) = raw.url.as_deref() else {
        p.at(key, "url", format!("required for dialect {d}"));
        return None;
    };
    let scheme_ok = ["http://", "https://", "http+unix://"]
        .iter()
        .any(|s| url.starts_with(s));
    let valid = match url.strip_prefix("http+unix://") {
        Some(path) => path.starts_with('/'),
        None => url.parse::<http::Uri>().is_ok_and(|u| u.host().is_some()),
    };
    if !scheme_ok || !valid {
        let shown = crate::redact::url(url);
        let msg =
            format!("must be http://host…, https://host… or http+unix:///path (got {shown:?})");
        p.at(key, "url", msg);
    }
    (p.len() == before).then(|| {
        UpstreamTarget::Http(HttpTarget {
            url: url.to_owned(),
            headers: raw.headers.clone().into_iter().collect(),
            http2_prior_knowledge: prior_knowledge,
        })
    })
}

/// `command` (with `env` and `cwd`): a program to run, instead of `socket`.
fn process(
    key: &str,
    argv: &[String],
    raw: &RawUpstream,
    p: &mut Problems,
) -> Option<UpstreamTarget> {
    if raw.socket.is_some() {
        p.at(
            key,
            "command",
            "cannot be combined with socket: set exactly one",
        );
        return None;
    }
    let before = p.len();
    match argv.first() {
        None => p.at(key, "command", "must name a program"),
        Some(program) if program.is_empty() => p.at(key, "command[0]", "must not be empty"),
        Some(_) => {}
    }
    for (i, arg) in argv.iter().enumerate() {
        p.at_if(
            key,
            &format!("command[{i}]"),
            arg.contains('\0'),
            "must not contain NUL",
        );
    }
    for (name, value) in &raw.env {
        let bad = name.is_empty() || name.contains(['=', '\0']) || value.contains('\0');
        p.at_if(
            key,
            &format!("env.{name}"),
            bad,
            "names must be non-empty without '=' or NUL, values without NUL",
        );
    }
    let cwd = raw.cwd.as_deref().map(PathBuf::from);
    p.at_if(
        key,
        "cwd",
        cwd.as_ref().is_some_and(|c| c.as_os_str().is_empty()),
        "must not be empty",
    );
    (p.len() == before).then(|| {
        UpstreamTarget::Process(ProcessSpec {
            argv: argv.to_vec(),
            env: raw.env.clone(),
            cwd,
        })
    })
}

/// What a process upstream cannot do: stream (a call would need a process
/// of its own), or run more pooled processes than its cap.
fn check_process_keys(
    key: &str,
    raw: &RawUpstream,
    mode: Option<UpstreamMode>,
    max: Option<NonZeroUsize>,
    p: &mut Problems,
) {
    let streams = !raw.streaming_methods.is_empty() || !raw.feeds.is_empty();
    p.at_if(
        key,
        "streaming_methods",
        streams,
        "not supported for command upstreams (nor feeds)",
    );
    let max = max.map_or(usize::MAX, NonZeroUsize::get);
    if mode == Some(UpstreamMode::Shared) && raw.pool_size > max {
        p.at(
            key,
            "pool_size",
            format!("must be <= max_processes ({max}) for a command upstream"),
        );
    }
    p.at_if(
        key,
        "stop_grace_ms",
        raw.stop_grace_ms == 0,
        "must be greater than 0",
    );
}

/// `ca_file`: a non-empty path, for `wss://` URLs only. The file is read
/// when the upstream starts.
fn ca_file(
    key: &str,
    target: Option<&UpstreamTarget>,
    raw: &RawUpstream,
    p: &mut Problems,
) -> Option<PathBuf> {
    let path = raw.ca_file.as_deref()?;
    if path.is_empty() {
        p.at(key, "ca_file", "must not be empty");
    } else if matches!(target, Some(UpstreamTarget::Ws(url)) if !url.starts_with("wss://"))
        || matches!(target, Some(UpstreamTarget::Http(h)) if !h.url.starts_with("https://"))
    {
        p.at(key, "ca_file", "applies to wss:// URLs only");
    } else if matches!(
        target,
        Some(UpstreamTarget::Unix(_) | UpstreamTarget::Process(_))
    ) {
        p.at(key, "ca_file", "not allowed for dialect ndjson");
    }
    Some(PathBuf::from(path))
}
