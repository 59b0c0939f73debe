//! I/O only: accepting client connections, framing, per-connection tasks.
//!
//! A [`Listener`] is one configured listener as the transport serves it
//! (configuration, connection and rate limits, upgrade checks, metrics,
//! and the [`crate::router::Router`] its requests go to), read from its
//! [`ListenerCell`], which a reload swaps. `ws` serves the WebSocket
//! dialects through axum (and `http` the `jsonrpc-http` one, on the same
//! servers) and `unix` the NDJSON one; both run the one
//! connection driver (`driver`); [`session`] is the transport-independent
//! request handling every connection shares.

use tokio_util::sync::CancellationToken;

use tokio_util::task::TaskTracker;

pub(crate) mod accept;
pub(crate) mod address;
pub(crate) mod driver;
mod http;
mod listener;
pub(crate) mod paths;
pub mod session;
pub(crate) mod tls;
pub(crate) mod unix;
pub(crate) mod ws;

/// What every listener task needs to serve and to shut down. Its fields
/// are open to the crate: three independent handles that every listener
/// task clones or waits on, with no invariant between them to keep.
#[derive(Debug, Clone)]
pub(crate) struct Serve {
    /// Cancelled on shutdown: stop accepting, stop reading.
    pub(crate) shutdown: CancellationToken,
    /// Cancelled when the grace period is over: answer what is left.
    pub(crate) grace_over: CancellationToken,
    /// Every connection task, so shutdown can wait for them.
    pub(crate) sessions: TaskTracker,
}

pub use crate::outbox::Outgoing;
pub use listener::{Listener, ListenerCell};

/// Counts a client connection as accepted and open; closed when dropped.
#[derive(Debug)]
pub(crate) struct OpenConnection(prometheus::IntGauge);

impl OpenConnection {
    /// Counts a new connection on `listener`.
    pub(crate) fn count(listener: &Listener) -> Self {
        let name = listener.name();
        let metrics = listener.metrics();
        metrics
            .connections_accepted
            .with_label_values(&[name])
            .inc();
        let open = metrics.connections_open.with_label_values(&[name]);
        open.inc();
        OpenConnection(open)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A named client's open connection, counted in
/// `switchyard_client_connections_open` while it lives.
#[derive(Debug)]
pub(crate) struct OpenClientConnection(pub(crate) prometheus::IntGauge);

impl Drop for OpenClientConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}
