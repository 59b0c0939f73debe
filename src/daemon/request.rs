//! One NDJSON line in, the reply bytes out: parsing, validation and rendering.
//!
//! This is the daemon's synchronous core. It never touches the socket: the
//! connection task ([`super::conn`]) hands it a line and decides what to do with
//! the [`LineOutcome`]. Only `sleep` cannot be answered at once; it comes back as
//! a [`Pending`] so the connection chooses between waiting inline (hld quirks:
//! FIFO) and waiting in a task (standard mode: concurrent).
//!
//! Standard mode validates in the order of `jsonrpc-ws.md` §4; hld mode mimics
//! the decoding of hld's Go request struct (`ndjson-unix.md` §3).

use std::borrow::Cow;

use futures_util::future::join_all;
use serde_json::value::RawValue;

use super::gojson;
use super::item::{first_byte, go_string, is_version_2, parse_item, raw_str, valid_id};
use super::methods::{self, Outcome, RpcError};

/// What the connection must do after one input line.
#[derive(Debug)]
pub(super) enum LineOutcome {
    /// Nothing to write: an empty line, a notification, or a batch of them.
    Silent,
    /// A complete reply line, `\n` included.
    Reply(Vec<u8>),
    /// A reply that needs waiting (`sleep`); resolve it, then write it.
    Pending(Pending),
    /// A `Subscribe` call with its raw params: the connection now belongs to
    /// the subscription.
    Subscribe(Option<Box<RawValue>>),
}

/// A reply (single or batch) with at least one `sleep` still to wait for.
#[derive(Debug)]
pub(super) struct Pending {
    slots: Vec<Slot>,
    batch: bool,
}

/// One response inside a [`Pending`] reply.
#[derive(Debug)]
enum Slot {
    /// Already rendered.
    Done(Vec<u8>),
    /// Answer `ms` with `id` after sleeping `ms` milliseconds.
    Sleep { ms: u64, id: Box<str> },
}

/// What one request item produced.
enum ItemOutcome<'a> {
    Silent,
    Done(Vec<u8>),
    Sleep { ms: u64, id: Cow<'a, str> },
    Subscribe(Option<&'a RawValue>),
}

const INVALID_REQUEST: i64 = -32600;
const PARSE_ERROR_LINE: &[u8] =
    b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32700,\"message\":\"Parse error\"},\"id\":null}\n";
const HLD_BAD_VERSION: &str = "Invalid request: must be JSON-RPC 2.0";

/// Handles one line (without its `\n` and trailing `\r`).
pub(super) fn process(line: &[u8], hld: bool) -> LineOutcome {
    if line.is_empty() {
        return LineOutcome::Silent;
    }
    let Some(raw) = std::str::from_utf8(line)
        .ok()
        .and_then(|text| serde_json::from_str::<&RawValue>(text).ok())
    else {
        return LineOutcome::Reply(PARSE_ERROR_LINE.to_vec());
    };
    if hld {
        return single(hld_item(raw));
    }
    match raw.get().as_bytes().first() {
        Some(b'[') => batch(raw),
        _ => single(standard_item(raw)),
    }
}

/// Renders the error written before closing a connection whose line is too long.
pub(super) fn too_long_line(max: usize) -> Vec<u8> {
    let err = RpcError {
        code: INVALID_REQUEST,
        message: Cow::Borrowed("Invalid Request"),
        data: Some(format!("\"Line exceeds maximum of {max} bytes\"")),
    };
    line_of(|out| push_error(out, &err, "null", false))
}

/// Wraps the outcome of a single (non-batch) request.
fn single(outcome: ItemOutcome<'_>) -> LineOutcome {
    match outcome {
        ItemOutcome::Silent => LineOutcome::Silent,
        ItemOutcome::Done(mut bytes) => {
            bytes.push(b'\n');
            LineOutcome::Reply(bytes)
        }
        ItemOutcome::Sleep { ms, id } => LineOutcome::Pending(Pending {
            slots: vec![Slot::Sleep { ms, id: id.into() }],
            batch: false,
        }),
        ItemOutcome::Subscribe(params) => LineOutcome::Subscribe(params.map(ToOwned::to_owned)),
    }
}

/// Standard mode batch: one array out, in request order.
fn batch(raw: &RawValue) -> LineOutcome {
    let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
        return LineOutcome::Reply(PARSE_ERROR_LINE.to_vec());
    };
    if items.is_empty() {
        return LineOutcome::Reply(line_of(|out| invalid_request(out, "null")));
    }
    let mut slots = Vec::with_capacity(items.len());
    let mut waits = false;
    for item in items {
        match standard_item(item) {
            ItemOutcome::Silent => {}
            ItemOutcome::Done(bytes) => slots.push(Slot::Done(bytes)),
            ItemOutcome::Sleep { ms, id } => {
                waits = true;
                slots.push(Slot::Sleep { ms, id: id.into() });
            }
            // A batch cannot hand its connection over to a stream.
            ItemOutcome::Subscribe(_) => {
                let id = parse_item(item, false)
                    .ok()
                    .and_then(|i| i.id)
                    .filter(|id| valid_id(id))
                    .map_or("null", RawValue::get);
                let mut out = Vec::new();
                invalid_request(&mut out, id);
                slots.push(Slot::Done(out));
            }
        }
    }
    let pending = Pending { slots, batch: true };
    match (pending.slots.is_empty(), waits) {
        (true, _) => LineOutcome::Silent,
        (false, true) => LineOutcome::Pending(pending),
        (false, false) => LineOutcome::Reply(pending.render_ready()),
    }
}

/// Validates and runs one item, strictly (`jsonrpc-ws.md` §4).
fn standard_item(raw: &RawValue) -> ItemOutcome<'_> {
    let Ok(item) = parse_item(raw, false) else {
        return invalid_item("null");
    };
    let id = match item.id {
        Some(id) if !valid_id(id) => return invalid_item("null"),
        id => id.map(RawValue::get),
    };
    let reply_id = id.unwrap_or("null");
    if !item.jsonrpc.is_some_and(is_version_2) {
        return invalid_item(reply_id);
    }
    let Some(method) = item.method.and_then(raw_str) else {
        return invalid_item(reply_id);
    };
    if item
        .params
        .is_some_and(|p| !matches!(first_byte(p), b'[' | b'{'))
    {
        return invalid_item(reply_id);
    }
    if method == "Subscribe" {
        return ItemOutcome::Subscribe(item.params);
    }
    // Notifications are never answered, and no method has side effects.
    let Some(id) = id else {
        return ItemOutcome::Silent;
    };
    answer(
        methods::call(&method, item.params, false),
        Cow::Borrowed(id),
        false,
    )
}

/// Validates and runs the single request of a line the way hld does.
fn hld_item(raw: &RawValue) -> ItemOutcome<'_> {
    let parse_error = || ItemOutcome::Done(PARSE_ERROR_LINE[..PARSE_ERROR_LINE.len() - 1].to_vec());
    match first_byte(raw) {
        b'{' => {}
        b'n' => return hld_error(RpcError::new(INVALID_REQUEST, HLD_BAD_VERSION), "null"),
        _ => return parse_error(),
    }
    let Ok(item) = parse_item(raw, true) else {
        return parse_error();
    };
    // Go decodes into `string` fields: `null` leaves them empty, other
    // non-strings fail the whole decode.
    let (Some(jsonrpc), Some(method)) = (go_string(item.jsonrpc), go_string(item.method)) else {
        return parse_error();
    };
    let id = match item.id.filter(|id| id.get() != "null") {
        None => Cow::Borrowed("null"),
        Some(id) => match gojson::encode_id(id.get()) {
            Some(id) => Cow::Owned(id),
            None => return parse_error(),
        },
    };
    if method == "Subscribe" {
        return ItemOutcome::Subscribe(item.params);
    }
    if jsonrpc != "2.0" {
        return hld_error(RpcError::new(INVALID_REQUEST, HLD_BAD_VERSION), &id);
    }
    answer(methods::call(&method, item.params, true), id, true)
}

/// Turns a method outcome into an item outcome for `id`.
fn answer<'a>(outcome: Outcome<'_>, id: Cow<'a, str>, hld: bool) -> ItemOutcome<'a> {
    match outcome {
        Outcome::Value(result) => {
            let mut out = Vec::with_capacity(result.len() + id.len() + 32);
            push_result(&mut out, &result, &id);
            ItemOutcome::Done(out)
        }
        Outcome::Error(err) => {
            let mut out = Vec::new();
            push_error(&mut out, &err, &id, hld);
            ItemOutcome::Done(out)
        }
        Outcome::Sleep(ms) => ItemOutcome::Sleep { ms, id },
    }
}

fn hld_error(err: RpcError, id: &str) -> ItemOutcome<'static> {
    let mut out = Vec::new();
    push_error(&mut out, &err, id, true);
    ItemOutcome::Done(out)
}

fn invalid_item(id: &str) -> ItemOutcome<'static> {
    let mut out = Vec::new();
    invalid_request(&mut out, id);
    ItemOutcome::Done(out)
}

fn invalid_request(out: &mut Vec<u8>, id: &str) {
    push_error(
        out,
        &RpcError::new(INVALID_REQUEST, "Invalid Request"),
        id,
        false,
    );
}

/// Renders with `f`, then appends the line terminator.
fn line_of(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    f(&mut out);
    out.push(b'\n');
    out
}

/// `{"jsonrpc":"2.0","result":<result>,"id":<id>}`
fn push_result(out: &mut Vec<u8>, result: &str, id: &str) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"result\":");
    out.extend_from_slice(result.as_bytes());
    out.extend_from_slice(b",\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.push(b'}');
}

/// `{"jsonrpc":"2.0","error":{"code":C,"message":M[,"data":D]},"id":<id>}`;
/// hld escapes `<`, `>` and `&` in strings the way Go does.
fn push_error(out: &mut Vec<u8>, err: &RpcError, id: &str, hld: bool) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":");
    out.extend_from_slice(err.code.to_string().as_bytes());
    out.extend_from_slice(b",\"message\":");
    let message = serde_json::Value::from(err.message.as_ref()).to_string();
    if hld {
        out.extend_from_slice(gojson::escape_html(&message).as_bytes());
    } else {
        out.extend_from_slice(message.as_bytes());
    }
    if let Some(data) = &err.data {
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data.as_bytes());
    }
    out.extend_from_slice(b"},\"id\":");
    out.extend_from_slice(id.as_bytes());
    out.push(b'}');
}

// === impl Pending ===

impl Pending {
    /// Waits for every `sleep` (concurrently), then renders the reply line.
    pub(super) async fn resolve(self) -> Vec<u8> {
        let batch = self.batch;
        let parts = join_all(self.slots.into_iter().map(|slot| async move {
            match slot {
                Slot::Done(bytes) => bytes,
                Slot::Sleep { ms, id } => {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    let mut out = Vec::with_capacity(48 + id.len());
                    push_result(&mut out, &ms.to_string(), &id);
                    out
                }
            }
        }))
        .await;
        join_parts(&parts, batch)
    }

    /// Renders a reply whose slots are all done.
    fn render_ready(self) -> Vec<u8> {
        let parts: Vec<Vec<u8>> = self
            .slots
            .into_iter()
            .filter_map(|slot| match slot {
                Slot::Done(bytes) => Some(bytes),
                Slot::Sleep { .. } => None,
            })
            .collect();
        join_parts(&parts, self.batch)
    }
}

/// One line: the single response, or the batch array.
fn join_parts(parts: &[Vec<u8>], batch: bool) -> Vec<u8> {
    let len = parts.iter().map(|p| p.len() + 1).sum::<usize>() + 2;
    let mut out = Vec::with_capacity(len);
    if batch {
        out.push(b'[');
    }
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(part);
    }
    if batch {
        out.push(b']');
    }
    out.push(b'\n');
    out
}
