//! The protocol-neutral message every dialect decodes into and encodes from.
//!
//! Dialects never translate to each other directly: a client frame becomes a
//! [`Message`], the core routes it, and the target dialect renders it. Ids and
//! payloads are carried as raw bytes in their source encoding so that a
//! JSON→JSON path never re-parses params or results, and ids come back byte
//! for byte (`1.0`, `-0`, `"\u0031"`, `12345678901234567890`, `null`).

use std::fmt;

use serde_json::value::RawValue;

/// An id exactly as it arrived on the wire. Never parsed for meaning.
/// Equality is byte equality of the raw token.
#[derive(Clone)]
pub enum WireId {
    /// The raw JSON token (string, number or `null`) of a JSON dialect.
    Json(Box<RawValue>),
    /// A Sideband correlation id.
    Cid([u8; 16]),
}

/// A payload (`params`, `result`, `error.data`) kept in its source encoding.
/// Equality is byte equality.
#[derive(Clone)]
pub enum Payload {
    /// Raw JSON text.
    Json(Box<RawValue>),
    /// Raw CBOR bytes (Sideband v2 envelopes).
    Cbor(Vec<u8>),
}

/// A successful result. *Void* (no result at all) is kept apart from `null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A result value (which may be JSON `null`).
    Value(Payload),
    /// No result member at all (Sideband `R` without `result`).
    Void,
}

/// An error object, as carried between dialects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorObject {
    /// Integer error code.
    pub code: i64,
    /// Human-readable message.
    pub message: String,
    /// Optional structured detail.
    pub data: Option<Payload>,
}

/// One neutral RPC message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A call that expects a reply.
    Request {
        /// The sender's id.
        id: WireId,
        /// Method name, passed through unchanged.
        method: String,
        /// Parameters, absent when the sender sent none.
        params: Option<Payload>,
    },
    /// A call without a reply.
    Notification {
        /// Method name.
        method: String,
        /// Parameters, absent when the sender sent none.
        params: Option<Payload>,
    },
    /// A successful reply.
    Response {
        /// Id of the request answered.
        id: WireId,
        /// The result.
        result: Outcome,
    },
    /// An error reply. `id` is `None` for errors about no particular request.
    Error {
        /// Id of the request answered, if it could be determined.
        id: Option<WireId>,
        /// The error.
        error: ErrorObject,
    },
}

/// The message kind, a closed set for metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// [`Message::Request`].
    Request,
    /// [`Message::Notification`].
    Notification,
    /// [`Message::Response`].
    Response,
    /// [`Message::Error`].
    Error,
}

// === impl WireId ===

impl WireId {
    /// A JSON id from a token known to be valid JSON.
    pub fn json(token: &str) -> Result<Self, serde_json::Error> {
        RawValue::from_string(token.to_owned()).map(WireId::Json)
    }

    /// The JSON `null` id.
    pub fn null() -> Self {
        WireId::Json(null_raw())
    }

    /// A numeric gateway id, rendered as a JSON integer.
    pub fn number(n: u64) -> Self {
        WireId::Json(raw_from_string(n.to_string()))
    }

    /// A string id such as holon's `"s1"`.
    pub fn string(s: &str) -> Self {
        let text = serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""));
        WireId::Json(raw_from_string(text))
    }

    /// The raw JSON token, if this is a JSON id.
    pub fn as_json(&self) -> Option<&str> {
        match self {
            WireId::Json(raw) => Some(raw.get()),
            WireId::Cid(_) => None,
        }
    }
}

impl PartialEq for WireId {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (WireId::Json(a), WireId::Json(b)) => a.get() == b.get(),
            (WireId::Cid(a), WireId::Cid(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for WireId {}

impl fmt::Debug for WireId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireId::Json(raw) => write!(f, "Json({})", raw.get()),
            WireId::Cid(cid) => {
                f.write_str("Cid(")?;
                for b in cid {
                    write!(f, "{b:02x}")?;
                }
                f.write_str(")")
            }
        }
    }
}

// === impl Payload ===

impl Payload {
    /// A JSON payload from text known to be valid JSON.
    pub fn json(text: &str) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text.to_owned()).map(Payload::Json)
    }

    /// The raw JSON text, if this is a JSON payload.
    pub fn as_json(&self) -> Option<&str> {
        match self {
            Payload::Json(raw) => Some(raw.get()),
            Payload::Cbor(_) => None,
        }
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Payload::Json(a), Payload::Json(b)) => a.get() == b.get(),
            (Payload::Cbor(a), Payload::Cbor(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Payload {}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Payload::Json(raw) => write!(f, "Json({})", raw.get()),
            Payload::Cbor(bytes) => write!(f, "Cbor({} bytes)", bytes.len()),
        }
    }
}

// === impl Message ===

impl Message {
    /// The kind of this message.
    pub fn kind(&self) -> Kind {
        match self {
            Message::Request { .. } => Kind::Request,
            Message::Notification { .. } => Kind::Notification,
            Message::Response { .. } => Kind::Response,
            Message::Error { .. } => Kind::Error,
        }
    }

    /// An error reply to `id` (or to no particular request).
    pub fn error(id: Option<WireId>, error: ErrorObject) -> Self {
        Message::Error { id, error }
    }
}

// === impl Kind ===

impl Kind {
    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Notification => "notification",
            Kind::Response => "response",
            Kind::Error => "error",
        }
    }
}

/// The raw JSON `null`.
pub(crate) fn null_raw() -> Box<RawValue> {
    raw_from_string(String::from("null"))
}

/// Wraps text switchyard itself produced and knows to be valid JSON.
pub(crate) fn raw_from_string(text: String) -> Box<RawValue> {
    match RawValue::from_string(text) {
        Ok(raw) => raw,
        // Only reachable through a bug in a caller of this crate-private helper.
        Err(_) => RawValue::NULL.to_owned(),
    }
}
