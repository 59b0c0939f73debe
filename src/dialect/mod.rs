//! Pure, synchronous wire codecs: bytes ⇄ [`Message`](crate::envelope::Message).
//!
//! Nothing in this module touches a socket or tokio: every codec can be
//! tested with byte literals alone. Transports (`crate::transport`,
//! `crate::upstream`) own the I/O and call in here.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use crate::close::CloseCode;
use crate::envelope::Message;

use jsonrpc::Style;

/// What one inbound client frame (a text frame or line, or a Sideband
/// binary frame) asks of the connection, as the client's codec decoded it.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    /// One message (or one invalid item).
    Single(Item),
    /// A batch of items, in order (JSON-RPC and NDJSON only).
    Batch(Vec<Item>),
    /// The whole text is rejected with this single error reply (parse error,
    /// empty batch, over-limit batch). The connection stays open.
    Rejected(Message),
    /// Nothing for the connection to do (a Sideband Pong or Ack, the
    /// peer's handshake, an invalid envelope with nothing to answer).
    Nothing,
    /// Send this frame and carry on (a Sideband Pong, an ErrorFrame, an
    /// `E` 1100 to an envelope whose cid could be read).
    Answer(Vec<u8>),
    /// The frame was dropped for this reason (counted).
    Dropped(sideband::dropped::SbpDrop),
    /// The peer reported an error about one of its frames (a Sideband
    /// ErrorFrame): logged and counted, nothing answered.
    PeerError {
        /// The peer's code.
        code: u16,
        /// The peer's message.
        message: String,
    },
    /// The frame is fatal: send `last` (if any), then close the
    /// connection with `code` and `reason` (holon-rpc: malformed JSON, no
    /// usable id; Sideband: a failed negotiation, an invalid frame, the
    /// peer's Control Close).
    Close {
        /// A last frame to send before the close (Sideband).
        last: Option<Vec<u8>>,
        /// The WebSocket close code.
        code: CloseCode,
        /// The close reason.
        reason: Cow<'static, str>,
    },
}

/// How a pub/sub event reaches a client (jsonrpc-ws.md §7.2, as the
/// README maps it to every dialect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventForm {
    /// The notification `rpc.notification` with `{topic, data}`: the same
    /// text for every such client (JSON-RPC, NDJSON).
    Notification,
    /// The same as an `s<N>` request whose reply is consumed (holon-rpc).
    Request,
    /// An `N` envelope on `event`, `e` = the topic, `d` = the data
    /// (Sideband).
    Envelope,
}

/// What a message over the size limit gets before close 1009. Its fields
/// are public: it is a plain answer the session takes apart.
#[derive(Debug, Clone, PartialEq)]
pub struct Oversize {
    /// The error reply to send first, if the dialect has one.
    pub reply: Option<Message>,
    /// The close frame's reason.
    pub reason: &'static str,
}

/// One item of an inbound text.
#[derive(Debug, PartialEq, Eq)]
pub enum Item {
    /// A well-formed message.
    Valid(Message),
    /// An invalid item, answered in place with this error reply.
    Invalid(Message),
    /// A reply-shaped item that breaks the dialect's rules (holon-rpc): it
    /// settles the pending push with this id, and is counted.
    BadReply(crate::envelope::WireId),
}

/// The RPC dialects switchyard speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// JSON-RPC 2.0 in WebSocket text frames.
    JsonRpc,
    /// JSON-RPC 2.0, one compact JSON text per line, over a Unix socket.
    Ndjson,
    /// holon-rpc envelopes over WebSocket (subprotocol `holon-rpc`).
    Holon,
    /// Sideband binary frames over WebSocket.
    Sideband,
    /// JSON-RPC 2.0 over HTTP: one request, notification or batch per
    /// `POST` body (see [`jsonrpc_http`]).
    JsonRpcHttp,
}

/// The families of error codes (error-codes.md): a new dialect joins one
/// in [`Dialect::error_codes`], and only a dialect with codes of its own
/// adds a family (the compiler then lists every `match` in [`errors`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCodes {
    /// JSON-RPC 2.0 codes (Appendix C): JSON-RPC over WebSocket and HTTP,
    /// NDJSON.
    JsonRpc,
    /// holon-rpc: JSON-RPC shapes, its own gRPC-style codes.
    Holon,
    /// Sideband's `E` codes (1100, 1101, 1103, 2000 and above).
    Sideband,
}

/// How many dialects there are: the length of a table indexed by
/// [`Dialect::index`].
pub const COUNT: usize = Dialect::ALL.len();

// === impl Inbound ===

impl Inbound {
    /// A fatal frame: close with `code` and `reason`, nothing sent first.
    pub const fn close(code: CloseCode, reason: &'static str) -> Self {
        Inbound::Close {
            last: None,
            code,
            reason: Cow::Borrowed(reason),
        }
    }
}

// === impl Dialect ===

impl Dialect {
    /// Every dialect, for exhaustive tests and config messages.
    pub const ALL: [Dialect; 5] = [
        Dialect::JsonRpc,
        Dialect::Ndjson,
        Dialect::Holon,
        Dialect::Sideband,
        Dialect::JsonRpcHttp,
    ];

    /// The dialect's place in [`ALL`](Self::ALL), below [`COUNT`], for
    /// tables indexed by dialect (the metrics' per-label caches).
    pub const fn index(self) -> usize {
        match self {
            Dialect::JsonRpc => 0,
            Dialect::Ndjson => 1,
            Dialect::Holon => 2,
            Dialect::Sideband => 3,
            Dialect::JsonRpcHttp => 4,
        }
    }

    /// Stable name, used in config and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Dialect::JsonRpc => "jsonrpc-ws",
            Dialect::Ndjson => "ndjson",
            Dialect::Holon => "holon-rpc",
            Dialect::Sideband => "sideband",
            Dialect::JsonRpcHttp => "jsonrpc-http",
        }
    }

    /// The OpenTelemetry `rpc.system` value.
    pub const fn rpc_system(self) -> &'static str {
        match self {
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::JsonRpcHttp => "jsonrpc",
            Dialect::Holon => "holon-rpc",
            Dialect::Sideband => "sideband",
        }
    }

    /// How this dialect's texts are rendered, on either side (Sideband
    /// envelopes carry JSON-RPC shapes in frame style): the one table of
    /// dialect to style.
    pub const fn style(self) -> Style {
        match self {
            Dialect::Ndjson => Style::Line,
            Dialect::Holon => Style::Holon,
            Dialect::JsonRpc | Dialect::Sideband | Dialect::JsonRpcHttp => Style::Frame,
        }
    }

    /// The family of error codes this dialect writes and reads: the one
    /// table of dialect to error codes ([`errors`] matches on the family,
    /// never on a dialect).
    pub const fn error_codes(self) -> ErrorCodes {
        match self {
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::JsonRpcHttp => ErrorCodes::JsonRpc,
            Dialect::Holon => ErrorCodes::Holon,
            Dialect::Sideband => ErrorCodes::Sideband,
        }
    }

    /// True for dialects carried over WebSocket.
    pub const fn is_websocket(self) -> bool {
        !matches!(self, Dialect::Ndjson | Dialect::JsonRpcHttp)
    }

    /// True for dialects served on a TCP address and path (WebSocket and
    /// HTTP), false for the Unix-socket one.
    pub const fn on_tcp(self) -> bool {
        !matches!(self, Dialect::Ndjson)
    }

    /// True for JSON-RPC over HTTP: requests are `POST` bodies, not
    /// frames of an upgraded connection.
    pub const fn is_http(self) -> bool {
        matches!(self, Dialect::JsonRpcHttp)
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown dialect name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown dialect {0:?} (expected one of: jsonrpc-ws, ndjson, holon-rpc, sideband, jsonrpc-http)"
)]
pub struct UnknownDialect(pub String);

impl FromStr for Dialect {
    type Err = UnknownDialect;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jsonrpc-ws" | "jsonrpc" => Ok(Dialect::JsonRpc),
            "ndjson" => Ok(Dialect::Ndjson),
            "holon-rpc" | "holon" => Ok(Dialect::Holon),
            "sideband" => Ok(Dialect::Sideband),
            "jsonrpc-http" => Ok(Dialect::JsonRpcHttp),
            other => Err(UnknownDialect(other.to_owned())),
        }
    }
}

pub mod client;
pub mod errors;
pub mod holon;
pub(crate) mod json_string;
pub mod jsonrpc;
pub mod jsonrpc_http;
pub(crate) mod link;
pub mod sideband;
pub(crate) mod upstream;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_indexes_its_place_in_all() {
        for (i, d) in Dialect::ALL.into_iter().enumerate() {
            assert_eq!(d.index(), i, "{d}");
        }
        assert_eq!(COUNT, Dialect::ALL.len());
    }
}
