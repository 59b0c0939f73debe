//! One test client per listener dialect, with the same small interface, so
//! scenario suites can run against any listener.
//!
//! Every client sends and receives JSON-RPC 2.0 text. The Sideband client
//! ([`SbClient`]) translates: it sends `r`/`N`/`R`/`E` envelopes in SBP
//! Message frames (JSON v1 or CBOR v2, as negotiated) and renders what it
//! receives back as JSON-RPC text with the id token the request was sent
//! with, checking the Sideband rules of every frame on the way.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::value::RawValue;
use switchyard::dialect::sideband::{
    cbor_to_json, decode, decode_envelope, encode, encode_envelope, random_id, random_peer_id,
    Body, Cid, Control, Encoding, Frame, Handshake, Subject, CAP_CBOR, CAP_RPC,
};
use switchyard::envelope::{ErrorObject, Message as Envelope, Method, Outcome, Payload, WireId};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use super::{Ws, STEP};

/// The listener dialects a test client can speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speak {
    JsonRpc,
    Holon,
    Ndjson,
    /// Sideband, JSON v1 envelopes (the client does not offer CBOR).
    SidebandJson,
    /// Sideband, CBOR v2 envelopes (the client offers `encoding/cbor`).
    SidebandCbor,
    /// JSON-RPC over HTTP: each message one `POST` (`jsonrpc-http`).
    Http,
}

impl Speak {
    /// True for both Sideband encodings.
    pub fn is_sideband(self) -> bool {
        matches!(self, Speak::SidebandJson | Speak::SidebandCbor)
    }
}

/// What ended a connection, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// A WebSocket close frame with this code.
    Close(u16),
    /// EOF / reset without a close frame.
    Eof,
}

pub enum TestClient {
    /// Each text sent is a `POST` of its own (in a task, so that several
    /// are in flight at once, as on a connection); each `200` body is a
    /// message received, a `204` none.
    Http(Box<HttpClient>),
    Ws(Speak, Box<Ws>),
    Unix(Lines<BufReader<OwnedReadHalf>>, OwnedWriteHalf),
    Sideband(Box<SbClient>),
}

impl TestClient {
    /// Connects to `endpoint`: a ws:// URL, or a socket path for NDJSON.
    pub async fn connect(speak: Speak, endpoint: &str) -> TestClient {
        match speak {
            Speak::Ndjson => {
                let stream = UnixStream::connect(Path::new(endpoint))
                    .await
                    .expect("unix connect");
                let (read, write) = stream.into_split();
                TestClient::Unix(BufReader::new(read).lines(), write)
            }
            Speak::JsonRpc => {
                let (ws, _) = tokio_tungstenite::connect_async(endpoint)
                    .await
                    .expect("ws connect");
                TestClient::Ws(speak, Box::new(ws))
            }
            Speak::Holon => {
                let mut request = endpoint.into_client_request().expect("request");
                request.headers_mut().insert(
                    "Sec-WebSocket-Protocol",
                    HeaderValue::from_static("holon-rpc"),
                );
                let (ws, response) = tokio_tungstenite::connect_async(request)
                    .await
                    .expect("ws connect");
                assert_eq!(
                    response
                        .headers()
                        .get("Sec-WebSocket-Protocol")
                        .and_then(|v| v.to_str().ok()),
                    Some("holon-rpc"),
                    "switchyard must select holon-rpc"
                );
                TestClient::Ws(speak, Box::new(ws))
            }
            Speak::SidebandJson | Speak::SidebandCbor => {
                TestClient::Sideband(Box::new(SbClient::connect(speak, endpoint).await))
            }
            Speak::Http => TestClient::Http(Box::new(HttpClient::new(endpoint))),
        }
    }

    pub fn speaks(&self) -> Speak {
        match self {
            TestClient::Ws(s, _) => *s,
            TestClient::Http(_) => Speak::Http,
            TestClient::Unix(..) => Speak::Ndjson,
            TestClient::Sideband(c) => c.speak,
        }
    }

    pub async fn send(&mut self, text: &str) {
        if let Err(e) = self.try_send(text).await {
            panic!("send: {e}");
        }
    }

    /// Sends like [`TestClient::send`], but hands back the write error: for
    /// tests in which the gateway may close the connection first (a slow or
    /// misbehaving client), where that is an expected outcome, not a crash.
    pub async fn try_send(&mut self, text: &str) -> Result<(), String> {
        match self {
            TestClient::Ws(_, ws) => ws
                .send(Message::Text(text.into()))
                .await
                .map_err(|e| e.to_string()),
            TestClient::Unix(_, w) => {
                w.write_all(text.as_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
                w.write_all(b"\n").await.map_err(|e| e.to_string())
            }
            TestClient::Sideband(c) => c.try_send_jsonrpc(text).await,
            TestClient::Http(c) => {
                c.post(text);
                Ok(())
            }
        }
    }

    /// The next text message (WebSocket control frames skipped).
    pub async fn recv(&mut self) -> String {
        match self.next().await {
            Ok(text) => text,
            Err(end) => panic!("connection ended ({end:?}) while a message was expected"),
        }
    }

    /// The next text message, or how the connection ended.
    pub async fn next(&mut self) -> Result<String, Ended> {
        let step = async {
            match self {
                TestClient::Ws(_, ws) => loop {
                    match ws.next().await {
                        Some(Ok(Message::Text(t))) => return Ok(t.to_string()),
                        Some(Ok(Message::Close(f))) => {
                            return Err(Ended::Close(f.map_or(1005, |f| u16::from(f.code))))
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(_)) | None => return Err(Ended::Eof),
                    }
                },
                TestClient::Unix(lines, _) => match lines.next_line().await {
                    Ok(Some(line)) => Ok(line),
                    _ => Err(Ended::Eof),
                },
                TestClient::Sideband(c) => c.next_jsonrpc().await,
                TestClient::Http(c) => c.answers.recv().await.unwrap_or(Err(Ended::Eof)),
            }
        };
        tokio::time::timeout(STEP, step)
            .await
            .expect("timed out waiting for a message")
    }

    /// Asserts nothing arrives for `wait` (WebSocket control frames aside).
    pub async fn silence(&mut self, wait: Duration) {
        if let Ok(got) = tokio::time::timeout(wait, self.next()).await {
            panic!("expected silence, got {got:?}");
        }
    }
}

/// A Sideband client behind the JSON-RPC text interface.
///
/// - `send`: a JSON-RPC request becomes `r` on `rpc` with a fresh random cid
///   (which is also its frame id, as sideband.md §6 has it); the id token is
///   remembered under the cid. A notification becomes `N` on `event`. A
///   response answers a request the gateway pushed, by the string id that
///   request was rendered with (its cid in hex).
/// - `next`: every Message frame must be in the negotiated encoding and on
///   the subject its envelope belongs to; `R`/`E` must carry a cid this
///   client sent and has not had answered (each reply maps back to exactly
///   one request) in a frame with its own frame id; a gateway `r` must use
///   its cid as frame id. CBOR payloads are rendered as JSON text
///   (`cbor_to_json`). A void result is rendered without `result`.
#[derive(Debug)]
pub struct SbClient {
    pub speak: Speak,
    pub ws: Ws,
    /// The encoding both sides send in.
    pub encoding: Encoding,
    /// The gateway's handshake.
    pub remote: Handshake,
    /// Requests sent and not answered yet: cid → the id token sent with.
    pending: HashMap<Cid, String>,
    /// Requests the gateway pushed and the test has not answered: hex → cid.
    pushed: HashMap<String, Cid>,
    /// Reasons of the Control Close frames received.
    pub control_closes: Vec<String>,
}

impl SbClient {
    /// Connects and negotiates: offers `encoding/cbor` only for
    /// [`Speak::SidebandCbor`], and checks the gateway's handshake.
    pub async fn connect(speak: Speak, url: &str) -> SbClient {
        assert!(speak.is_sideband(), "{speak:?} is not Sideband");
        let (mut ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("ws connect");
        let local = Handshake::local(random_peer_id(), speak == Speak::SidebandCbor);
        let hello = Frame::control(random_id(), Control::Handshake(local.to_bytes()));
        ws.send(Message::Binary(encode(&hello).into()))
            .await
            .expect("send handshake");
        // The gateway's handshake must be the first frame it sends.
        let first = tokio::time::timeout(STEP, next_binary(&mut ws))
            .await
            .expect("gateway handshake in time")
            .unwrap_or_else(|end| panic!("connection ended ({end:?}) before the handshake"));
        let frame = decode(&first).unwrap_or_else(|e| panic!("invalid first frame: {e}"));
        let Body::Control(Control::Handshake(data)) = &frame.body else {
            panic!("the gateway's first frame is not a handshake: {frame:?}")
        };
        let remote = Handshake::parse(data).expect("the gateway's handshake is valid");
        assert!(
            remote.peer_id.len() == 32
                && remote
                    .peer_id
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "peerId must be 32 lowercase hex characters: {remote:?}"
        );
        assert!(
            remote.caps.iter().any(|c| c == CAP_RPC) && remote.caps.iter().any(|c| c == CAP_CBOR),
            "the gateway advertises rpc and encoding/cbor: {remote:?}"
        );
        let encoding = Encoding::negotiate(&local, &remote);
        let want = if speak == Speak::SidebandCbor {
            Encoding::Cbor
        } else {
            Encoding::Json
        };
        assert_eq!(encoding, want, "negotiated encoding for {speak:?}");
        SbClient {
            speak,
            ws,
            encoding,
            remote,
            pending: HashMap::new(),
            pushed: HashMap::new(),
            control_closes: Vec::new(),
        }
    }

    /// Sends one message given as JSON-RPC text (see the type's docs).
    pub async fn send_jsonrpc(&mut self, text: &str) {
        if let Err(e) = self.try_send_jsonrpc(text).await {
            panic!("send: {e}");
        }
    }

    /// [`SbClient::send_jsonrpc`], handing back the write error.
    pub async fn try_send_jsonrpc(&mut self, text: &str) -> Result<(), String> {
        assert!(
            !text.trim_start().starts_with('['),
            "Sideband has no batches: {text}"
        );
        let members: HashMap<String, Box<RawValue>> = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("not a JSON object ({e}): {text}"));
        let payload = |key: &str| {
            members
                .get(key)
                .map(|raw| Payload::Json(raw.clone().into()))
        };
        let (frame_id, subject, msg) = if let Some(method) = members.get("method") {
            let method: Method = serde_json::from_str(method.get()).expect("method is a string");
            match members.get("id") {
                Some(id) => {
                    let cid: Cid = rand::random();
                    self.pending.insert(cid, id.get().to_owned());
                    let msg = Envelope::Request {
                        id: WireId::Cid(cid),
                        method,
                        params: payload("params"),
                    };
                    (cid, Subject::Rpc, msg)
                }
                None => {
                    let msg = Envelope::Notification {
                        method,
                        params: payload("params"),
                    };
                    (random_id(), Subject::Event, msg)
                }
            }
        } else {
            let id = members
                .get("id")
                .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
                .unwrap_or_else(|| panic!("a response needs a string id: {text}"));
            let cid = self
                .pushed
                .remove(&id)
                .unwrap_or_else(|| panic!("no pushed request has id {id:?}: {text}"));
            let id = WireId::Cid(cid);
            let msg = match (payload("result"), members.get("error")) {
                (Some(result), None) => Envelope::Response {
                    id,
                    result: Outcome::Value(result),
                },
                (None, Some(error)) => {
                    let e: HashMap<String, Box<RawValue>> =
                        serde_json::from_str(error.get()).expect("error object");
                    let error = ErrorObject {
                        code: serde_json::from_str(e["code"].get()).expect("integer code"),
                        message: serde_json::from_str(e["message"].get()).expect("message"),
                        data: e.get("data").map(|d| Payload::Json(d.clone().into())),
                    };
                    Envelope::Error {
                        id: Some(id),
                        error,
                    }
                }
                _ => panic!("a response needs exactly one of result and error: {text}"),
            };
            (random_id(), Subject::Rpc, msg)
        };
        let data = encode_envelope(&msg, self.encoding)
            .unwrap_or_else(|e| panic!("cannot encode {text} as {:?}: {e}", self.encoding));
        self.ws
            .send(Message::Binary(
                encode(&Frame::message(frame_id, subject, data)).into(),
            ))
            .await
            .map_err(|e| e.to_string())
    }

    /// Sends one frame as a binary message.
    pub async fn send_frame(&mut self, frame: &Frame<'_>) {
        self.ws
            .send(Message::Binary(encode(frame).into()))
            .await
            .expect("send");
    }

    /// The next Message frame's envelope as JSON-RPC text, or how the
    /// connection ended. Control Close frames are recorded; an ErrorFrame,
    /// a second handshake or a text frame fails the test.
    pub async fn next_jsonrpc(&mut self) -> Result<String, Ended> {
        loop {
            let bytes = next_binary(&mut self.ws).await?;
            let frame =
                decode(&bytes).unwrap_or_else(|e| panic!("invalid frame from the gateway: {e}"));
            match frame.body {
                Body::Message { subject, data } => {
                    return Ok(self.render(frame.id, &subject, &data));
                }
                Body::Control(Control::Close(reason)) => self.control_closes.push(reason),
                Body::Control(Control::Ping) => {
                    self.send_frame(&Frame::control(random_id(), Control::Pong))
                        .await;
                }
                Body::Control(Control::Pong) | Body::Ack { .. } => {}
                Body::Control(Control::Handshake(_)) => panic!("a second handshake: {frame:?}"),
                Body::Error { .. } => panic!("unexpected ErrorFrame: {frame:?}"),
            }
        }
    }

    /// Checks one Message frame and renders its envelope.
    fn render(&mut self, frame_id: Cid, subject: &Subject, data: &[u8]) -> String {
        assert_eq!(
            Encoding::detect(data),
            self.encoding,
            "every envelope comes in the negotiated encoding"
        );
        let msg = decode_envelope(data, self.encoding)
            .unwrap_or_else(|e| panic!("invalid envelope from the gateway: {e}"));
        let want_subject = match msg {
            Envelope::Notification { .. } => Subject::Event,
            _ => Subject::Rpc,
        };
        assert_eq!(subject, &want_subject, "subject of {msg:?}");
        match msg {
            Envelope::Request { id, method, params } => {
                let cid = cid_of(&id);
                assert_eq!(frame_id, cid, "a gateway request's cid is its frame id");
                let hex = hex(&cid);
                assert!(
                    self.pushed.insert(hex.clone(), cid).is_none(),
                    "the gateway reused cid {hex}"
                );
                let mut out = format!(r#"{{"jsonrpc":"2.0","method":{}"#, json_string(&method));
                if let Some(p) = params {
                    out.push_str(&format!(r#","params":{}"#, json_text(&p)));
                }
                out.push_str(&format!(r#","id":"{hex}"}}"#));
                out
            }
            Envelope::Notification { method, params } => {
                let mut out = format!(r#"{{"jsonrpc":"2.0","method":{}"#, json_string(&method));
                if let Some(p) = params {
                    out.push_str(&format!(r#","params":{}"#, json_text(&p)));
                }
                out.push('}');
                out
            }
            Envelope::Response { id, result } => {
                let token = self.answered(frame_id, &id);
                match result {
                    Outcome::Value(p) => format!(
                        r#"{{"jsonrpc":"2.0","result":{},"id":{token}}}"#,
                        json_text(&p)
                    ),
                    // Void: no result at all.
                    Outcome::Void => format!(r#"{{"jsonrpc":"2.0","id":{token}}}"#),
                }
            }
            Envelope::Error { id, error } => {
                let id = id.unwrap_or_else(|| panic!("an E without cid: {error:?}"));
                let token = self.answered(frame_id, &id);
                let mut e = format!(
                    r#"{{"code":{},"message":{}"#,
                    error.code,
                    json_string(&error.message)
                );
                if let Some(d) = &error.data {
                    e.push_str(&format!(r#","data":{}"#, json_text(d)));
                }
                format!(r#"{{"jsonrpc":"2.0","error":{e}}},"id":{token}}}"#)
            }
        }
    }

    /// The id token of the request a reply answers; the reply must carry a
    /// pending cid in a frame of its own.
    fn answered(&mut self, frame_id: Cid, id: &WireId) -> String {
        let cid = cid_of(id);
        assert_ne!(frame_id, cid, "a reply has its own fresh frame id");
        self.pending.remove(&cid).unwrap_or_else(|| {
            panic!(
                "a reply for cid {} that this client did not send or already got an answer for",
                hex(&cid)
            )
        })
    }
}

/// The next binary message (WebSocket pings and pongs skipped).
async fn next_binary(ws: &mut Ws) -> Result<Vec<u8>, Ended> {
    loop {
        match ws.next().await {
            Some(Ok(Message::Binary(b))) => return Ok(b.to_vec()),
            Some(Ok(Message::Text(t))) => panic!("a text frame from a Sideband listener: {t}"),
            Some(Ok(Message::Close(f))) => {
                return Err(Ended::Close(f.map_or(1005, |f| u16::from(f.code))))
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Err(Ended::Eof),
        }
    }
}

fn cid_of(id: &WireId) -> Cid {
    match id {
        WireId::Cid(cid) => *cid,
        WireId::Json(raw) => panic!("a Sideband id that is not a cid: {}", raw.get()),
    }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A payload as JSON text (CBOR transcoded by sideband.md §7).
pub fn json_text(p: &Payload) -> String {
    match p {
        Payload::Json(raw) => raw.get().to_owned(),
        Payload::Cbor(bytes) => cbor_to_json(bytes)
            .unwrap_or_else(|e| panic!("CBOR payload without a JSON form: {e}"))
            .get()
            .to_owned(),
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// The HTTP "connection" of [`TestClient::Http`]: hyper's client (one
/// pool, keep-alive) and the answers of the `POST`s sent, as they come.
pub struct HttpClient {
    url: String,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
    tx: tokio::sync::mpsc::UnboundedSender<Result<String, Ended>>,
    answers: tokio::sync::mpsc::UnboundedReceiver<Result<String, Ended>>,
}

impl HttpClient {
    fn new(endpoint: &str) -> HttpClient {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        let (tx, answers) = tokio::sync::mpsc::unbounded_channel();
        HttpClient {
            url: endpoint.replacen("ws://", "http://", 1),
            client,
            tx,
            answers,
        }
    }

    /// POSTs `text` in a task; a `200` body becomes the next answer, a
    /// `204` nothing, any other status the text `HTTP <status>`.
    fn post(&self, text: &str) {
        use http_body_util::BodyExt;
        let request = hyper::Request::post(self.url.as_str())
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                text.to_owned(),
            )))
            .expect("request");
        let (client, tx) = (self.client.clone(), self.tx.clone());
        tokio::spawn(async move {
            let answer = match client.request(request).await {
                Ok(response) if response.status() == 204 => return,
                Ok(response) if response.status() == 200 => {
                    match response.into_body().collect().await {
                        Ok(body) => Ok(String::from_utf8_lossy(&body.to_bytes()).into_owned()),
                        Err(_) => Err(Ended::Eof),
                    }
                }
                Ok(response) => Ok(format!("HTTP {}", response.status().as_u16())),
                Err(_) => Err(Ended::Eof),
            };
            // The test may have stopped listening: nothing to tell.
            let _ = tx.send(answer);
        });
    }
}
