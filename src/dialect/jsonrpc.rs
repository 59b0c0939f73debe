//! JSON-RPC 2.0 text ⇄ [`Message`]: requests, notifications, responses and
//! batches, validated in the order jsonrpc-ws.md §4 prescribes.
//!
//! Shared by the JSON-RPC WebSocket dialect and NDJSON (which frames the same
//! texts one per line). Ids and payloads are borrowed as raw JSON: ids are
//! copied out (inline up to 24 bytes), `params` and `result` are slices of
//! the text decoded ([`RawJson::within`]); nothing below
//! `params`/`result`/`error.data` is parsed. The members are sliced out by
//! one validating pass ([`scan`]); a text it declines (invalid, or one of
//! the rare shapes it leaves to serde_json) is read by serde_json, so every
//! error is serde_json's, class and text.
//!
//! ## Rendering
//!
//! [`Message`]s are rendered as JSON-RPC 2.0 text here too, for every
//! dialect that writes JSON-RPC shapes (holon-rpc in its own style,
//! Sideband's JSON envelopes in frame style). Raw ids and payloads are
//! copied as they are. With [`Style::Line`] (NDJSON) raw values that
//! contain line breaks are minified, because a pretty-printed client
//! message would otherwise split the line; string contents are never
//! re-escaped.
//!
//! ## The two halves
//!
//! The listener half ([`JsonRpcClient`]) and the upstream half
//! (`JsonRpcUpstream`) close this file: neither holds state of its own (a
//! client connection's codec is its framing, a link's is its settings), so
//! they sit beside the codec they frame rather than in files of their own.
//! Pure: no sockets, no tokio.

use std::borrow::Cow;
use std::fmt::Write as _;

use bytestring::ByteString;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::dialect::errors;
use crate::dialect::json_string::{push_json_string, text_method};
use crate::dialect::link;
use crate::envelope::raw_from_string;
use crate::envelope::{
    ErrorObject, Flat, JsonToken, Message, Outcome, Payload, RawJson, Source, WireId,
};
use crate::error::{ErrorKind, GatewayError, Side};

use super::Dialect;

pub use super::{Inbound, Item};
use scan::Members;

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

/// The members of one JSON-RPC object, borrowed, as serde_json reads them
/// (for the texts [`scan`] declines). `Some` means present, even when the
/// value is `null`.
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

/// The members of the JSON-RPC object `text`: [`scan::object`]'s one
/// pass, or serde_json's reading (and its error) for a text the scan
/// declines.
fn members(text: &str) -> Result<Members<'_>, serde_json::Error> {
    match scan::object(text) {
        Ok(members) => Ok(members),
        Err(_) => serde_members(text),
    }
}

/// The members of the JSON-RPC object `text` as serde_json reads them (a
/// struct of six borrowed `&RawValue`s), or its error: what the decoders
/// fall back to for a text [`scan`] declines, and the scan's oracle in its
/// property tests and the `jsonrpc_decode` fuzz target. `unknown` is not
/// read (JSON-RPC ignores other members): it is `false`.
pub fn serde_members(text: &str) -> Result<Members<'_>, serde_json::Error> {
    serde_json::from_str::<RawItem<'_>>(text).map(|raw| Members {
        jsonrpc: raw.jsonrpc.map(RawValue::get),
        id: raw.id.map(RawValue::get),
        method: raw.method.map(RawValue::get),
        params: raw.params.map(RawValue::get),
        result: raw.result.map(RawValue::get),
        error: raw.error.map(RawValue::get),
        unknown: false,
        flat: Flat::No,
    })
}

/// The items of the batch `text`: [`scan::array`]'s one pass, or
/// serde_json's reading for a text the scan declines.
fn batch_items(text: &str) -> Result<Vec<&str>, serde_json::Error> {
    let mut items = Vec::new();
    match scan::array(text, &mut items) {
        Ok(()) => Ok(items),
        Err(_) => serde_json::from_str::<Vec<&RawValue>>(text)
            .map(|items| items.into_iter().map(RawValue::get).collect()),
    }
}

/// Decodes one client text (a WebSocket frame or an NDJSON line).
pub fn decode<'a>(text: impl Into<Source<'a>>, max_batch_items: usize) -> Inbound {
    let text = text.into();
    let trimmed = text.trim_start_matches([' ', '\t', '\n', '\r']);
    if !trimmed.starts_with('[') {
        return Inbound::Single(decode_item(text, &text));
    }
    let Ok(items) = batch_items(&text) else {
        return Inbound::Rejected(reject(ErrorKind::ParseError, None));
    };
    if items.is_empty() {
        return Inbound::Rejected(reject(ErrorKind::InvalidRequest, None));
    }
    if items.len() > max_batch_items {
        let detail = format!("Batch size exceeds maximum of {max_batch_items}");
        return Inbound::Rejected(reject(ErrorKind::InvalidRequest, Some(detail)));
    }
    Inbound::Batch(items.iter().map(|item| decode_item(text, item)).collect())
}

/// Decodes one JSON-RPC object (`text`, within `source`), validating it as
/// a client item.
fn decode_item(source: Source<'_>, text: &str) -> Item {
    let raw = match members(text) {
        Ok(raw) => raw,
        Err(e) if e.is_syntax() || e.is_eof() || e.is_io() => {
            return Item::Invalid(reject(ErrorKind::ParseError, None))
        }
        // Valid JSON that is no object (or has duplicate members).
        Err(_) => return Item::Invalid(reject(ErrorKind::InvalidRequest, None)),
    };
    let id = match raw.id {
        None => None,
        Some(id) if is_valid_id(id) => Some(WireId::Json(JsonToken::from_text(id))),
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
    let Some(method) = raw.method.and_then(text_method) else {
        return invalid(id);
    };
    let params = match raw.params {
        None => None,
        Some(p) if matches!(p.as_bytes().first(), Some(b'[' | b'{')) => Some(Payload::Json(
            RawJson::text_within_flat(source, p, raw.flat),
        )),
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
    let source = Source::from(source);
    let raw = members(text).map_err(|e| ReplyError::NotJson(e.to_string()))?;
    let id = match raw.id {
        Some(id) if is_valid_id(id) => Some(WireId::Json(JsonToken::from_text(id))),
        Some(_) => return Err(ReplyError::Invalid("id must be a string, number or null")),
        None => None,
    };
    if let Some(method) = raw.method {
        let method = text_method(method).ok_or(ReplyError::Invalid("method must be a string"))?;
        let params = raw
            .params
            .map(|p| Payload::Json(RawJson::text_within_flat(source, p, raw.flat)));
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
    source: Source<'_>,
    raw: &Members<'_>,
    id: Option<WireId>,
) -> Result<Message, (Option<WireId>, &'static str)> {
    match (raw.result, raw.error) {
        (Some(result), None) => {
            let id = id.ok_or((None, "a response needs an id"))?;
            Ok(Message::Response {
                id,
                result: Outcome::Value(Payload::Json(RawJson::text_within_flat(
                    source, result, raw.flat,
                ))),
            })
        }
        (None, Some(error)) => match parse_error_text(error) {
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
    parse_error_text(raw.get())
}

/// [`parse_error_object`] of an error object's text.
pub(crate) fn parse_error_text(text: &str) -> Option<ErrorObject> {
    let err: RawError<'_> = serde_json::from_str(text).ok()?;
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
fn is_valid_id(id: &str) -> bool {
    matches!(
        id.as_bytes().first(),
        Some(b'"' | b'-' | b'0'..=b'9' | b'n')
    )
}

fn is_version_2(v: &str) -> bool {
    v == "\"2.0\"" || text_method(v).as_deref() == Some("2.0")
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

pub mod scan;

// === Rendering ===

/// How a text is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// One WebSocket text frame: raw values copied verbatim.
    Frame,
    /// One NDJSON line: raw values containing line breaks are minified.
    Line,
    /// One holon-rpc text frame: like `Frame`, with a void result as `{}`.
    Holon,
}

/// A payload that cannot be rendered as JSON (CBOR that JSON cannot carry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("payload is not JSON")]
pub struct NotJson;

/// Renders one message as compact JSON-RPC 2.0 text.
pub fn render(msg: &Message, style: Style) -> Result<String, NotJson> {
    let mut out = String::with_capacity(64 + approx_len(msg));
    render_into(msg, style, &mut out)?;
    Ok(out)
}

/// Largest scratch buffer [`render_exact`] keeps per thread between calls
/// (a longer text is rendered in it once, then the buffer is let go).
const SCRATCH_KEPT: usize = 64 * 1024;

thread_local! {
    /// Where [`render_exact`] renders before it copies.
    static SCRATCH: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Texts expected from this long are rendered straight into an
/// allocation of their own, sized by an estimate and shrunk to fit, which
/// the allocator does in place: for a large reply that costs less than the
/// copy out of the scratch buffer.
const DIRECT_FROM: usize = 4 * 1024;

/// [`render`], into an allocation of exactly the text's length: the text
/// is rendered in a per-thread scratch buffer (at most [`SCRATCH_KEPT`]
/// bytes kept) and copied, or, from [`DIRECT_FROM`] bytes, rendered in
/// place and shrunk. A frame handed to the WebSocket library becomes
/// `Bytes` without a second allocation (one with spare capacity needs a
/// shared header), and holds no spare capacity while it is queued.
pub fn render_exact(msg: &Message, style: Style) -> Result<String, NotJson> {
    if let Some(rendered) = render_scratch(msg, style, str::to_owned) {
        return rendered;
    }
    let mut out = String::with_capacity(64 + approx_len(msg));
    render_into(msg, style, &mut out)?;
    out.shrink_to_fit();
    Ok(out)
}

/// Renders `msg` in the per-thread scratch buffer (at most
/// [`SCRATCH_KEPT`] bytes kept) and hands the text to `take`, for a
/// caller that copies it where it goes; `None` (nothing rendered) when the
/// text is expected to be [`DIRECT_FROM`] bytes or more, which
/// [`render_exact`] renders in place instead.
pub fn render_scratch<R>(
    msg: &Message,
    style: Style,
    take: impl FnOnce(&str) -> R,
) -> Option<Result<R, NotJson>> {
    if 64 + approx_len(msg) >= DIRECT_FROM {
        return None;
    }
    Some(SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        let rendered = render_into(msg, style, scratch).map(|()| take(scratch.as_str()));
        if scratch.capacity() > SCRATCH_KEPT {
            *scratch = String::new();
        }
        rendered
    }))
}

/// Renders a request with the integer id `id` from borrowed parts: the
/// same text as [`render`] of a `Message::Request` with `WireId::number(id)`,
/// without building that message (no copy of the method or params).
pub fn render_request(
    id: u64,
    method: &str,
    params: Option<&Payload>,
    style: Style,
) -> Result<String, NotJson> {
    render_request_head(method, params, style).map(|head| finish_request(head, id))
}

/// [`render_request`]'s text up to its id, which comes last: the costly
/// part (escaping, copying or transcoding the params) can be rendered
/// before the id is known, and [`finish_request`] adds the id.
pub fn render_request_head(
    method: &str,
    params: Option<&Payload>,
    style: Style,
) -> Result<String, NotJson> {
    let mut out = String::with_capacity(request_len(method, params));
    push_request_head(&mut out, method, params, style)?;
    Ok(out)
}

/// Appends [`render_request_head`]'s text to `out` (a buffer reused from
/// call to call); what it wrote is taken back on error.
pub fn render_request_head_into(
    method: &str,
    params: Option<&Payload>,
    style: Style,
    out: &mut String,
) -> Result<(), NotJson> {
    let start = out.len();
    push_request_head(out, method, params, style).inspect_err(|_| out.truncate(start))
}

/// Appends the text of [`render_request`] to `out`, without an
/// allocation of its own (an NDJSON link renders its lines straight into
/// its write queue: `upstream::outlet`).
pub fn render_request_into(
    id: u64,
    method: &str,
    params: Option<&Payload>,
    style: Style,
    out: &mut String,
) -> Result<(), NotJson> {
    push_request_head(out, method, params, style)?;
    finish_request_into(out, id);
    Ok(())
}

/// Room for [`render_request`]'s text, with an NDJSON line's `\n`: exact
/// unless the method needs escaping or JSON params need minifying (the
/// fixed text and the longest id fit in 80 bytes), so that a long line is
/// queued without a copy (`upstream::outlet`).
pub fn request_len(method: &str, params: Option<&Payload>) -> usize {
    80 + method.len() + params.map_or(0, Payload::encoded_len)
}

fn push_request_head(
    out: &mut String,
    method: &str,
    params: Option<&Payload>,
    style: Style,
) -> Result<(), NotJson> {
    out.push_str("{\"jsonrpc\":\"2.0\",");
    push_method(out, method, params, style)?;
    out.push_str(",\"id\":");
    Ok(())
}

/// Ends a [`render_request_head`] text with the id `id`.
pub fn finish_request(mut head: String, id: u64) -> String {
    finish_request_into(&mut head, id);
    head
}

/// Appends the end of a request whose head `out` ends with: the id `id`
/// and the closing brace.
pub fn finish_request_into(out: &mut String, id: u64) {
    out.push_str(itoa::Buffer::new().format(id));
    out.push('}');
}

/// Renders a batch reply (a JSON array of messages).
pub fn render_batch(msgs: &[Message], style: Style) -> Result<String, NotJson> {
    let mut out = String::with_capacity(64 * msgs.len() + 2);
    out.push('[');
    for (i, msg) in msgs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        render_into(msg, style, &mut out)?;
    }
    out.push(']');
    Ok(out)
}

/// Appends one message to `out`.
pub fn render_into(msg: &Message, style: Style, out: &mut String) -> Result<(), NotJson> {
    out.push_str("{\"jsonrpc\":\"2.0\",");
    match msg {
        Message::Request { id, method, params } => {
            push_method(out, method, params.as_ref(), style)?;
            out.push_str(",\"id\":");
            push_id(out, id);
        }
        Message::Notification { method, params } => {
            push_method(out, method, params.as_ref(), style)?;
        }
        Message::Response { id, result } => {
            out.push_str("\"result\":");
            match result {
                Outcome::Value(p) => push_payload(out, p, style)?,
                Outcome::Void if style == Style::Holon => out.push_str("{}"),
                Outcome::Void => out.push_str("null"),
            }
            out.push_str(",\"id\":");
            push_id(out, id);
        }
        Message::Error { id, error } => {
            out.push_str("\"error\":");
            push_error(out, error, style)?;
            out.push_str(",\"id\":");
            match id {
                Some(id) => push_id(out, id),
                None => out.push_str("null"),
            }
        }
    }
    out.push('}');
    Ok(())
}

fn push_method(
    out: &mut String,
    method: &str,
    params: Option<&Payload>,
    style: Style,
) -> Result<(), NotJson> {
    out.push_str("\"method\":");
    push_json_string(out, method);
    if let Some(p) = params {
        out.push_str(",\"params\":");
        push_payload(out, p, style)?;
    }
    Ok(())
}

fn push_error(out: &mut String, error: &ErrorObject, style: Style) -> Result<(), NotJson> {
    // Writing to a String cannot fail.
    let _ = write!(out, "{{\"code\":{},\"message\":", error.code);
    push_json_string(out, &error.message);
    if let Some(data) = &error.data {
        out.push_str(",\"data\":");
        push_payload(out, data, style)?;
    }
    out.push('}');
    Ok(())
}

fn push_id(out: &mut String, id: &WireId) {
    match id {
        WireId::Json(raw) => out.push_str(raw.get()),
        WireId::Cid(cid) => {
            out.push('"');
            for b in cid {
                // Writing to a String cannot fail.
                let _ = write!(out, "{b:02x}");
            }
            out.push('"');
        }
    }
}

fn push_payload(out: &mut String, payload: &Payload, style: Style) -> Result<(), NotJson> {
    match payload {
        // Sideband v2 payloads: transcoded by sideband.md §7's rules, in
        // place. The transcoding writes no whitespace, so it fits a line.
        Payload::Cbor(bytes) => {
            crate::dialect::sideband::cbor_to_json_into(bytes, out).map_err(|_| NotJson)
        }
        Payload::Json(raw) => {
            let text = raw.get();
            // Valid JSON has raw line breaks only between tokens (never in
            // a string); one SIMD pass finds either, unless the scan that
            // sliced the value saw none.
            if style == Style::Line
                && !raw.is_flat()
                && memchr::memchr2(b'\n', b'\r', text.as_bytes()).is_some()
            {
                minify_into(text, out);
            } else {
                out.push_str(text);
            }
            Ok(())
        }
    }
}

/// Removes insignificant whitespace from valid JSON, leaving strings untouched.
pub fn minify_into(json: &str, out: &mut String) {
    let mut in_string = false;
    let mut escaped = false;
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
}

fn approx_len(msg: &Message) -> usize {
    let payload = |p: Option<&Payload>| p.map_or(0, Payload::encoded_len);
    match msg {
        Message::Request { params, .. } | Message::Notification { params, .. } => {
            payload(params.as_ref())
        }
        Message::Response {
            result: Outcome::Value(p),
            ..
        } => payload(Some(p)),
        _ => 32,
    }
}

// === the listener half ===
//
// JSON-RPC's listener half, for the JSON-RPC WebSocket dialect, NDJSON and
// JSON-RPC over HTTP, which differ only in framing: a connection's codec is
// its framing and nothing else (no per-connection state), so it lives here,
// beside the codec it frames.

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
pub fn push_wire_id(n: u64) -> WireId {
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
    pub fn decode<'a>(self, text: impl Into<Source<'a>>, max_batch_items: usize) -> Inbound {
        decode(text, max_batch_items)
    }

    /// The answer to a message over `limit` bytes before close 1009: a
    /// -32600 error to id `null` (`Message size exceeds maximum of N
    /// bytes`, an NDJSON client `Line exceeds maximum of N bytes`).
    pub fn oversize(self, limit: usize) -> super::Oversize {
        let detail = match self.framing {
            Framing::Frame | Framing::Body => {
                format!("Message size exceeds maximum of {limit} bytes")
            }
            Framing::Line => format!("Line exceeds maximum of {limit} bytes"),
        };
        let err = GatewayError::with_detail(ErrorKind::InvalidRequest, detail);
        super::Oversize {
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

// === the upstream half ===
//
// JSON-RPC towards an upstream (JSON-RPC WebSocket and NDJSON links, which
// differ only in framing): integer ids, params an array or an object
// (absent ones `{}` when configured). A link's codec is its settings, no
// state of its own. Inbound texts are decoded by `decode_upstream_in`,
// which holon-rpc upstreams share (the same JSON-RPC shapes).

/// A JSON-RPC upstream link: nothing of its own beyond its settings.
#[derive(Debug)]
pub(crate) struct JsonRpcUpstream {
    /// Lines (NDJSON) or text frames (JSON-RPC WebSocket).
    framing: link::Framing,
    /// Offer the `jsonrpc` subprotocol.
    offer: bool,
    /// Send `{}` for absent params.
    fill_empty: bool,
}

// === impl JsonRpcUpstream ===

impl JsonRpcUpstream {
    /// A codec for `framing` (lines or text frames).
    pub(crate) fn new(framing: link::Framing, opts: link::Options) -> Self {
        JsonRpcUpstream {
            framing,
            offer: opts.offer_subprotocol,
            fill_empty: opts.fill_empty_params,
        }
    }

    /// NDJSON for lines, JSON-RPC WebSocket for frames.
    pub(crate) fn dialect(&self) -> Dialect {
        match self.framing {
            link::Framing::Line => Dialect::Ndjson,
            link::Framing::Text | link::Framing::Binary => Dialect::JsonRpc,
        }
    }

    pub(crate) fn framing(&self) -> link::Framing {
        self.framing
    }

    /// `jsonrpc`, when configured (WebSocket only).
    pub(crate) fn subprotocol(&self) -> Option<&'static str> {
        (self.offer && self.framing != link::Framing::Line).then_some(SUBPROTOCOL)
    }

    /// Params must be an array or an object; absent ones become `{}` when
    /// configured.
    pub(crate) fn params<'a>(
        &self,
        params: Option<&'a Payload>,
    ) -> Result<Option<Cow<'a, Payload>>, GatewayError> {
        match params {
            Some(p) if !p.is_structured() => Err(GatewayError::with_detail(
                ErrorKind::InvalidParams,
                "params must be an array or an object for this upstream",
            )),
            Some(p) => Ok(Some(Cow::Borrowed(p))),
            None => Ok(self.fill_empty.then(empty_object)),
        }
    }
}

/// `{}`, for an upstream that wants params present.
pub(crate) fn empty_object<'a>() -> Cow<'a, Payload> {
    Cow::Owned(Payload::Json(raw_from_string(String::from("{}"))))
}

#[cfg(test)]
mod render_tests;

#[cfg(test)]
mod tests;
