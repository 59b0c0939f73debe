//! The listener half of JSON-RPC 2.0, for the JSON-RPC WebSocket dialect,
//! NDJSON and JSON-RPC over HTTP, which differ only in framing. No per-connection state.
//! Pure: no sockets, no tokio.

use bytestring::ByteString;

use super::Style;
use crate::dialect::errors;
use crate::dialect::{Dialect, Inbound, Oversize};
use crate::envelope::{Message, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};

/// The subprotocol a JSON-RPC WebSocket client may offer (jsonrpc-ws.md §1).
pub const SUBPROTOCOL: &str = "jsonrpc";

/// The close reason for a message over the size limit.
pub const TOO_LARGE: &str = "message too large";

/// How a JSON-RPC client's texts are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One WebSocket text frame per message (or batch).
    Frame,
    /// One NDJSON line per message (or batch).
    Line,
    /// One HTTP POST body per message (or batch), its reply the response
    /// body (`jsonrpc-http`).
    Body,
}

/// One JSON-RPC client connection's codec: its framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonRpcClient {
    framing: Framing,
}

/// The subprotocol to select from a WebSocket client's offers: exactly
/// [`SUBPROTOCOL`], or none.
pub fn subprotocol<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    offered.into_iter().find(|p| *p == SUBPROTOCOL)
}

/// The `pong` notification that answers a `ping` notification, when
/// `answer_ping` is set (the JSON dialects and Sideband; holon-rpc has no
/// notifications).
pub fn pong(method: &str, answer_ping: bool) -> Option<Message> {
    (answer_ping && method == "ping").then(|| Message::Notification {
        method: "pong".into(),
        params: None,
    })
}

/// The wire id of push number `n` to a text client: the string `"s<n>"`.
pub fn push_id(n: u64) -> WireId {
    WireId::string(&compact_str::format_compact!("s{n}"))
}

/// The push number a text client's reply id `"s<n>"` answers.
pub fn push_number(id: &WireId) -> Option<u64> {
    id.as_json()
        .and_then(|t| t.strip_prefix("\"s"))
        .and_then(|t| t.strip_suffix('"'))
        .and_then(|n| n.parse::<u64>().ok())
}

// === impl JsonRpcClient ===

impl JsonRpcClient {
    /// JSON-RPC in WebSocket text frames.
    pub const WS: Self = JsonRpcClient {
        framing: Framing::Frame,
    };

    /// JSON-RPC in NDJSON lines.
    pub const LINES: Self = JsonRpcClient {
        framing: Framing::Line,
    };

    /// JSON-RPC in HTTP POST bodies.
    pub const HTTP: Self = JsonRpcClient {
        framing: Framing::Body,
    };

    /// The dialect this framing makes.
    pub const fn dialect(self) -> Dialect {
        match self.framing {
            Framing::Frame => Dialect::JsonRpc,
            Framing::Line => Dialect::Ndjson,
            Framing::Body => Dialect::JsonRpcHttp,
        }
    }

    /// How replies are rendered: raw values verbatim in a frame; in a line,
    /// minified where they hold line breaks.
    pub const fn style(self) -> Style {
        self.dialect().style()
    }

    /// Decodes one text frame or line; a batch holds at most
    /// `max_batch_items`.
    pub fn decode(self, text: &ByteString, max_batch_items: usize) -> Inbound {
        super::decode(text, max_batch_items)
    }

    /// The answer to a message over `limit` bytes before close 1009: a
    /// -32600 error to id `null` (`Message size exceeds maximum of N
    /// bytes`, an NDJSON client `Line exceeds maximum of N bytes`).
    pub fn oversize(self, limit: usize) -> Oversize {
        let detail = match self.framing {
            Framing::Frame | Framing::Body => {
                format!("Message size exceeds maximum of {limit} bytes")
            }
            Framing::Line => format!("Line exceeds maximum of {limit} bytes"),
        };
        let err = GatewayError::with_detail(ErrorKind::InvalidRequest, detail);
        Oversize {
            reply: Some(Message::error(
                Some(WireId::null()),
                errors::render(&err, self.dialect()),
            )),
            reason: TOO_LARGE,
        }
    }

    /// The params of a request switchyard pushes to the client, or why it
    /// cannot: neither an NDJSON nor an HTTP client gets requests.
    pub fn push_request_params(
        self,
        method: &str,
        params: Option<Payload>,
    ) -> Result<Option<Payload>, GatewayError> {
        match self.framing {
            Framing::Frame => Ok(params),
            Framing::Line | Framing::Body => Err(GatewayError::no_route(method)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_id_answers_its_number() {
        assert_eq!(push_number(&push_id(42)), Some(42));
        assert_eq!(push_number(&WireId::string("42")), None);
        assert_eq!(push_number(&WireId::number(42)), None);
    }
}
