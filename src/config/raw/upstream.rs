//! `[upstreams.<name>]` as written, before validation, and the `hld`
//! profile's defaults.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[upstreams.<name>]`: one backend switchyard forwards to.
// Not `Eq`: feed params are any JSON value.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
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
    /// `jsonrpc-http`: extra request headers sent with every POST (e.g.
    /// the upstream's own `Authorization`). Values are secrets: `check`
    /// and logs show them masked. Default: none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `jsonrpc-http`: when HTTP/2 is spoken. `"alpn"`: when an
    /// `https://` server chooses it by ALPN, HTTP/1.1 keep-alive
    /// otherwise. `"prior-knowledge"`: always, without asking (h2c on
    /// `http://` and `http+unix://`, ALPN `h2` alone on `https://`), so
    /// every call multiplexes on one connection. Default `"alpn"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http2: Option<String>,
    /// `ndjson`: run this program (argv: program, then its arguments; no
    /// shell) and speak NDJSON on its stdin/stdout instead of dialing
    /// `socket`. Exactly one of `socket` and `command`. No default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// `command`: variables added to the environment switchyard passes on.
    /// Default `{}`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `command`: the working directory of the process. Default: switchyard's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// `command`: processes of this upstream alive at once (shared pool
    /// and per-client processes); at the cap a per-client call fails with
    /// `resource_exhausted`. Default `64`.
    pub max_processes: usize,
    /// `command`: how long a process may take to exit after SIGTERM before
    /// it gets SIGKILL. Default `1000`.
    pub stop_grace_ms: u64,
    /// `wss://` URLs: PEM file of the CA certificates that vouch for the
    /// upstream's certificate; only they are trusted. Default: none (the
    /// system's root certificates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// `"shared"` (one pool multiplexed for all clients) or `"per-client"`
    /// (one upstream connection per client connection). Default `"shared"`.
    pub mode: String,
    /// Persistent connections in the shared pool. Default `2`.
    pub pool_size: usize,
    /// Requests in flight on one upstream connection. Default `4096`.
    pub max_in_flight_per_connection: usize,
    /// Requests in flight on the whole upstream. Default `4096`.
    pub max_pending: usize,
    /// Requests that may wait for a slot at `max_pending`; past it, calls
    /// fail with `resource_exhausted`; 0 disables waiting. The waiting
    /// requests are also bounded by the clients' in-flight caps. Default
    /// `65536`.
    pub max_queued: usize,
    /// How long a request may wait for room (a slot under `max_pending`
    /// and a connection below its in-flight cap) before it fails with
    /// `resource_exhausted`. Default `10000`.
    pub queue_timeout_ms: u64,
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
    /// Publish the notifications this upstream sends on its shared
    /// connections to the pub/sub broker, under `<upstream>.<method>`.
    /// Default `true`.
    pub publish_notifications: bool,
    /// Topics for published notifications, by method, instead of
    /// `<upstream>.<method>`. Default `{}`.
    pub topics: BTreeMap<String, String>,
    /// `[[upstreams.<name>.feeds]]`: streaming methods switchyard opens
    /// itself, once, while a subscriber wants their topic. Default `[]`.
    pub feeds: Vec<RawFeed>,
    /// `"none"` or `"hld"` (`ndjson` only). `hld` sets
    /// `notifications = "as-request"`, `ordered_replies = true`,
    /// `fill_empty_params = true`, `streaming_methods = ["Subscribe"]` and
    /// `max_request_bytes = 10485760` wherever those keys are left at their
    /// defaults. Default `"none"`.
    pub profile: String,
}

/// `[[upstreams.<name>.feeds]]`: one streaming feed.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawFeed {
    /// The streaming method to call (hld: `"Subscribe"`). Required.
    pub method: String,
    /// Its params, as written (a TOML table or value). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<serde_json::Value>,
    /// The topic its events are published under. Default
    /// `"<upstream>.<method>"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
}

/// Default `max_processes`: enough for a few dozen concurrent per-client
/// sessions of a typical stdio tool, few enough that a flood of clients
/// cannot fork the host to exhaustion.
const DEFAULT_MAX_PROCESSES: usize = 64;

/// Request size the `hld` profile allows (hld's own line limit is 10 MiB).
const HLD_MAX_REQUEST_BYTES: usize = 10 << 20;

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
            headers: BTreeMap::new(),
            http2: None,
            command: None,
            env: BTreeMap::new(),
            cwd: None,
            max_processes: DEFAULT_MAX_PROCESSES,
            stop_grace_ms: 1_000,
            ca_file: None,
            mode: "shared".to_owned(),
            pool_size: 2,
            max_in_flight_per_connection: 4096,
            max_pending: 4096,
            max_queued: 65_536,
            queue_timeout_ms: 10_000,
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
            publish_notifications: true,
            topics: BTreeMap::new(),
            feeds: Vec::new(),
        }
    }
}
