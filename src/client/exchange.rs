//! One request out, one reply back: the transports of the one-shot client.
//! A WebSocket text frame (JSON-RPC or holon-rpc) or an NDJSON line on a
//! Unix socket, read until the frame or line that answers the request.
//! `wss://` goes over TLS (the upstreams' client configuration, `ca_file`
//! or the system's roots).
//!
//! Bound: a reply of at most [`MAX_REPLY_BYTES`] (larger frames or lines
//! fail the call).

use std::path::Path;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use super::error::{ClientError, MAX_REPLY_BYTES};

/// Which lines or frames count as the reply to our request.
#[derive(Debug, Clone, Copy)]
pub(super) enum Expect {
    /// JSON-RPC over WebSocket: id `1`, or an `id:null` error.
    WsNumber,
    /// NDJSON: id `1`, or any `id:null` response (hld answers its
    /// Subscribe confirmation and undecodable lines with `id:null`).
    NdjsonNumber,
    /// holon-rpc: id `"1"`.
    HolonString,
}

/// Connects (with `token` as a bearer token, if any; `ca_file` for
/// `wss://`), sends `request` in one text frame and waits for the reply
/// frame.
pub(super) async fn ws_exchange(
    url: &str,
    subprotocol: Option<&'static str>,
    token: Option<&str>,
    ca_file: Option<&Path>,
    request: String,
    expect: Expect,
) -> Result<String, ClientError> {
    let mut ws = super::connect::ws_connect(url, subprotocol, token, ca_file).await?;
    ws.send(Message::text(request)).await?;
    while let Some(message) = ws.next().await {
        match message? {
            Message::Text(text) if is_reply(text.as_str(), expect) => {
                // The reply is in hand; a failed close changes nothing for the caller.
                let _ = ws.close(None).await;
                return Ok(text.as_str().to_owned());
            }
            Message::Close(_) => return Err(ClientError::Closed),
            _ => {}
        }
    }
    Err(ClientError::Closed)
}

/// Connects, writes `request` as one line and waits for the reply line. The
/// write side stays open: hld ends a Subscribe on half-close.
pub(super) async fn unix_exchange(path: &Path, request: String) -> Result<String, ClientError> {
    let stream = UnixStream::connect(path)
        .await
        .map_err(|source| ClientError::Connect {
            path: path.display().to_string(),
            source,
        })?;
    let (rd, mut wr) = stream.into_split();
    let mut line = request.into_bytes();
    line.push(b'\n');
    wr.write_all(&line).await?;
    let mut lines = FramedRead::new(rd, LinesCodec::new_with_max_length(MAX_REPLY_BYTES));
    while let Some(next) = lines.next().await {
        let mut text = next.map_err(|e| match e {
            LinesCodecError::MaxLineLengthExceeded => ClientError::ReplyTooLarge,
            LinesCodecError::Io(e) => ClientError::Io(e),
        })?;
        if text.ends_with('\r') {
            text.pop();
        }
        if is_reply(&text, Expect::NdjsonNumber) {
            return Ok(text);
        }
    }
    Err(ClientError::Closed)
}

/// True if `text` is a response to our request rather than a notification,
/// a server request or a reply to someone else.
pub(super) fn is_reply(text: &str, expect: Expect) -> bool {
    let Ok(Value::Object(msg)) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    if msg.contains_key("method") || !(msg.contains_key("result") || msg.contains_key("error")) {
        return false;
    }
    let id = msg.get("id").unwrap_or(&Value::Null);
    match expect {
        Expect::HolonString => id.as_str() == Some("1"),
        Expect::WsNumber => id.as_f64() == Some(1.0) || (id.is_null() && msg.contains_key("error")),
        Expect::NdjsonNumber => id.as_f64() == Some(1.0) || id.is_null(),
    }
}
