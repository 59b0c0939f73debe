//! The JSON-RPC 2.0 dialect: one text frame in, replies out
//! (`jsonrpc-ws.md` §2–§5).
//!
//! Items are validated in the order of §4; ids are echoed as their exact
//! raw token; notifications run but are never answered; a batch gets one
//! array in request order, or nothing when no item needs a reply.
//! Response-shaped items (`result` or `error`, no `method`) are the client's
//! replies to the server's `s<K>` requests and produce no output.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::join_all;
use serde_json::value::RawValue;

use super::super::item::{first_byte, is_version_2, raw_str, valid_id};
use super::calls::{self, error_json, is_slow};
use super::conn::{Conn, Flow, Reply};

/// One batch item (or the single request) after validation.
#[derive(Debug)]
enum Entry {
    /// An already rendered reply.
    Done(String),
    /// A valid call; `id` is the raw token, `None` for a notification.
    Call {
        id: Option<String>,
        method: String,
        params: Option<Box<RawValue>>,
    },
}

/// An object's members as raw JSON; later duplicates win.
type Members<'a> = BTreeMap<String, &'a RawValue>;

const PARSE_ERROR: &str =
    r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#;

/// Handles one text frame.
pub(super) async fn on_text(conn: &Arc<Conn>, text: &str) -> Flow {
    let Ok(raw) = serde_json::from_str::<&RawValue>(text) else {
        conn.send(PARSE_ERROR.to_owned()).await;
        return Flow::Continue;
    };
    let (entries, batch): (Vec<Entry>, bool) = if first_byte(raw) == b'[' {
        let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
            conn.send(PARSE_ERROR.to_owned()).await;
            return Flow::Continue;
        };
        if items.is_empty() {
            conn.send(invalid_request("null")).await;
            return Flow::Continue;
        }
        (
            items
                .into_iter()
                .filter_map(|i| classify(conn, i))
                .collect(),
            true,
        )
    } else {
        (classify(conn, raw).into_iter().collect(), false)
    };
    if entries.is_empty() {
        return Flow::Continue;
    }
    let slow = entries
        .iter()
        .any(|e| matches!(e, Entry::Call { method, .. } if is_slow(method)));
    let task = respond(conn.clone(), entries, batch);
    if slow {
        conn.spawn(async move {
            task.await;
        });
        Flow::Continue
    } else if task.await {
        Flow::Close
    } else {
        Flow::Continue
    }
}

/// Validates one item; `None` for a reply to an `s<K>` request.
fn classify(conn: &Conn, item: &RawValue) -> Option<Entry> {
    let Ok(obj) = serde_json::from_str::<Members<'_>>(item.get()) else {
        return Some(Entry::Done(invalid_request("null")));
    };
    if !obj.contains_key("method") && (obj.contains_key("result") || obj.contains_key("error")) {
        deliver(conn, &obj);
        return None;
    }
    let id = obj.get("id").copied();
    if id.is_some_and(|id| !valid_id(id)) {
        return Some(Entry::Done(invalid_request("null")));
    }
    let reply_id = id.map_or("null", RawValue::get);
    let params = obj.get("params").copied();
    let method = obj.get("method").and_then(|m| raw_str(m));
    let valid = obj.get("jsonrpc").is_some_and(|v| is_version_2(v))
        && params.is_none_or(|p| matches!(first_byte(p), b'[' | b'{'));
    match method {
        Some(method) if valid => Some(Entry::Call {
            id: id.map(|id| id.get().to_owned()),
            method: method.into_owned(),
            params: params.map(ToOwned::to_owned),
        }),
        _ => Some(Entry::Done(invalid_request(reply_id))),
    }
}

/// Hands a response-shaped item to the call waiting for it, if any.
fn deliver(conn: &Conn, obj: &Members<'_>) {
    let Some(id) = obj.get("id").and_then(|id| raw_str(id)) else {
        return tracing::debug!("ws daemon: ignoring a reply without a string id");
    };
    let reply = match (obj.get("result"), obj.get("error")) {
        (Some(result), _) => Reply::Result((*result).to_owned()),
        (None, Some(error)) => Reply::Error((*error).to_owned()),
        (None, None) => return,
    };
    conn.deliver(&id, reply);
}

/// Runs the entries concurrently, sends the reply (an array for a batch) and
/// then, if a `close_me` ran, the close frame. Resolves to whether it closed.
async fn respond(conn: Arc<Conn>, entries: Vec<Entry>, batch: bool) -> bool {
    let outcomes = join_all(entries.into_iter().map(|e| run(&conn, e))).await;
    let close = outcomes.iter().any(|(_, close)| *close);
    let mut parts: Vec<String> = outcomes.into_iter().filter_map(|(p, _)| p).collect();
    let text = match (batch, parts.len()) {
        (_, 0) => None,
        (false, _) => Some(parts.swap_remove(0)),
        (true, _) => Some(format!("[{}]", parts.join(","))),
    };
    if let Some(text) = text {
        conn.send(text).await;
    }
    if close {
        conn.close(1001, "closing as asked").await;
    }
    close
}

/// Runs one entry: its rendered reply, if any, and whether to close after.
async fn run(conn: &Conn, entry: Entry) -> (Option<String>, bool) {
    let (id, method, params) = match entry {
        Entry::Done(text) => return (Some(text), false),
        Entry::Call { id, method, params } => (id, method, params),
    };
    let answer = calls::invoke(conn, &method, params.as_deref()).await;
    let Some(id) = id else {
        // Notifications are never answered.
        return (None, answer.close);
    };
    let text = match &answer.result {
        Ok(result) => format!("{{\"jsonrpc\":\"2.0\",\"result\":{result},\"id\":{id}}}"),
        Err(err) => format!(
            "{{\"jsonrpc\":\"2.0\",\"error\":{},\"id\":{id}}}",
            error_json(err)
        ),
    };
    (Some(text), answer.close)
}

/// -32600 `Invalid Request` for the raw id `id`.
fn invalid_request(id: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","error":{{"code":-32600,"message":"Invalid Request"}},"id":{id}}}"#
    )
}
