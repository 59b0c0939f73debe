//! JSON-RPC 2.0 text ⇄ [`Message`]: requests, notifications, responses and
//! batches, validated in the order jsonrpc-ws.md §4 prescribes.
//!
//! Shared by the JSON-RPC WebSocket dialect and NDJSON (which frames the same
//! texts one per line). Ids and payloads are borrowed as raw JSON: ids are
//! copied out (inline up to 24 bytes), `params` and `result` are slices of
//! the text decoded ([`RawJson::within`]); nothing below
//! `params`/`result`/`error.data` is parsed.

use bytestring::ByteString;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::dialect::errors;
use crate::dialect::json_string::string_value;
use crate::envelope::{ErrorObject, JsonToken, Message, Outcome, Payload, RawJson, WireId};
use crate::error::{ErrorKind, GatewayError, Side};

use super::Dialect;

pub use super::{Inbound, Item};

/// Why an upstream reply could not be decoded as a JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// Not JSON, or not a single JSON object.
    #[error("not a JSON-RPC object: {0}")]
    NotJson(String),
    /// A JSON object that is no valid JSON-RPC message.
    #[error("invalid JSON-RPC message: {0}")]
    Invalid(&'static str),
    /// A reply with a usable id that breaks the dialect's rules (such as an
    /// error object with a non-integer code): it settles that call as
    /// `internal`.
    #[error("invalid reply for id {id:?}: {why}")]
    InvalidReply {
        /// The reply's id.
        id: WireId,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// The members of one JSON-RPC object, borrowed. `Some` means present, even
/// when the value is `null`.
#[derive(Deserialize)]
struct RawItem<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawError<'a> {
    code: serde_json::Number,
    message: String,
    #[serde(borrow, default, deserialize_with = "present")]
    data: Option<&'a RawValue>,
}

/// Keeps a present member, `null` included, as `Some(raw)`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Decodes one client text (a WebSocket frame or an NDJSON line).
pub fn decode(text: &ByteString, max_batch_items: usize) -> Inbound {
    let trimmed = text.trim_start_matches([' ', '\t', '\n', '\r']);
    if !trimmed.starts_with('[') {
        return Inbound::Single(decode_item(text, text));
    }
    let items: Vec<&RawValue> = match serde_json::from_str(text) {
        Ok(items) => items,
        Err(_) => return Inbound::Rejected(reject(ErrorKind::ParseError, None)),
    };
    if items.is_empty() {
        return Inbound::Rejected(reject(ErrorKind::InvalidRequest, None));
    }
    if items.len() > max_batch_items {
        let detail = format!("Batch size exceeds maximum of {max_batch_items}");
        return Inbound::Rejected(reject(ErrorKind::InvalidRequest, Some(detail)));
    }
    Inbound::Batch(
        items
            .iter()
            .map(|raw| decode_item(text, raw.get()))
            .collect(),
    )
}

/// Decodes one JSON-RPC object (`text`, within `source`), validating it as
/// a client item.
fn decode_item(source: &ByteString, text: &str) -> Item {
    let raw: RawItem<'_> = match serde_json::from_str(text) {
        Ok(raw) => raw,
        Err(e) if e.is_syntax() || e.is_eof() || e.is_io() => {
            return Item::Invalid(reject(ErrorKind::ParseError, None))
        }
        // Valid JSON that is no object (or has duplicate members).
        Err(_) => return Item::Invalid(reject(ErrorKind::InvalidRequest, None)),
    };
    let id = match raw.id {
        None => None,
        Some(id) if is_valid_id(id) => Some(WireId::Json(JsonToken::from_raw(id))),
        Some(_) => return Item::Invalid(reject(ErrorKind::InvalidRequest, None)),
    };
    let invalid = |id: Option<WireId>| Item::Invalid(invalid_request(id));
    if !raw.jsonrpc.is_some_and(is_version_2) {
        return invalid(id);
    }
    if raw.method.is_none() && (raw.result.is_some() || raw.error.is_some()) {
        return match reply_from_raw(source, &raw, id) {
            Ok(msg) => Item::Valid(msg),
            Err((id, _)) => invalid(id),
        };
    }
    let Some(method) = raw.method.and_then(string_value) else {
        return invalid(id);
    };
    let params = match raw.params {
        None => None,
        Some(p) if matches!(p.get().as_bytes().first(), Some(b'[' | b'{')) => {
            Some(Payload::Json(RawJson::within(source, p)))
        }
        Some(_) => return invalid(id),
    };
    Item::Valid(match id {
        Some(id) => Message::Request { id, method, params },
        None => Message::Notification { method, params },
    })
}

/// Decodes one message sent by an upstream: a reply to switchyard, or a
/// request/notification of the upstream's own. Lenient about `jsonrpc`.
pub fn decode_upstream(text: &ByteString) -> Result<Message, ReplyError> {
    decode_upstream_in(text, text)
}

/// [`decode_upstream`] for one item (`text`) of a batch reply (`source`).
pub fn decode_upstream_in(source: &ByteString, text: &str) -> Result<Message, ReplyError> {
    let raw: RawItem<'_> =
        serde_json::from_str(text).map_err(|e| ReplyError::NotJson(e.to_string()))?;
    let id = match raw.id {
        Some(id) if is_valid_id(id) => Some(WireId::Json(JsonToken::from_raw(id))),
        Some(_) => return Err(ReplyError::Invalid("id must be a string, number or null")),
        None => None,
    };
    if let Some(method) = raw.method {
        let method = string_value(method).ok_or(ReplyError::Invalid("method must be a string"))?;
        let params = raw
            .params
            .map(|p| Payload::Json(RawJson::within(source, p)));
        return Ok(match id {
            Some(id) if id.as_json() != Some("null") => Message::Request { id, method, params },
            _ => Message::Notification { method, params },
        });
    }
    if raw.result.is_none() && raw.error.is_none() {
        // An id-only frame: a void result (WebBridge's nil result quirk).
        if let Some(id) = id.clone().filter(|id| id.as_json() != Some("null")) {
            return Ok(Message::Response {
                id,
                result: Outcome::Void,
            });
        }
    }
    reply_from_raw(source, &raw, id).map_err(|(id, why)| match id {
        Some(id) if id.as_json() != Some("null") => ReplyError::InvalidReply { id, why },
        _ => ReplyError::Invalid(why),
    })
}

/// Builds a response or error from a reply-shaped item read from `source`.
fn reply_from_raw(
    source: &ByteString,
    raw: &RawItem<'_>,
    id: Option<WireId>,
) -> Result<Message, (Option<WireId>, &'static str)> {
    match (raw.result, raw.error) {
        (Some(result), None) => {
            let id = id.ok_or((None, "a response needs an id"))?;
            Ok(Message::Response {
                id,
                result: Outcome::Value(Payload::Json(RawJson::within(source, result))),
            })
        }
        (None, Some(error)) => match parse_error_object(error) {
            Some(error) => Ok(Message::Error { id, error }),
            None => Err((
                id,
                "error must be an object with integer code and string message",
            )),
        },
        _ => Err((id, "exactly one of result and error is required")),
    }
}

/// Parses an error object; `None` when it breaks the JSON-RPC rules.
pub fn parse_error_object(raw: &RawValue) -> Option<ErrorObject> {
    let err: RawError<'_> = serde_json::from_str(raw.get()).ok()?;
    let code = err.code.as_i64().or_else(|| {
        let f = err.code.as_f64()?;
        (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
    })?;
    Some(ErrorObject {
        code,
        message: err.message,
        data: err.data.map(|d| Payload::Json(RawJson::copy(d))),
    })
}

/// `id` may be a string, a number or `null`.
fn is_valid_id(id: &RawValue) -> bool {
    matches!(
        id.get().as_bytes().first(),
        Some(b'"' | b'-' | b'0'..=b'9' | b'n')
    )
}

fn is_version_2(v: &RawValue) -> bool {
    v.get() == "\"2.0\"" || string_value(v).as_deref() == Some("2.0")
}

fn reject(kind: ErrorKind, detail: Option<String>) -> Message {
    let err = GatewayError {
        kind,
        side: Side::Client,
        detail,
        origin: None,
    };
    Message::error(Some(WireId::null()), errors::render(&err, Dialect::JsonRpc))
}

fn invalid_request(id: Option<WireId>) -> Message {
    let err = errors::render(
        &GatewayError::new(ErrorKind::InvalidRequest),
        Dialect::JsonRpc,
    );
    Message::error(Some(id.unwrap_or_else(WireId::null)), err)
}

pub mod client;
pub(crate) mod upstream;

#[cfg(test)]
mod tests;
