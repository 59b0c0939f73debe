//! [`Outgoing`]: one thing a connection's writer sends, as the outbox
//! queues it.

use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::close::CloseCode;

/// What the writer of a connection sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// One text frame / NDJSON line. Shared bytes: an event fanned out to
    /// many clients is one buffer, not a copy per client.
    Text(Utf8Bytes),
    /// One text frame / NDJSON line that switchyard rendered: its bytes
    /// were copied from a `str` (see `take` in the outbox), so they are
    /// UTF-8 and are not checked again on the way out (a WebSocket writes
    /// them as a raw text frame).
    Rendered(bytes::Bytes),
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
            Outgoing::Rendered(b) => b.len(),
            Outgoing::Binary(b) => b.len(),
            Outgoing::Ping | Outgoing::Close(..) => 0,
        };
        i64::try_from(size).unwrap_or(i64::MAX)
    }

    /// A [`Outgoing::Rendered`] frame as [`Outgoing::Text`] (its bytes
    /// checked as UTF-8), for a reader that needs the text as a `str`;
    /// any other frame as it is.
    pub fn checked(self) -> Self {
        match self {
            Outgoing::Rendered(bytes) => Outgoing::Text(
                // Copied from a `str`: the check cannot fail (no `unsafe`
                // here); lossy rather than a panic all the same.
                Utf8Bytes::try_from(bytes.clone())
                    .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned().into()),
            ),
            other => other,
        }
    }
}
