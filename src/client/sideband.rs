//! `switchyard call --sideband`: one JSON v1 `r` envelope on subject `rpc`
//! over SBP frames (sideband.md §2, §3, §6), after the handshake exchange.
//! The reply envelope (`R` or `E` with our cid) is returned as received.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use super::{checked_params, json_string, parse_url, ClientError, Target};
use crate::dialect::sideband::{frame, random_peer_id, Body, Control, Frame, Handshake, Subject};

/// Sends one Sideband request (`params` any JSON value, omitted when
/// absent) and returns the reply envelope's JSON text. Only `ws://` URLs
/// apply. The handshake advertises no CBOR, so the reply is JSON.
pub async fn call_sideband(
    url: &str,
    method: &str,
    params: Option<&str>,
    timeout: Duration,
) -> Result<String, ClientError> {
    let params = params.map(|p| checked_params(p, false)).transpose()?;
    let Target::Ws(url) = parse_url(url)? else {
        return Err(ClientError::UnsupportedUrl(url.to_owned()));
    };
    let id = frame::random_id();
    let cid: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let mut envelope = format!(
        "{{\"t\":\"r\",\"m\":{},\"cid\":\"{cid}\"",
        json_string(method)
    );
    if let Some(params) = &params {
        envelope.push_str(",\"p\":");
        envelope.push_str(params);
    }
    envelope.push('}');
    let request = Frame::message(id, Subject::Rpc, envelope.into_bytes());
    tokio::time::timeout(timeout, exchange(url, request, &cid))
        .await
        .map_err(|_| ClientError::Timeout(timeout))?
}

async fn exchange(url: &str, request: Frame, cid: &str) -> Result<String, ClientError> {
    let (mut ws, _response) = tokio_tungstenite::connect_async(url).await?;
    let hello = Handshake::local(random_peer_id(), false).to_bytes();
    let hello = Frame::control(frame::random_id(), Control::Handshake(hello));
    ws.send(Message::binary(frame::encode(&hello))).await?;
    let mut sent = false;
    while let Some(message) = ws.next().await {
        let bytes = match message? {
            Message::Binary(bytes) => bytes,
            Message::Close(_) => return Err(ClientError::Closed),
            _ => continue,
        };
        let Ok(frame) = frame::decode(&bytes) else {
            continue;
        };
        match frame.body {
            // Requests wait for the peer's handshake (§10).
            Body::Control(Control::Handshake(_)) if !sent => {
                ws.send(Message::binary(frame::encode(&request))).await?;
                sent = true;
            }
            Body::Message {
                subject: Subject::Rpc,
                data,
            } if is_reply(&data, cid) => {
                // The reply is in hand; a failed close changes nothing for the caller.
                let _ = ws.close(None).await;
                return Ok(String::from_utf8_lossy(&data).into_owned());
            }
            Body::Control(Control::Close(_)) => return Err(ClientError::Closed),
            _ => {}
        }
    }
    Err(ClientError::Closed)
}

/// An `R` or `E` envelope carrying `cid`.
fn is_reply(data: &[u8], cid: &str) -> bool {
    let Ok(env) = serde_json::from_slice::<serde_json::Value>(data) else {
        return false;
    };
    matches!(env["t"].as_str(), Some("R" | "E")) && env["cid"].as_str() == Some(cid)
}
