//! `[listeners.<name>]` as written, before validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    /// Requests one client connection may have in flight; at the cap the
    /// connection is not read until a reply frees a slot. Default `256`.
    pub max_in_flight: usize,
    /// Outbound messages queued per client before its writer applies
    /// backpressure; bounds memory held for a slow client. Default `1024`.
    pub outbox_capacity: usize,
    /// Bytes of outbound frames queued per client (the outbox's byte
    /// budget): a push or event that would go over it is dropped, a reply
    /// waits for room (at most `slow_consumer_timeout_ms`, and only while
    /// the replies waiting hold at most this many bytes, or it is alone:
    /// else the client is a slow consumer at once). An empty queue takes
    /// one frame of any size. At least `max_message_bytes`.
    /// Default `4194304` (4 MiB).
    pub outbox_max_bytes: usize,
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
    /// `jsonrpc` over WebSocket only, a diagnostic: answer every text and
    /// binary message with itself instead of routing it (for WebSocket
    /// conformance runs such as `scripts/autobahn.sh`). Default `false`.
    pub echo: bool,
    /// `sideband`: accept the legacy `rpc/<method>` / `event/<name>`
    /// subjects on input. Default `false`.
    pub sideband_legacy_subjects: bool,
    /// `sideband`: what to do with `app/…` subjects: `"drop"` (counted) or
    /// `"reject"` (ErrorFrame 1003). Default `"drop"`.
    pub sideband_app_subjects: String,
    /// WebSocket: allowed `Host` names. Default `[]`: loopback names when
    /// bound to a loopback address, any otherwise.
    pub allowed_hosts: Vec<String>,
    /// WebSocket: allowed origins (`scheme://host[:port]`), or `["*"]` for
    /// any. Default `[]`: loopback origins when bound to loopback; required
    /// (validation fails) when bound to any other address.
    pub allowed_origins: Vec<String>,
    /// WebSocket: bearer token required on the upgrade (`Authorization:
    /// Bearer …` or `?token=`). Default: none.
    pub auth_token: Option<String>,
    /// Methods clients may call, as patterns (`*` = any run of characters,
    /// dots included). Default `[]`: every method not denied.
    pub allow_methods: Vec<String>,
    /// Methods clients may not call, as patterns; wins over
    /// `allow_methods`. Default `[]`.
    pub deny_methods: Vec<String>,
    /// Topic patterns (NATS style) clients may subscribe to. Default `[]`:
    /// the topics of the upstreams the listener routes to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_topics: Vec<String>,
    /// Topic patterns clients may not subscribe to (a pattern that could
    /// match one of them is refused). Default `[]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny_topics: Vec<String>,
    /// `[[listeners.<name>.clients]]`: named clients, each with its own
    /// token and policy. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<crate::config::clients::RawClient>,
    /// `[listeners.<name>.jwt]`: JWT bearer tokens. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt: Option<crate::config::jwt::RawJwt>,
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
    /// WebSocket dialects: time a new connection has to send its HTTP
    /// request head (after the TLS handshake, which gets as long again);
    /// also the longest an HTTP connection may wait between requests.
    /// Then it is closed. Listeners sharing an address use the smallest.
    /// Must be at least 1. Default `10000`.
    pub header_read_timeout_ms: u64,
    /// Open connections on this listener; 0 = unlimited. Default `10000`.
    pub max_connections: usize,
    /// Open connections per client IP; 0 = unlimited. Default `0`.
    pub max_connections_per_ip: usize,
    /// Close a connection that sends nothing for this long; 0 = never.
    /// Default `0`.
    pub idle_timeout_ms: u64,
    /// Close a connection after this long; 0 = never. Default `0`.
    pub max_connection_lifetime_ms: u64,
    /// A client whose outbox stays full (`outbox_capacity` messages or
    /// `outbox_max_bytes` bytes) this long, or whose replies waiting for
    /// room would go over `outbox_max_bytes`, is closed with 1008 and its
    /// pending calls purged. Default `10000`.
    pub slow_consumer_timeout_ms: u64,
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
            outbox_max_bytes: 4 << 20,
            ping_interval_ms: 30_000,
            pong_timeout_ms: 30_000,
            request_timeout_ms: 30_000,
            answer_ping_notification: true,
            max_unanswered_pushes: 64,
            sideband_cbor: true,
            echo: false,
            sideband_legacy_subjects: false,
            sideband_app_subjects: String::from("drop"),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            auth_token: None,
            allow_methods: Vec::new(),
            deny_methods: Vec::new(),
            allow_topics: Vec::new(),
            deny_topics: Vec::new(),
            clients: Vec::new(),
            jwt: None,
            rate_per_second: 0,
            rate_burst: 0,
            ip_rate_per_second: 0,
            ip_rate_burst: 0,
            global_rate_per_second: 0,
            global_rate_burst: 0,
            method_weights: BTreeMap::new(),
            abuse_threshold: 100,
            header_read_timeout_ms: 10_000,
            max_connections: 10_000,
            max_connections_per_ip: 0,
            idle_timeout_ms: 0,
            max_connection_lifetime_ms: 0,
            slow_consumer_timeout_ms: 10_000,
        }
    }
}
