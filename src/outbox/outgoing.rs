//! [`Outgoing`]: one thing a connection's writer sends, as the outbox
//! queues it.

use axum::extract::ws::Utf8Bytes;

use crate::close::CloseCode;

/// What the writer of a connection sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// One text frame / NDJSON line. Shared bytes: an event fanned out to
    /// many clients is one buffer, not a copy per client.
    Text(Utf8Bytes),
    /// One binary frame (Sideband).
    Binary(bytes::Bytes),
    /// A WebSocket ping (liveness check).
    Ping,
    /// Close the connection with this code and reason.
    Close(CloseCode, std::borrow::Cow<'static, str>),
}

// === impl Outgoing ===

impl Outgoing {
    /// Bytes of payload it holds.
    pub(super) fn size(&self) -> i64 {
        let size = match self {
            Outgoing::Text(t) => t.len(),
            Outgoing::Binary(b) => b.len(),
            Outgoing::Ping | Outgoing::Close(..) => 0,
        };
        i64::try_from(size).unwrap_or(i64::MAX)
    }
}
