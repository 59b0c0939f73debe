//! The holon-rpc dialect, as a strict server (`holon-rpc.md` §2–§8).
//!
//! Every frame is one envelope whose top-level keys are among `jsonrpc`,
//! `id`, `method`, `params`, `result` and `error`, with a non-empty string
//! id. Anything else is a protocol error: close 1002 `malformed JSON` or
//! `invalid envelope: <reason>`, as `HolonClient` does. Requests get a reply
//! with their exact id; `params` must be an object (absent means `{}`), else
//! -32602. Responses are the client's replies to the server's `s<K>`
//! requests, matched by id; unknown ids are ignored.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::value::RawValue;

use super::super::item::{first_byte, is_version_2, raw_str};
use super::super::methods::RpcError;
use super::calls::{self, error_json, is_slow};
use super::conn::{Conn, Flow, Reply};

/// A valid envelope.
#[derive(Debug)]
enum Envelope {
    /// A request; `id` is the raw id token, echoed as is; `params` is `{}`
    /// when absent.
    Request {
        id: String,
        method: String,
        params: Box<RawValue>,
    },
    /// A reply to the server's request `id` (decoded).
    Response { id: String, reply: Reply },
}

/// Why an envelope is invalid, for the close reason.
type Invalid = Cow<'static, str>;

/// The only top-level keys an envelope may have.
const KEYS: [&str; 6] = ["jsonrpc", "id", "method", "params", "result", "error"];
/// The close code for protocol errors.
const PROTOCOL_ERROR: u16 = 1002;

/// Handles one text frame.
pub(super) async fn on_text(conn: &Arc<Conn>, text: &str) -> Flow {
    let Ok(raw) = serde_json::from_str::<&RawValue>(text) else {
        conn.close(PROTOCOL_ERROR, "malformed JSON").await;
        return Flow::Close;
    };
    match envelope(raw) {
        Err(reason) => {
            tracing::debug!(%reason, "ws daemon: invalid holon-rpc envelope");
            conn.close(PROTOCOL_ERROR, format!("invalid envelope: {reason}"))
                .await;
            Flow::Close
        }
        Ok(Envelope::Response { id, reply }) => {
            conn.deliver(&id, reply);
            Flow::Continue
        }
        Ok(Envelope::Request { id, method, params }) => {
            let slow = is_slow(&method);
            let task = respond(conn.clone(), id, method, params);
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
    }
}

/// Runs a request, sends its reply and, after `close_me`, closes 1001.
/// Resolves to whether it closed.
async fn respond(conn: Arc<Conn>, id: String, method: String, params: Box<RawValue>) -> bool {
    let (result, close) = if first_byte(&params) == b'{' {
        let answer = calls::invoke(&conn, &method, Some(&params)).await;
        (answer.result, answer.close)
    } else {
        (
            Err(RpcError::new(-32602, "params must be an object")),
            false,
        )
    };
    let text = match result {
        Ok(result) => format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}"),
        Err(err) => format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{}}}",
            error_json(&err)
        ),
    };
    conn.send(text).await;
    if close {
        conn.close(1001, "closing as asked").await;
    }
    close
}

/// Validates one frame's value the way `HolonClient` does (§2, checks 3–8).
fn envelope(raw: &RawValue) -> Result<Envelope, Invalid> {
    match first_byte(raw) {
        b'{' => {}
        b'[' => return Err("batches are not supported".into()),
        _ => return Err("expected a JSON object".into()),
    }
    let obj = serde_json::from_str::<BTreeMap<String, &RawValue>>(raw.get())
        .map_err(|_| Invalid::from("expected a JSON object"))?;
    if let Some(key) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!("unknown key {}", serde_json::Value::from(key.as_str())).into());
    }
    if !obj.get("jsonrpc").is_some_and(|v| is_version_2(v)) {
        return Err("jsonrpc must be \"2.0\"".into());
    }
    let Some((raw_id, id)) = obj
        .get("id")
        .and_then(|raw| Some((*raw, raw_str(raw)?)))
        .filter(|(_, id)| !id.trim().is_empty())
    else {
        return Err("id must be a non-empty string".into());
    };
    match obj.get("method") {
        Some(method) => request(&obj, raw_id, method),
        None => response(&obj, id.into_owned()),
    }
}

/// The request checks: a non-blank string method, no `result` or `error`.
fn request(
    obj: &BTreeMap<String, &RawValue>,
    raw_id: &RawValue,
    method: &RawValue,
) -> Result<Envelope, Invalid> {
    let Some(method) = raw_str(method).filter(|m| !m.trim().is_empty()) else {
        return Err("method must be a non-empty string".into());
    };
    if obj.contains_key("result") || obj.contains_key("error") {
        return Err("a request cannot carry result or error".into());
    }
    Ok(Envelope::Request {
        id: raw_id.get().to_owned(),
        method: method.into_owned(),
        params: params_or_empty(obj.get("params").copied()),
    })
}

/// The response checks: no `params`, exactly one of `result` and `error`,
/// and an error object with an integer `code` and a string `message`.
fn response(obj: &BTreeMap<String, &RawValue>, id: String) -> Result<Envelope, Invalid> {
    if obj.contains_key("params") {
        return Err("a response cannot carry params".into());
    }
    let reply = match (obj.get("result"), obj.get("error")) {
        (Some(result), None) => Reply::Result((*result).to_owned()),
        (None, Some(error)) if valid_error(error) => Reply::Error((*error).to_owned()),
        (None, Some(_)) => {
            return Err("error needs an integer code and a string message".into());
        }
        _ => return Err("a response needs exactly one of result and error".into()),
    };
    Ok(Envelope::Response { id, reply })
}

/// `Number.isInteger(code)` (so `4.0` passes) and a string `message`.
fn valid_error(error: &RawValue) -> bool {
    let Ok(serde_json::Value::Object(obj)) = serde_json::from_str(error.get()) else {
        return false;
    };
    let integer = match obj.get("code") {
        Some(serde_json::Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    };
    integer && matches!(obj.get("message"), Some(serde_json::Value::String(_)))
}

/// `params` as sent, or `{}` when absent.
fn params_or_empty(params: Option<&RawValue>) -> Box<RawValue> {
    params.map_or_else(
        || RawValue::from_string("{}".to_owned()).expect("`{}` is valid JSON; qed"),
        ToOwned::to_owned,
    )
}
