//! One message as the load generator receives it, whatever its framing: the
//! vocabulary shared by the connections ([`super::conn`], [`super::http`])
//! and the reply parsers ([`super::wire`]).

use tokio_tungstenite::tungstenite::{Bytes, Utf8Bytes};

/// One received message.
#[derive(Debug)]
pub(crate) enum Received {
    /// A WebSocket text frame.
    Frame(Utf8Bytes),
    /// An NDJSON line.
    Line(String),
    /// A WebSocket binary frame.
    Binary(Bytes),
    /// An HTTP response body.
    Body(bytes::Bytes),
}

// === impl Received ===

impl Received {
    /// The text of a text frame or line; `None` for binary data.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Received::Frame(t) => Some(t.as_str()),
            Received::Line(s) => Some(s),
            Received::Body(b) => std::str::from_utf8(b).ok(),
            Received::Binary(_) => None,
        }
    }

    /// The raw bytes, whatever the framing.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Received::Frame(t) => t.as_bytes(),
            Received::Line(s) => s.as_bytes(),
            Received::Body(b) => b,
            Received::Binary(b) => b,
        }
    }
}
