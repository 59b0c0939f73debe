//! holon-rpc envelopes ⇄ [`Message`], switchyard facing holon clients.
//!
//! Checks follow holon-rpc.md §10 in order: malformed JSON, a non-object and
//! an unusable id are fatal (close 1002, because no answer could be
//! correlated); a request whose id is usable but whose envelope is otherwise
//! invalid is answered -32600 with that id. Rendering towards holon peers
//! is [`render`](super::jsonrpc::render) with [`Style::Holon`](super::jsonrpc::Style):
//! the same JSON-RPC 2.0 shapes with string ids and a void result as `{}`.

use serde_json::value::RawValue;

use self::envelope::Envelope;
use super::jsonrpc::parse_error_text;
use super::{Dialect, Inbound, Item};
use crate::close::CloseCode;
use crate::dialect::errors;
use crate::dialect::json_string::text_method;
use crate::envelope::{
    raw_from_string, JsonToken, Message, Outcome, Payload, RawJson, Source, WireId,
};
use crate::error::{ErrorKind, GatewayError};

/// The close for an unusable message: 1002, protocol error.
const PROTOCOL_ERROR: CloseCode = CloseCode::ProtocolError;

/// Close reasons (at most 123 bytes each).
pub const MALFORMED: &str = "malformed JSON";
/// Close reason for a non-object message.
pub const NOT_OBJECT: &str = "invalid envelope: message must be an object";
/// Close reason for a message without a usable id.
pub const NO_ID: &str = "invalid envelope: id must be a non-empty string";

/// Decodes one text frame from a holon client.
pub fn decode<'a>(text: impl Into<Source<'a>>) -> Inbound {
    let text = text.into();
    // One pass over the text: an object is read straight into its members;
    // anything else is only checked for being JSON at all.
    if !text.trim_start().starts_with('{') {
        return match serde_json::from_str::<&RawValue>(&text) {
            Ok(_) => Inbound::close(PROTOCOL_ERROR, NOT_OBJECT),
            Err(_) => Inbound::close(PROTOCOL_ERROR, MALFORMED),
        };
    }
    let Some(env) = Envelope::read(&text) else {
        return Inbound::close(PROTOCOL_ERROR, MALFORMED);
    };
    let Some(id) = env.members.id.filter(|id| is_usable_id(id)) else {
        return Inbound::close(PROTOCOL_ERROR, NO_ID);
    };
    let id = WireId::Json(JsonToken::from_text(id));
    if env.members.method.is_some() {
        return Inbound::Single(request(text, &env, id));
    }
    Inbound::Single(reply(text, &env, id))
}

/// A request: valid, or answered -32600 with the reason in `data`.
fn request(source: Source<'_>, env: &Envelope<'_>, id: WireId) -> Item {
    let invalid = |reason: String| {
        let err = GatewayError::with_detail(ErrorKind::InvalidRequest, reason);
        Item::Invalid(Message::error(
            Some(id.clone()),
            errors::render(&err, Dialect::Holon),
        ))
    };
    if let Some(key) = &env.unknown {
        return invalid(format!("unknown key {key:?}"));
    }
    if env.members.jsonrpc.is_none_or(|v| v != "\"2.0\"") {
        return invalid(String::from("jsonrpc must be \"2.0\""));
    }
    let method = env.members.method.and_then(text_method);
    let Some(method) = method.filter(|m| !m.trim().is_empty()) else {
        return invalid(String::from("method must be a non-empty string"));
    };
    if env.members.result.is_some() || env.members.error.is_some() {
        return invalid(String::from("a request cannot carry result or error"));
    }
    let params = match env.members.params {
        None => None,
        // HolonClient sends null when the caller passes null: same as {}.
        Some("null") => Some(Payload::Json(raw_from_string(String::from("{}")))),
        Some(p) if p.starts_with('{') => Some(Payload::Json(RawJson::text_within_flat(
            source,
            p,
            env.members.flat,
        ))),
        Some(_) => return invalid(String::from("params must be an object")),
    };
    Item::Valid(Message::Request { id, method, params })
}

/// A reply to one of switchyard's pushes (or a frame with none of method,
/// result and error: a void reply, as browsers send for `undefined`).
fn reply(source: Source<'_>, env: &Envelope<'_>, id: WireId) -> Item {
    let well_formed = env.unknown.is_none()
        && env.members.jsonrpc.is_some_and(|v| v == "\"2.0\"")
        && env.members.params.is_none();
    match (env.members.result, env.members.error) {
        (None, None) if well_formed => Item::Valid(Message::Response {
            id,
            result: Outcome::Void,
        }),
        (Some(result), None) if well_formed => Item::Valid(Message::Response {
            id,
            result: Outcome::Value(Payload::Json(RawJson::text_within_flat(
                source,
                result,
                env.members.flat,
            ))),
        }),
        (None, Some(error)) if well_formed => match parse_error_text(error) {
            Some(error) => Item::Valid(Message::Error {
                id: Some(id),
                error,
            }),
            None => Item::BadReply(id),
        },
        _ => Item::BadReply(id),
    }
}

/// A string id that is not blank after trimming.
fn is_usable_id(id: &str) -> bool {
    text_method(id).is_some_and(|s| !s.trim().is_empty())
}

/// The `params` a holon peer accepts: an object. Absent params become `{}`;
/// anything else is `None` (the caller refuses or wraps it).
pub fn object_params(params: Option<&Payload>) -> Option<Payload> {
    match params {
        None => Some(Payload::Json(raw_from_string(String::from("{}")))),
        Some(p) if is_object(p) => Some(p.clone()),
        Some(_) => None,
    }
}

/// True for a JSON object or a CBOR map.
pub fn is_object(p: &Payload) -> bool {
    match p {
        Payload::Json(raw) => raw.get().starts_with('{'),
        Payload::Cbor(bytes) => matches!(bytes.first(), Some(0xa0..=0xbf)),
    }
}

/// Wraps params a holon peer cannot carry as `{"value": …}` (notifications).
pub fn wrap_params(params: &Payload) -> Option<Payload> {
    let raw = match params {
        Payload::Json(raw) => raw.clone(),
        Payload::Cbor(bytes) => crate::dialect::sideband::cbor_to_json(bytes).ok()?.into(),
    };
    Some(Payload::Json(raw_from_string(format!(
        "{{\"value\":{}}}",
        raw.get()
    ))))
}

pub mod client;
mod envelope;

pub(crate) mod upstream;

#[cfg(test)]
mod tests;
