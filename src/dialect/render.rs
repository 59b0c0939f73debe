//! Rendering [`Message`]s as JSON-RPC 2.0 text.
//!
//! Raw ids and payloads are copied as they are. With [`Style::Line`] (NDJSON)
//! raw values that contain line breaks are minified, because a pretty-printed
//! client message would otherwise split the line; string contents are never
//! re-escaped.

use std::fmt::Write as _;

use crate::dialect::json_string::push_json_string;
use crate::envelope::{ErrorObject, Message, Outcome, Payload, WireId};

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

// === impl Dialect ===

impl super::Dialect {
    /// How this dialect's texts are rendered, on either side (Sideband
    /// envelopes carry JSON-RPC shapes in frame style): the one table of
    /// dialect to style.
    pub const fn style(self) -> Style {
        match self {
            super::Dialect::Ndjson => Style::Line,
            super::Dialect::Holon => Style::Holon,
            super::Dialect::JsonRpc | super::Dialect::Sideband | super::Dialect::JsonRpcHttp => {
                Style::Frame
            }
        }
    }
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
            // a string); one SIMD pass finds either.
            if style == Style::Line && memchr::memchr2(b'\n', b'\r', text.as_bytes()).is_some() {
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

#[cfg(test)]
mod tests;
