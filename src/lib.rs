//! switchyard: a sidecar RPC gateway.
//!
//! # Layout
//!
//! - [`config`]: typed, validated configuration (figment: defaults ← TOML ← env).
//! - [`envelope`]: the protocol-neutral [`envelope::Message`] every dialect maps to.
//! - [`dialect`]: pure wire codecs, bytes ⇄ neutral message. No sockets, no tokio.
//! - [`error`]: switchyard's own error kinds and their rendering per dialect.
//! - [`daemon`]: the bundled reference NDJSON daemon (demo, tests, benches).
//! - [`client`]: a tiny client for `switchyard call`, speaking each listener dialect.

pub mod app;
pub mod client;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod dialect;
pub mod envelope;
pub mod error;
pub mod router;
pub mod shutdown;
pub mod telemetry;
pub mod transport;
pub mod upstream;
