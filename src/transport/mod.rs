//! I/O only: accepting client connections, framing, per-connection tasks.
//!
//! [`ws`] serves the WebSocket dialects through axum; [`session`] is the
//! transport-independent request handling every connection shares.

use tokio_util::sync::CancellationToken;

use tokio_util::task::TaskTracker;

pub(crate) mod accept;
pub(crate) mod driver;
pub mod session;
pub(crate) mod tls;
pub(crate) mod unix;
pub(crate) mod ws;

/// What every listener task needs to serve and to shut down.
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

/// Counts a client connection as accepted and open; closed when dropped.
#[derive(Debug)]
pub(crate) struct OpenConnection(prometheus::IntGauge);

impl OpenConnection {
    /// Counts a new connection on `route`'s listener.
    pub(crate) fn count(route: &crate::router::Route) -> Self {
        let name = route.cfg.name.as_str();
        let metrics = route.metrics();
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
