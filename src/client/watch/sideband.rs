//! `switchyard watch --sideband`: the subscribe call as an `r` envelope on
//! `rpc` after the handshake exchange (sideband.md §2, §3, §6); events are
//! `N` envelopes on `event` (`e` the topic, `d` the data; for a persistent
//! delivery `e` is `rpc.notification.persistent` and `d` its params). The
//! handshake advertises no CBOR, so every envelope is JSON.

use std::future::Future;
use std::pin::Pin;

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use super::{ack_params, emit, Ended, Output, Watch, WatchError};
use crate::client::connect::{ws_connect, Ws};
use crate::client::ClientError;
use crate::dialect::sideband::{
    decode_envelope, encode_envelope, frame, random_peer_id, Body, Cid, Control, Encoding, Frame,
    Handshake, Subject,
};
use crate::envelope::{Message as Envelope, Payload, WireId};

/// An `N` envelope, as much of it as the watch reads.
#[derive(Deserialize)]
struct Event<'a> {
    t: std::borrow::Cow<'a, str>,
    #[serde(default)]
    e: Option<String>,
    #[serde(borrow, default)]
    d: Option<&'a RawValue>,
}

/// Watches over Sideband; see [`super::watch`].
pub(super) async fn watch(
    url: &str,
    token: Option<&str>,
    w: &Watch,
    (method, params): (&str, Value),
    mut stop: Pin<&mut impl Future<Output = ()>>,
    out: &mut impl Output,
) -> Result<Ended, WatchError> {
    let connecting = tokio::time::timeout(
        w.timeout,
        ws_connect(url, None, token, w.ca_file.as_deref()),
    );
    let mut ws = connecting
        .await
        .map_err(|_| ClientError::Timeout(w.timeout))??;
    let hello = Handshake::local(random_peer_id(), false).to_bytes();
    send(
        &mut ws,
        &Frame::control(frame::random_id(), Control::Handshake(hello)),
    )
    .await?;
    let subscribe = request(method, params)?;
    let mut pending = Some(subscribe);
    let sub_cid = pending.as_ref().map(|(cid, _)| *cid);
    let mut subscribed = false;
    let deadline = tokio::time::Instant::now() + w.timeout;
    loop {
        let message = tokio::select! {
            message = ws.next() => message,
            () = stop.as_mut() => {
                // The watch is over either way.
                drop(ws.close(None).await);
                return Ok(Ended::Stopped);
            }
            () = tokio::time::sleep_until(deadline), if !subscribed => {
                return Err(ClientError::Timeout(w.timeout).into());
            }
        };
        let bytes = match message {
            None => return Ok(Ended::ServerClosed(String::new())),
            Some(Err(e)) => return Err(ClientError::from(e).into()),
            Some(Ok(Message::Binary(bytes))) => bytes,
            Some(Ok(Message::Close(frame))) => {
                let why = frame.map_or_else(String::new, |f| {
                    format!("{} {}", u16::from(f.code), f.reason)
                });
                return Ok(Ended::ServerClosed(why));
            }
            Some(Ok(_)) => continue,
        };
        let Ok(frame) = frame::decode(&bytes) else {
            continue;
        };
        match frame.body {
            // Requests wait for the peer's handshake (§10).
            Body::Control(Control::Handshake(_)) => {
                if let Some((_, request)) = pending.take() {
                    send(&mut ws, &request).await?;
                }
            }
            Body::Control(Control::Ping) => {
                send(&mut ws, &Frame::control(frame::random_id(), Control::Pong)).await?;
            }
            Body::Control(Control::Close(reason)) => return Ok(Ended::ServerClosed(reason)),
            Body::Message {
                subject: Subject::Rpc,
                data,
            } => match decode_envelope(&data, Encoding::Json) {
                Ok(Envelope::Response {
                    id: WireId::Cid(c), ..
                }) if Some(c) == sub_cid => subscribed = true,
                Ok(Envelope::Error {
                    id: Some(WireId::Cid(c)),
                    ..
                }) => {
                    let text = String::from_utf8_lossy(&data).into_owned();
                    if Some(c) == sub_cid {
                        return Err(WatchError::Refused(text));
                    }
                    eprintln!("switchyard watch: acknowledgement refused: {text}");
                }
                _ => {}
            },
            Body::Message {
                subject: Subject::Event,
                data,
            } => {
                let Ok(event) = serde_json::from_slice::<Event<'_>>(&data) else {
                    continue;
                };
                let (true, Some(topic), Some(d)) = (event.t == "N", event.e, event.d) else {
                    continue;
                };
                let persistent = topic == "rpc.notification.persistent";
                let line = if persistent {
                    d.get().to_owned()
                } else {
                    format!("{{\"topic\":{},\"data\":{}}}", Value::from(topic), d.get())
                };
                if !emit(out, &line)? {
                    drop(ws.close(None).await);
                    return Ok(Ended::OutputClosed);
                }
                let ack = match (persistent, &w.persistent) {
                    (true, Some(id)) => ack_params(d, id),
                    _ => None,
                };
                if let Some(ack) = ack {
                    let (_, request) = self::request("rpc.acknowledge.persistent", ack)?;
                    send(&mut ws, &request).await?;
                }
            }
            Body::Error { code, message, .. } => {
                eprintln!("switchyard watch: Sideband error {code}: {message}");
            }
            _ => {}
        }
    }
}

/// An `r` envelope on `rpc` calling `method`, with its cid.
fn request(method: &str, params: Value) -> Result<(Cid, Frame<'static>), ClientError> {
    let cid = frame::random_id();
    let params = RawValue::from_string(params.to_string())
        .map_err(|e| ClientError::InvalidParams(e.to_string()))?;
    let envelope = Envelope::Request {
        id: WireId::Cid(cid),
        method: method.into(),
        params: Some(Payload::Json(params.into())),
    };
    let data = encode_envelope(&envelope, Encoding::Json)
        .map_err(|e| ClientError::InvalidParams(e.to_string()))?;
    Ok((cid, Frame::message(cid, Subject::Rpc, data)))
}

async fn send(ws: &mut Ws, frame: &Frame<'_>) -> Result<(), ClientError> {
    Ok(ws.send(Message::binary(frame::encode(frame))).await?)
}
