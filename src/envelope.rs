//! The protocol-neutral message every dialect decodes into and encodes from.
//!
//! Dialects never translate to each other directly: a client frame becomes a
//! [`Message`], the core routes it, and the target dialect renders it. Ids and
//! payloads are carried as raw bytes in their source encoding so that a
//! JSON→JSON path never re-parses params or results, and ids come back byte
//! for byte (`1.0`, `-0`, `"\u0031"`, `12345678901234567890`, `null`).

use std::fmt;

use bytes::Bytes;
use compact_str::{format_compact, CompactString, ToCompactString};
use serde_json::value::RawValue;

mod raw_json;
mod text;

pub(crate) use raw_json::Flat;
pub use raw_json::RawJson;
pub use text::{Source, Text};

/// An id exactly as it arrived on the wire. Never parsed for meaning.
/// Equality is byte equality of the raw token.
#[derive(Clone)]
pub enum WireId {
    /// The raw JSON token (string, number or `null`) of a JSON dialect.
    Json(JsonToken),
    /// A Sideband correlation id.
    Cid([u8; 16]),
}

/// A method name: held inline up to 24 bytes.
pub type Method = CompactString;

/// One raw JSON value known to be valid JSON, as a [`WireId`] carries it:
/// held inline up to 24 bytes (every integer id and most string ids, so
/// decoding them allocates nothing), on the heap beyond.
#[derive(Clone, PartialEq, Eq)]
pub struct JsonToken(CompactString);

/// A payload (`params`, `result`, `error.data`) kept in its source encoding.
/// Equality is byte equality.
#[derive(Clone)]
pub enum Payload {
    /// Raw JSON text.
    Json(RawJson),
    /// Raw CBOR bytes (Sideband v2 envelopes): decoded from a frame, a
    /// slice of it, as [`RawJson`] is of a text.
    Cbor(Bytes),
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
        method: Method,
        /// Parameters, absent when the sender sent none.
        params: Option<Payload>,
    },
    /// A call without a reply.
    Notification {
        /// Method name.
        method: Method,
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
    /// A JSON id from a token that must be one valid JSON value.
    pub fn json(token: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str::<&RawValue>(token).map(|raw| WireId::Json(JsonToken::from_raw(raw)))
    }

    /// The JSON `null` id.
    pub fn null() -> Self {
        WireId::Json(JsonToken(CompactString::const_new("null")))
    }

    /// A numeric gateway id, rendered as a JSON integer.
    pub fn number(n: u64) -> Self {
        WireId::Json(JsonToken(n.to_compact_string()))
    }

    /// A numeric gateway id as a JSON string (holon ids are strings).
    pub fn number_string(n: u64) -> Self {
        WireId::Json(JsonToken(format_compact!("\"{n}\"")))
    }

    /// A string id such as holon's `"s1"`.
    pub fn string(s: &str) -> Self {
        // Only `"`, `\` and control characters need escaping.
        let plain = !s.chars().any(|c| c == '"' || c == '\\' || c.is_control());
        let text = if plain {
            format_compact!("\"{s}\"")
        } else {
            let text = serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""));
            CompactString::from(text)
        };
        WireId::Json(JsonToken(text))
    }

    /// The raw JSON token, if this is a JSON id.
    pub fn as_json(&self) -> Option<&str> {
        match self {
            WireId::Json(token) => Some(token.get()),
            WireId::Cid(_) => None,
        }
    }
}

impl PartialEq for WireId {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (WireId::Json(a), WireId::Json(b)) => a == b,
            (WireId::Cid(a), WireId::Cid(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for WireId {}

impl fmt::Debug for WireId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireId::Json(token) => write!(f, "Json({})", token.get()),
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

// === impl JsonToken ===

impl JsonToken {
    /// The token of a JSON value serde_json has read (so valid JSON).
    pub fn from_raw(raw: &RawValue) -> Self {
        Self::from_text(raw.get())
    }

    /// The token of one JSON value's text, which a validating pass has
    /// read (so valid JSON): the slice `jsonrpc::scan` gives.
    pub(crate) fn from_text(text: &str) -> Self {
        JsonToken(CompactString::new(text))
    }

    /// The token's text.
    pub fn get(&self) -> &str {
        self.0.as_str()
    }

    /// Held without a heap allocation.
    #[cfg(test)]
    pub(crate) fn is_inline(&self) -> bool {
        !self.0.is_heap_allocated()
    }
}

impl fmt::Debug for JsonToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

// === impl Payload ===

impl Payload {
    /// A JSON payload from text known to be valid JSON.
    pub fn json(text: &str) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text.to_owned()).map(|raw| Payload::Json(raw.into()))
    }

    /// True for a JSON array or object, or a CBOR array or map: what
    /// JSON-RPC `params` may be.
    pub fn is_structured(&self) -> bool {
        match self {
            Payload::Json(raw) => matches!(raw.get().as_bytes().first(), Some(b'[' | b'{')),
            Payload::Cbor(bytes) => matches!(bytes.first(), Some(0x80..=0xbf)),
        }
    }

    /// Its size in its own encoding: JSON text or CBOR bytes.
    pub fn encoded_len(&self) -> usize {
        match self {
            Payload::Json(raw) => raw.get().len(),
            Payload::Cbor(bytes) => bytes.len(),
        }
    }

    /// A copy sharing nothing with the frame or line it was read from (see
    /// [`RawJson`]), for whatever keeps it beyond its request or reply.
    pub fn detach(&self) -> Payload {
        match self {
            Payload::Json(raw) => Payload::Json(raw.detach()),
            Payload::Cbor(bytes) => Payload::Cbor(Bytes::copy_from_slice(bytes)),
        }
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

/// Wraps text switchyard itself produced and knows to be valid JSON.
pub(crate) fn raw_from_string(text: String) -> RawJson {
    RawJson::from_string(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: &WireId) -> &JsonToken {
        match id {
            WireId::Json(token) => token,
            WireId::Cid(_) => panic!("not a JSON id"),
        }
    }

    #[test]
    fn built_ids_are_the_json_serde_json_writes_and_short_ones_are_inline() {
        for n in [0, 7, u64::MAX] {
            let id = WireId::number(n);
            assert_eq!(id.as_json(), Some(n.to_string().as_str()));
            assert!(token(&id).is_inline(), "{n}");
            let id = WireId::number_string(n);
            let quoted = serde_json::to_string(&n.to_string()).expect("json");
            assert_eq!(id.as_json(), Some(quoted.as_str()));
            assert!(token(&id).is_inline(), "\"{n}\"");
        }
        let long = "y".repeat(30);
        for s in [
            "s1",
            "",
            "é/ü",
            "a\"b",
            "back\\slash",
            "tab\t",
            "\u{1}",
            long.as_str(),
        ] {
            let id = WireId::string(s);
            let expected = serde_json::to_string(s).expect("json");
            assert_eq!(id.as_json(), Some(expected.as_str()), "{s:?}");
            let back: String = serde_json::from_str(token(&id).get()).expect("valid JSON");
            assert_eq!(back, s);
        }
        assert_eq!(WireId::null().as_json(), Some("null"));
        assert!(token(&WireId::null()).is_inline());
    }

    #[test]
    fn a_parsed_id_must_be_one_json_value() {
        assert_eq!(
            WireId::json("\"a\"").expect("valid").as_json(),
            Some("\"a\"")
        );
        assert_eq!(
            WireId::json("-1.5e3").expect("valid").as_json(),
            Some("-1.5e3")
        );
        for bad in ["", "a", "1 2", "\"open", "{"] {
            assert!(WireId::json(bad).is_err(), "{bad:?}");
        }
    }
}
