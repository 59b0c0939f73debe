//! `switchyard call --sideband`: one JSON v1 `r` envelope on subject `rpc`
//! over SBP frames (sideband.md §2, §3, §6), after the handshake exchange.
//! The reply envelope (`R` or `E` with our cid) is returned as received.

use std::path::Path;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use super::args::{checked_params, ws_only};
use super::error::ClientError;
use serde_json::value::RawValue;

use crate::dialect::sideband::{
    decode_envelope, encode_envelope, frame, random_peer_id, Body, Cid, Control, Encoding, Frame,
    Handshake, Subject,
};
use crate::envelope::{Message as Envelope, Payload, WireId};

/// Sends one Sideband request (`params` any JSON value, omitted when
/// absent) and returns the reply envelope's JSON text. Only `ws://` and
/// `wss://` URLs apply; `token` goes in the upgrade's `Authorization:
/// Bearer` header; `ca_file`: `wss://` trusts only its certificates.
/// The handshake advertises no CBOR, so the reply is JSON.
pub async fn call_sideband(
    url: &str,
    method: &str,
    params: Option<&str>,
    token: Option<&str>,
    ca_file: Option<&Path>,
    timeout: Duration,
) -> Result<String, ClientError> {
    let params = params.map(|p| checked_params(p, false)).transpose()?;
    let url = ws_only(url, ca_file)?;
    let id = frame::random_id();
    let params = params
        .map(|p| RawValue::from_string(p).map(|raw| Payload::Json(raw.into())))
        .transpose()
        .map_err(|e| ClientError::InvalidParams(e.to_string()))?;
    let envelope = Envelope::Request {
        id: WireId::Cid(id),
        method: method.into(),
        params,
    };
    let data = encode_envelope(&envelope, Encoding::Json)
        .map_err(|e| ClientError::InvalidParams(e.to_string()))?;
    let request = Frame::message(id, Subject::Rpc, data);
    tokio::time::timeout(timeout, exchange(url, token, ca_file, request, id))
        .await
        .map_err(|_| ClientError::Timeout(timeout))?
}

async fn exchange(
    url: &str,
    token: Option<&str>,
    ca_file: Option<&Path>,
    request: Frame<'_>,
    cid: Cid,
) -> Result<String, ClientError> {
    let mut ws = super::connect::ws_connect(url, None, token, ca_file).await?;
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
fn is_reply(data: &[u8], cid: Cid) -> bool {
    matches!(
        decode_envelope(data, Encoding::Json),
        Ok(Envelope::Response { id: WireId::Cid(c), .. } | Envelope::Error { id: Some(WireId::Cid(c)), .. }) if c == cid
    )
}
