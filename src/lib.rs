//! switchyard: a sidecar RPC gateway.
//!
//! # Layout
//!
//! A client frame flows: [`transport`] (accept, framing, the one
//! connection driver, under the [`transport::Listener`]'s limits) →
//! [`dialect`] (pure decode into a neutral [`envelope::Message`]) →
//! [`transport::session`] (in-flight permit, or back-pressure at the cap;
//! a request to a pooled upstream is handed over from the reader, written
//! at once or parked in the upstream's queue until there is room; anything
//! else gets a task) → the listener's [`router::Router`]
//! (method → upstream; the pub/sub and persistent methods are served
//! here) → [`upstream`]
//! (pooled links, gateway ids in a [`upstream::correlator::Correlator`]) →
//! and the reply back the same way, with the client's original id
//! restored, into the client's [`outbox::Outbox`].
//!
//! Layers, lowest first, each importing only from the ones before it:
//! [`envelope`], [`close`], [`error`], [`lines`] and [`redact`] (nothing
//! from the crate) →
//! [`dialect`] → [`pubsub`] → [`persist`] → [`upstream`], [`outbox`] →
//! [`router`] → [`transport`].
//!
//! - [`app`]: composition root; bind every listener, then run; configuration reload; shutdown order.
//! - [`admin`]: the admin listener: `/metrics`, `/livez`, `/readyz`, status page, `POST /reload`, behind tower-http layers.
//! - [`config`]: typed, validated configuration (figment: defaults ← TOML ← env).
//! - [`envelope`]: the protocol-neutral message every dialect maps to.
//! - [`close`]: the WebSocket close codes switchyard sends, as a closed set.
//! - [`redact`]: secrets hidden wherever configuration values are shown (`check`, problems, status page, logs).
//! - [`lines`]: NDJSON line framing for the NDJSON listener and upstream links: a read buffer bounded by one line that does not keep a long line's memory.
//! - [`dialect`]: pure wire codecs, bytes ⇄ neutral message. No sockets, no tokio.
//! - [`error`]: switchyard's own error kinds and the side that caused each; [`dialect::errors`] renders them per dialect (every error code lives there).
//! - [`pubsub`]: topic pub/sub (`rpc.subscribe` …): topic syntax, the subject trie, the broker
//!   shared by all connections, and the four methods; [`pubsub::nats`], NATS core as the
//!   broker's backbone across instances.
//! - [`persist`]: persistent subscriptions (`rpc.subscribe.persistent` …):
//!   the store contract and its backends (the local engine over a memory or
//!   embedded log; NATS JetStream), the hub of subscription holders, the six
//!   methods, and the hand-off from the broker's publishers to the store.
//! - [`limits`]: rate limits, the in-flight caps (`cap`), browser-safety checks (Host, Origin, token) and the method policy.
//! - [`outbox`]: the one way anything is written to a client: queue bounded in messages and bytes, codec, frame buffer, slow-consumer policy.
//! - [`router`]: a listener's `Router`: route table, method policy, reply delivery, the pub/sub
//!   and persistent methods and event delivery.
//! - [`upstream`]: connection pools to the services behind switchyard;
//!   [`upstream::correlator`] holds a link's calls out: each one's gateway id, who waits
//!   for its outcome, and the room it holds until it settles.
//! - [`transport`]: client-facing I/O: each `Listener` (config, limits, upgrade checks, its
//!   router; in a `ListenerCell` a reload swaps), WebSocket and Unix listeners, the connection
//!   driver, sessions; the `jsonrpc-http` listener (`POST` bodies and Server-Sent Events) on
//!   the WebSocket listeners' servers.
//! - [`telemetry`]: logging, Prometheus metrics and OpenTelemetry trace export.
//! - [`shutdown`]: SIGINT/SIGTERM as one future; SIGHUP (reload) as events; READY/RELOADING/STOPPING for systemd `Type=notify`.
//! - [`stdout`]: the CLI's output, with a closed stdout a clean end, never a panic.
//! - [`throttle`]: rate-limited log lines (one per key per period, the rest counted), for events a flood could repeat.
//! - [`daemon`]: the bundled reference NDJSON daemon (demo, tests, benches).
//! - [`client`]: a tiny client for `switchyard call` and `switchyard watch`, speaking each listener dialect.
//! - [`demo`]: `switchyard demo`, every dialect in front of the reference daemon, and the browser playground.

// The crate's documentation is for its developers, read with
// `cargo doc --document-private-items`: module docs name the private
// items they are built from.
#![allow(rustdoc::private_intra_doc_links)]

pub mod admin;
pub mod app;
pub mod client;
pub mod close;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod dialect;
pub mod envelope;
pub mod error;
pub mod limits;
pub mod lines;
pub mod outbox;
pub mod persist;
pub mod pubsub;
pub mod redact;
pub mod router;
pub mod shutdown;
pub mod stdout;
pub mod telemetry;
pub mod throttle;
pub mod transport;
pub mod upstream;
