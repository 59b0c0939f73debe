//! The methods of the reference WebSocket servers, shared by both dialects.
//!
//! Everything the NDJSON daemon computes comes from [`methods::call`]
//! (`Subscribe` excepted: it is NDJSON-only and unknown here). Four more
//! exercise what only a WebSocket upstream can do:
//! - `whoami` → `{"connection":N}`, this connection's accept number;
//! - `callback` `{"method":M,"params":P}` sends the client the request
//!   `{"jsonrpc":"2.0","id":"s<K>","method":M,"params":P}` on the same
//!   connection, waits up to [`CALLBACK_TIMEOUT`] for its reply and answers
//!   `{"reply":<result>}` or `{"reply":{"error":<error>}}`; on no reply,
//!   -32000 `callback timed out`;
//! - `push` `{"method":M,"params":P}` sends a notification (JSON-RPC) or an
//!   `s<K>` request whose reply nobody awaits (holon), then answers
//!   `{"pushed":true}`; with `"times":N` (at most [`MAX_PUSH_TIMES`]) it
//!   sends N of them back to back, each waiting for room in the outbox
//!   (none dropped), as fast as the client reads;
//! - `close_me` answers `{"closing":true}`, then the connection closes 1001.
//!
//! holon-rpc also gets `rpc.heartbeat` → `{}`.

use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::super::methods::{self, Outcome, RpcError};
use super::conn::{Conn, Reply};
use super::WsDialect;

/// The outcome of one call.
#[derive(Debug)]
pub(super) struct Answer {
    /// The raw JSON result, or the error to answer with.
    pub(super) result: Result<String, RpcError>,
    /// Close the connection (1001) once the answer is sent.
    pub(super) close: bool,
}

/// `callback` and `push` params.
#[derive(Deserialize)]
struct Forward<'a> {
    method: String,
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    /// `push` only: how many to send (1 when absent).
    #[serde(default)]
    times: Option<u64>,
}

/// The most notifications one `push` sends.
pub(super) const MAX_PUSH_TIMES: u64 = 1_000_000;

/// The NDJSON daemon's methods that are served here too.
const DAEMON_METHODS: [&str; 9] = [
    "echo",
    "sum",
    "subtract",
    "get_data",
    "sleep",
    "fail",
    "notify_hello",
    "notify_sum",
    "update",
];
/// How long `callback` waits for the client's reply.
pub(super) const CALLBACK_TIMEOUT: Duration = Duration::from_secs(10);
/// The code of `callback timed out`.
const SERVER_ERROR: i64 = -32000;

/// Whether `method` may wait, so that it must run in its own task instead of
/// holding up the connection's reader.
pub(super) fn is_slow(method: &str) -> bool {
    matches!(method, "sleep" | "callback")
}

/// Runs `method` for `conn`.
pub(super) async fn invoke(conn: &Conn, method: &str, params: Option<&RawValue>) -> Answer {
    let result = match method {
        "whoami" => Ok(format!("{{\"connection\":{}}}", conn.number)),
        "callback" => callback(conn, params).await,
        "push" => push(conn, params).await,
        "close_me" => {
            return Answer {
                result: Ok("{\"closing\":true}".to_owned()),
                close: true,
            }
        }
        "rpc.heartbeat" if conn.dialect == WsDialect::Holon => Ok("{}".to_owned()),
        m if DAEMON_METHODS.contains(&m) => daemon_method(m, params).await,
        _ => Err(not_found(conn.dialect, method)),
    };
    Answer {
        result,
        close: false,
    }
}

/// The dialect's method-not-found error.
pub(super) fn not_found(dialect: WsDialect, method: &str) -> RpcError {
    match dialect {
        WsDialect::JsonRpc => RpcError::new(-32601, "Method not found"),
        WsDialect::Holon => RpcError::new(-32601, format!("method \"{method}\" not registered")),
    }
}

/// `{"code":C,"message":M[,"data":D]}`
pub(super) fn error_json(err: &RpcError) -> String {
    let message = serde_json::Value::from(err.message.as_ref());
    match &err.data {
        Some(data) => format!(
            "{{\"code\":{},\"message\":{message},\"data\":{data}}}",
            err.code
        ),
        None => format!("{{\"code\":{},\"message\":{message}}}", err.code),
    }
}

/// A method of the NDJSON daemon, in standard (not hld) mode.
async fn daemon_method(method: &str, params: Option<&RawValue>) -> Result<String, RpcError> {
    match methods::call(method, params, false) {
        Outcome::Value(value) => Ok(value.into_owned()),
        Outcome::Error(err) => Err(err),
        Outcome::Sleep(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(ms.to_string())
        }
    }
}

/// `callback`: a server request on this connection, answered with its reply.
async fn callback(conn: &Conn, params: Option<&RawValue>) -> Result<String, RpcError> {
    let fwd = forward_params(params)?;
    let id = conn.next_server_id();
    // Registered before sending, so even an instant reply finds its waiter.
    let reply = conn.expect_reply(&id);
    if !conn.send(request_frame(&id, &fwd)).await {
        conn.forget(&id);
        return Err(RpcError::new(SERVER_ERROR, "connection closed"));
    }
    match tokio::time::timeout(CALLBACK_TIMEOUT, reply).await {
        Ok(Ok(Reply::Result(result))) => Ok(format!("{{\"reply\":{}}}", result.get())),
        Ok(Ok(Reply::Error(error))) => Ok(format!("{{\"reply\":{{\"error\":{}}}}}", error.get())),
        // The waiter is only dropped by `forget`, which nobody else calls for
        // this id; treat it like silence anyway.
        Ok(Err(_)) | Err(_) => {
            conn.forget(&id);
            Err(RpcError::new(SERVER_ERROR, "callback timed out"))
        }
    }
}

/// `push`: a notification (JSON-RPC) or an unawaited `s<K>` request (holon),
/// queued before the answer to `push` itself.
async fn push(conn: &Conn, params: Option<&RawValue>) -> Result<String, RpcError> {
    let fwd = forward_params(params)?;
    let times = fwd.times.unwrap_or(1);
    if times > MAX_PUSH_TIMES {
        let detail = format!("times must be at most {MAX_PUSH_TIMES}");
        return Err(RpcError {
            code: -32602,
            message: "Invalid params".into(),
            data: Some(serde_json::Value::from(detail).to_string()),
        });
    }
    for _ in 0..times {
        let frame = match conn.dialect {
            WsDialect::JsonRpc => format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":{}{}}}",
                serde_json::Value::from(fwd.method.as_str()),
                params_member(fwd.params)
            ),
            // holon-rpc has no notifications; the reply, when it comes, finds
            // no waiter and is dropped.
            WsDialect::Holon => request_frame(&conn.next_server_id(), &fwd),
        };
        if !conn.send(frame).await {
            return Err(RpcError::new(SERVER_ERROR, "connection closed"));
        }
    }
    Ok("{\"pushed\":true}".to_owned())
}

/// Decodes `{"method":M,"params":P}`.
fn forward_params(params: Option<&RawValue>) -> Result<Forward<'_>, RpcError> {
    let raw = params.map_or("null", RawValue::get);
    serde_json::from_str(raw).map_err(|e| {
        let detail = format!("expected {{\"method\":string,\"params\":any}}: {e}");
        RpcError {
            code: -32602,
            message: "Invalid params".into(),
            data: Some(serde_json::Value::from(detail).to_string()),
        }
    })
}

/// `{"jsonrpc":"2.0","id":"<id>","method":M[,"params":P]}`
fn request_frame(id: &str, fwd: &Forward<'_>) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":{}{}}}",
        serde_json::Value::from(id),
        serde_json::Value::from(fwd.method.as_str()),
        params_member(fwd.params)
    )
}

/// `,"params":P`, or nothing when P is absent.
fn params_member(params: Option<&RawValue>) -> String {
    params.map_or_else(String::new, |p| format!(",\"params\":{}", p.get()))
}

/// Deserializes a present member, `null` included, as `Some`.
fn present<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(de).map(Some)
}
