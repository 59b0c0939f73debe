//! Pure, synchronous wire codecs: bytes ⇄ [`Message`](crate::envelope::Message).
//!
//! Nothing in this module touches a socket or tokio: every codec can be
//! tested with byte literals alone. Transports (`crate::transport`,
//! `crate::upstream`) own the I/O and call in here.

use std::fmt;
use std::str::FromStr;

use crate::envelope::Message;

/// A decoded inbound client text.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    /// One message (or one invalid item).
    Single(Item),
    /// A batch of items, in order (JSON-RPC and NDJSON only).
    Batch(Vec<Item>),
    /// The whole text is rejected with this single error reply (parse error,
    /// empty batch, over-limit batch). The connection stays open.
    Rejected(Message),
    /// The text is fatal: close the connection with this code (a
    /// [`crate::close::CloseCode`] number) and reason (holon-rpc: malformed
    /// JSON, no usable id).
    Close(u16, &'static str),
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
pub mod render;
pub mod sideband;
