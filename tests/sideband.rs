//! Sideband through the gateway: a Sideband listener in front of the
//! reference NDJSON daemon (JSON and CBOR envelopes), and a Sideband
//! upstream (a second gateway's Sideband listener) behind a JSON-RPC
//! listener.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use switchyard::dialect::sideband::{
    decode, decode_envelope, decode_with, encode, encode_envelope, random_id, random_peer_id, Body,
    Control, Encoding, Frame, Handshake, Subject, SubjectRules,
};
use switchyard::envelope::{Message, Outcome, Payload, WireId};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// A minimal Sideband client built on the crate's frame codec.
struct SbClient {
    ws: common::Ws,
    encoding: Encoding,
}

impl SbClient {
    async fn connect(url: &str, cbor: bool) -> SbClient {
        let mut ws = common::connect(url).await;
        let hello = Handshake::local("00112233445566778899aabbccddeeff".into(), cbor);
        let frame = Frame::control(random_id(), Control::Handshake(hello.to_bytes()));
        ws.send(WsMessage::Binary(encode(&frame).into()))
            .await
            .expect("send");
        // The gateway's handshake comes first, before anything else.
        let theirs = SbClient::next_frame(&mut ws).await;
        let Body::Control(Control::Handshake(data)) = theirs.body else {
            panic!("expected a handshake, got {theirs:?}")
        };
        let remote = Handshake::parse(&data).expect("valid handshake");
        let encoding = Encoding::negotiate(&hello, &remote);
        SbClient { ws, encoding }
    }

    async fn next_frame(ws: &mut common::Ws) -> Frame<'static> {
        loop {
            let msg = tokio::time::timeout(common::STEP, ws.next())
                .await
                .expect("frame in time")
                .expect("open")
                .expect("read");
            match msg {
                WsMessage::Binary(b) => return decode(&b).expect("valid frame").into_owned(),
                WsMessage::Ping(_) | WsMessage::Pong(_) => continue,
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    async fn call(&mut self, method: &str, params: &str) -> Message {
        self.call_with(method, Some(Payload::json(params).expect("json")))
            .await
    }

    /// Calls `method`; params in either encoding (transcoded to the link's
    /// encoding if needed, CBOR passed as is on a CBOR link).
    async fn call_with(&mut self, method: &str, params: Option<Payload>) -> Message {
        let cid: [u8; 16] = rand::random();
        let req = Message::Request {
            id: WireId::Cid(cid),
            method: method.into(),
            params,
        };
        let data = encode_envelope(&req, self.encoding).expect("envelope");
        self.ws
            .send(WsMessage::Binary(
                encode(&Frame::message(cid, Subject::Rpc, data)).into(),
            ))
            .await
            .expect("send");
        loop {
            let frame = SbClient::next_frame(&mut self.ws).await;
            if let Body::Message { data, .. } = frame.body {
                assert_eq!(
                    Encoding::detect(&data),
                    self.encoding,
                    "reply in the negotiated encoding"
                );
                let msg = decode_envelope(&data, self.encoding).expect("envelope");
                match &msg {
                    Message::Response {
                        id: WireId::Cid(c), ..
                    }
                    | Message::Error {
                        id: Some(WireId::Cid(c)),
                        ..
                    } if *c == cid => return msg,
                    _ => continue,
                }
            }
        }
    }
}

fn result_json(msg: &Message) -> serde_json::Value {
    match msg {
        Message::Response {
            result: Outcome::Value(Payload::Json(raw)),
            ..
        } => common::json(raw.get()),
        Message::Response {
            result: Outcome::Value(Payload::Cbor(bytes)),
            ..
        } => common::json(
            switchyard::dialect::sideband::cbor_to_json(bytes)
                .expect("transcode")
                .get(),
        ),
        other => panic!("expected a result, got {other:?}"),
    }
}

#[tokio::test]
async fn sideband_listener_json_and_cbor_give_the_same_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = switchyard::daemon::Daemon::start(&dir.path().join("d.sock"), Default::default())
        .await
        .expect("daemon");
    let toml = format!(
        "[listeners.sb]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\nrequest_timeout_ms = 300\n\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n[[routes]]\nlistener = \"sb\"\nupstream = \"daemon\"\n",
        daemon.path().display()
    );
    let bound =
        switchyard::app::bind(switchyard::config::Config::from_toml(&toml).expect("config"))
            .await
            .expect("bind");
    let url = bound.ws_url("sb").expect("url");
    let gw = bound.spawn();
    common::wait_connected(&gw, "daemon").await;
    for cbor in [false, true] {
        let mut c = SbClient::connect(&url, cbor).await;
        assert_eq!(
            c.encoding,
            if cbor { Encoding::Cbor } else { Encoding::Json }
        );
        let r = c.call("echo", r#"{"a":[1,2.5,"x",null,true]}"#).await;
        assert_eq!(
            result_json(&r),
            json!({"a": [1, 2.5, "x", null, true]}),
            "cbor={cbor}"
        );
        assert_eq!(result_json(&c.call("subtract", "[42,23]").await), json!(19));
        // An upstream -32000 maps to Sideband 2000 (declared equivalent).
        match c.call("fail", r#"{"code":-32000,"message":"boom"}"#).await {
            Message::Error { error, .. } => {
                assert_eq!((error.code, error.message.as_str()), (2000, "boom"))
            }
            other => panic!("{other:?}"),
        }
        // An unknown method: hld-style -32601 → 1101.
        match c.call("no.such", "{}").await {
            Message::Error { error, .. } => assert_eq!(error.code, 1101),
            other => panic!("{other:?}"),
        }
        // A timeout is 1103.
        match c.call("sleep", r#"{"ms":1000}"#).await {
            Message::Error { error, .. } => assert_eq!(error.code, 1103),
            other => panic!("{other:?}"),
        }
        // A text frame closes 1003.
        c.ws.send(WsMessage::Text("{}".into())).await.expect("send");
        assert_eq!(common::expect_close(&mut c.ws).await.0, 1003);
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    gw.shutdown().await;
    daemon.stop().await;
}

#[tokio::test]
async fn sideband_upstream_behind_a_jsonrpc_listener() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = switchyard::daemon::Daemon::start(&dir.path().join("d.sock"), Default::default())
        .await
        .expect("daemon");
    // The Sideband upstream: another gateway's Sideband listener.
    let inner = format!(
        "[listeners.sb]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\n\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n[[routes]]\nlistener = \"sb\"\nupstream = \"daemon\"\n",
        daemon.path().display()
    );
    let inner =
        switchyard::app::bind(switchyard::config::Config::from_toml(&inner).expect("config"))
            .await
            .expect("bind");
    let sb_url = inner.ws_url("sb").expect("url");
    let inner = inner.spawn();
    let outer = format!(
        "[listeners.j]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\n\n\
         [upstreams.sb]\ndialect = \"sideband\"\nurl = \"{sb_url}\"\n\n[[routes]]\nlistener = \"j\"\nupstream = \"sb\"\n"
    );
    let outer =
        switchyard::app::bind(switchyard::config::Config::from_toml(&outer).expect("config"))
            .await
            .expect("bind");
    let url = outer.ws_url("j").expect("url");
    let outer = outer.spawn();
    common::wait_connected(&outer, "sb").await;
    let mut ws = common::connect(&url).await;
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":{"x":[1,2.5]},"id":"1"}"#,
    )
    .await;
    assert_eq!(
        common::recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","result":{"x":[1,2.5]},"id":"1"}"#
    );
    // Sideband 2000 → -32000, and 1101 → -32601, as the tables say.
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"fail","params":{"code":-32000,"message":"boom"},"id":2}"#,
    )
    .await;
    let v = common::json(&common::recv(&mut ws).await);
    assert_eq!(v["error"]["code"], -32000, "{v}");
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"no.such","params":{},"id":3}"#,
    )
    .await;
    assert_eq!(
        common::json(&common::recv(&mut ws).await)["error"]["code"],
        -32601
    );
    outer.shutdown().await;
    inner.shutdown().await;
    daemon.stop().await;
}

/// What a call gave, decoded: a result as a JSON value (CBOR transcoded),
/// a void result, or an error with its data as JSON.
#[derive(Debug, Clone, PartialEq)]
enum Got {
    Value(serde_json::Value),
    Void,
    Error(i64, String, serde_json::Value),
}

fn payload_json(p: &Payload) -> serde_json::Value {
    match p {
        Payload::Json(raw) => common::json(raw.get()),
        Payload::Cbor(bytes) => common::json(
            switchyard::dialect::sideband::cbor_to_json(bytes)
                .expect("transcode")
                .get(),
        ),
    }
}

/// The payload as JSON text exactly as decoded (CBOR transcoded).
fn payload_text(p: &Payload) -> String {
    match p {
        Payload::Json(raw) => raw.get().to_owned(),
        Payload::Cbor(bytes) => switchyard::dialect::sideband::cbor_to_json(bytes)
            .expect("transcode")
            .get()
            .to_owned(),
    }
}

fn got(msg: &Message) -> Got {
    match msg {
        Message::Response {
            result: Outcome::Value(p),
            ..
        } => Got::Value(payload_json(p)),
        Message::Response {
            result: Outcome::Void,
            ..
        } => Got::Void,
        Message::Error { error, .. } => Got::Error(
            error.code,
            error.message.clone(),
            error
                .data
                .as_ref()
                .map_or(serde_json::Value::Null, payload_json),
        ),
        other => panic!("not a reply: {other:?}"),
    }
}

/// CBOR float64 NaN.
const CBOR_NAN: [u8; 9] = [0xfb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0];

/// What the fake upstream observed.
#[derive(Debug, Default)]
struct FakeLog {
    /// The encoding negotiated on each connection.
    encodings: Vec<Encoding>,
    /// Requests whose cid was not their frame id (sideband.md §10).
    cid_not_frame_id: Vec<String>,
    /// Replies the gateway sent to the fake's own requests.
    replies: Vec<Message>,
}

type Fake = Arc<Mutex<FakeLog>>;

/// A minimal Sideband server standing in for a real Sideband upstream,
/// built on the crate's frame codec: it advertises `encoding/cbor` and
/// answers every `r` with its params as result: *void* when `p` is absent,
/// `null` when `p` is null. Methods ending in `nan` get a CBOR NaN result;
/// `errframe`, an ErrorFrame about the request frame; `hangup`, no answer
/// and a dropped connection; `ask`, first a request of the fake's own
/// (`client.ask`), whose reply it records.
async fn fake_sideband_upstream() -> (String, Fake) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("ws://{}/sb", listener.local_addr().expect("addr"));
    let log = Fake::default();
    let seen = log.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(serve_fake(tcp, seen.clone()));
        }
    });
    (url, log)
}

async fn serve_fake(tcp: tokio::net::TcpStream, log: Fake) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
        return;
    };
    let local = Handshake::local(random_peer_id(), true);
    let hello = Frame::control(random_id(), Control::Handshake(local.to_bytes()));
    if ws
        .send(WsMessage::Binary(encode(&hello).into()))
        .await
        .is_err()
    {
        return;
    }
    let mut encoding = None;
    while let Some(Ok(msg)) = ws.next().await {
        let WsMessage::Binary(bytes) = msg else {
            continue;
        };
        let Ok(frame) = decode(&bytes) else {
            continue;
        };
        let mut out = Vec::new();
        match frame.body {
            Body::Control(Control::Handshake(data)) => {
                let remote = Handshake::parse(&data).expect("gateway handshake");
                let enc = Encoding::negotiate(&local, &remote);
                log.lock().expect("lock").encodings.push(enc);
                encoding = Some(enc);
            }
            Body::Message {
                subject: Subject::Rpc,
                data,
            } => {
                let Some(enc) = encoding else { continue };
                let Ok(msg) = decode_envelope(&data, Encoding::detect(&data)) else {
                    continue;
                };
                let Message::Request { id, method, params } = msg else {
                    log.lock().expect("lock").replies.push(msg);
                    continue;
                };
                if id != WireId::Cid(frame.id) {
                    log.lock()
                        .expect("lock")
                        .cid_not_frame_id
                        .push(format!("{id:?}"));
                }
                if method.ends_with("hangup") {
                    return;
                }
                if method.ends_with("ask") {
                    let cid = random_id();
                    let ask = Message::Request {
                        id: WireId::Cid(cid),
                        method: "client.ask".into(),
                        params: None,
                    };
                    let data = encode_envelope(&ask, enc).expect("fake request");
                    out.push(Frame::message(cid, Subject::Rpc, data));
                }
                out.push(if method.ends_with("errframe") {
                    // An ErrorFrame about the request frame itself.
                    Frame::error(frame.id, 1002, "Invalid subject namespace")
                } else {
                    let result = if method.ends_with("nan") {
                        Outcome::Value(Payload::Cbor(CBOR_NAN.to_vec().into()))
                    } else {
                        params.map_or(Outcome::Void, Outcome::Value)
                    };
                    let reply = encode_envelope(&Message::Response { id, result }, enc)
                        .expect("fake reply");
                    Frame::message(random_id(), Subject::Rpc, reply)
                });
            }
            _ => {}
        }
        for frame in out {
            if ws
                .send(WsMessage::Binary(encode(&frame).into()))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// Rich params: floats, integers at and beyond the u64 range, nesting,
/// unicode (escaped and raw), null, empty containers.
const RICH: &str = r#"{"f":[2.5,-0.0,1e300,1.0,0.1,-1.5e-7],"big":12345678901234567890,"huge":18446744073709551616,"neg":-9223372036854775808,"nested":{"a":{"b":[{"c":null},[[]]]}},"s":"héllo ☃ \u0000 \ud83d\ude00 \"q\"","t":true,"null":null,"empty":{}}"#;

/// One request through a Sideband-JSON and a Sideband-CBOR client of the
/// same gateway gives identical results after decoding, through a JSON
/// upstream (the NDJSON daemon) and a CBOR upstream (a minimal Sideband
/// server, which can also answer *void*). What JSON cannot carry is refused
/// with an error, never changed silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_cbor_clients_get_identical_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = switchyard::daemon::Daemon::start(&dir.path().join("d.sock"), Default::default())
        .await
        .expect("daemon");
    let (fake_url, fake) = fake_sideband_upstream().await;
    let toml = format!(
        "[listeners.sb]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\n\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [upstreams.fake]\ndialect = \"sideband\"\nurl = \"{fake_url}\"\n\n\
         [[routes]]\nlistener = \"sb\"\nupstream = \"daemon\"\n\n\
         [[routes]]\nlistener = \"sb\"\nupstream = \"fake\"\nmethod_prefix = \"fake.\"\n",
        daemon.path().display()
    );
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("sb").expect("url");
    let gw = bound.spawn();
    common::wait_connected(&gw, "daemon").await;
    common::wait_connected(&gw, "fake").await;
    // The gateway counts the link as connected once the handshakes are
    // exchanged; the fake records the gateway's a moment later.
    let recorded = || !fake.lock().expect("lock").encodings.is_empty();
    assert!(common::eventually(Duration::from_secs(20), recorded).await);
    {
        let log = fake.lock().expect("lock");
        assert!(
            log.encodings.iter().all(|e| *e == Encoding::Cbor),
            "the gateway and a CBOR-capable upstream agree on CBOR: {log:?}"
        );
    }
    let mut json_c = SbClient::connect(&url, false).await;
    let mut cbor_c = SbClient::connect(&url, true).await;
    assert_eq!(
        (json_c.encoding, cbor_c.encoding),
        (Encoding::Json, Encoding::Cbor)
    );

    let rich: serde_json::Value = common::json(RICH);
    let cases: &[(&str, Option<&str>, Got)] = &[
        ("echo", Some(RICH), Got::Value(rich.clone())),
        ("fake.echo", Some(RICH), Got::Value(rich.clone())),
        (
            "subtract",
            Some("[12345678901234567890,1]"),
            Got::Value(json!(12345678901234567889u64)),
        ),
        ("subtract", Some("[0.5,2]"), Got::Value(json!(-1.5))),
        (
            "echo",
            Some(r#"["x",null,{"y":[]}]"#),
            Got::Value(json!(["x", null, {"y": []}])),
        ),
        // null and void stay apart.
        (
            "fake.echo",
            Some("null"),
            Got::Value(serde_json::Value::Null),
        ),
        ("fake.void", None, Got::Void),
        (
            "fail",
            Some(r#"{"code":-32000,"message":"bööm","data":{"n":[1.5,12345678901234567890]}}"#),
            Got::Error(
                2000,
                "bööm".into(),
                json!({"n": [1.5, 12345678901234567890u64]}),
            ),
        ),
    ];
    for (method, params, want) in cases {
        let params = params.map(|p| Payload::json(p).expect("json"));
        let from_json = json_c.call_with(method, params.clone()).await;
        let from_cbor = cbor_c.call_with(method, params).await;
        let (a, b) = (got(&from_json), got(&from_cbor));
        assert_eq!(a, b, "{method}: JSON and CBOR clients disagree");
        assert_eq!(&a, want, "{method}");
        // Integers beyond u64 are exact in both (JSON as sent, CBOR as a
        // bignum), not rounded through a float.
        if let (
            Message::Response {
                result: Outcome::Value(pa),
                ..
            },
            Message::Response {
                result: Outcome::Value(pb),
                ..
            },
        ) = (&from_json, &from_cbor)
        {
            for text in [payload_text(pa), payload_text(pb)] {
                if text.contains("huge") {
                    assert!(text.contains(r#""huge":18446744073709551616"#), "{text}");
                    assert!(text.contains(r#""big":12345678901234567890"#), "{text}");
                }
            }
        }
    }

    // A CBOR byte string has a JSON form: base64url without padding.
    let bytes_param = Payload::Cbor(vec![0xa1, 0x61, 0x62, 0x43, 0x00, 0xff, 0xfe].into());
    let r = cbor_c.call_with("echo", Some(bytes_param)).await;
    assert_eq!(got(&r), Got::Value(json!({"b": "AP_-"})));

    // CBOR that JSON cannot carry, sent to the JSON upstream: an
    // invalid_params error (Sideband 2000, data.kind), never a change.
    for (what, raw) in [
        (
            "NaN",
            vec![0xa1, 0x61, 0x78, 0xfb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0],
        ),
        ("Infinity", vec![0xa1, 0x61, 0x78, 0xf9, 0x7c, 0x00]),
        ("an integer map key", vec![0xa1, 0x01, 0x61, 0x61]),
        ("a nested non-text key", vec![0x81, 0xa1, 0xf5, 0x00]),
        ("an unknown tag", vec![0xd9, 0x01, 0x00, 0x00]),
    ] {
        let r = cbor_c
            .call_with("echo", Some(Payload::Cbor(raw.into())))
            .await;
        match got(&r) {
            Got::Error(code, _, data) => {
                assert_eq!(code, 2000, "{what}: {r:?}");
                assert_eq!(data["kind"], "invalid_params", "{what}: {r:?}");
                assert!(
                    data["detail"].as_str().is_some_and(|d| !d.is_empty()),
                    "{what}: {r:?}"
                );
            }
            other => panic!("{what}: expected invalid_params, got {other:?}"),
        }
    }
    // The same NaN to a CBOR upstream passes through untouched.
    let nan_param = vec![0xa1, 0x61, 0x78, 0xfb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0];
    match cbor_c
        .call_with("fake.echo", Some(Payload::Cbor(nan_param.clone().into())))
        .await
    {
        Message::Response {
            result: Outcome::Value(Payload::Cbor(bytes)),
            ..
        } => assert_eq!(bytes, nan_param),
        other => panic!("NaN through a CBOR path: {other:?}"),
    }
    // A result JSON cannot carry: the CBOR client gets it, the JSON client
    // an `internal` error (sideband.md §7).
    match cbor_c.call_with("fake.nan", None).await {
        Message::Response {
            result: Outcome::Value(Payload::Cbor(bytes)),
            ..
        } => assert_eq!(bytes.as_ref(), CBOR_NAN),
        other => panic!("NaN result to a CBOR client: {other:?}"),
    }
    match got(&json_c.call_with("fake.nan", None).await) {
        Got::Error(2000, _, data) => assert_eq!(data["kind"], "internal", "{data}"),
        other => panic!("NaN result to a JSON client: {other:?}"),
    }
    // Both connections are still usable.
    for c in [&mut json_c, &mut cbor_c] {
        assert_eq!(
            result_json(&c.call("echo", r#"{"ok":1}"#).await),
            json!({"ok": 1})
        );
    }
    gw.shutdown().await;
    daemon.stop().await;
}

/// A raw SBP connection for session-rule tests: frames in, frames (or the
/// close) out.
struct Raw {
    ws: common::Ws,
}

/// What arrived next on a raw connection.
#[derive(Debug, PartialEq)]
enum Next {
    Frame(Frame<'static>),
    Closed(u16, String),
    Silence,
}

impl Raw {
    /// Connects; with `hello`, sends a client handshake first. Always reads
    /// the gateway's handshake, which it sends at once.
    async fn open(url: &str, hello: Option<&[u8]>) -> Raw {
        let mut ws = common::connect(url).await;
        if let Some(data) = hello {
            let frame = Frame::control(random_id(), Control::Handshake(data.to_vec()));
            ws.send(WsMessage::Binary(encode(&frame).into()))
                .await
                .expect("send");
        }
        let mut raw = Raw { ws };
        match raw.next().await {
            Next::Frame(Frame {
                body: Body::Control(Control::Handshake(_)),
                ..
            }) => raw,
            other => panic!("expected the gateway handshake first, got {other:?}"),
        }
    }

    async fn handshaken(url: &str) -> Raw {
        let hello = Handshake::local(random_peer_id(), false).to_bytes();
        Raw::open(url, Some(&hello)).await
    }

    async fn send(&mut self, bytes: Vec<u8>) {
        self.ws
            .send(WsMessage::Binary(bytes.into()))
            .await
            .expect("send");
    }

    async fn next(&mut self) -> Next {
        self.next_within(common::STEP).await
    }

    async fn next_within(&mut self, wait: Duration) -> Next {
        loop {
            let Ok(msg) = tokio::time::timeout(wait, self.ws.next()).await else {
                return Next::Silence;
            };
            match msg {
                Some(Ok(WsMessage::Binary(b))) => {
                    // Legacy subjects come back only to a client that sent them.
                    let frame = decode_with(&b, SubjectRules::AcceptLegacy);
                    return Next::Frame(frame.expect("valid frame from the gateway").into_owned());
                }
                Some(Ok(WsMessage::Close(f))) => {
                    let (code, reason) = f.map_or((1005, String::new()), |f| {
                        (u16::from(f.code), f.reason.to_string())
                    });
                    return Next::Closed(code, reason);
                }
                Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => continue,
                Some(Ok(other)) => panic!("unexpected {other:?}"),
                Some(Err(_)) | None => return Next::Closed(1006, String::new()),
            }
        }
    }

    /// An `echo` call on a JSON link; returns the reply envelope.
    async fn echo(&mut self) -> Message {
        let cid = random_id();
        let req = Message::Request {
            id: WireId::Cid(cid),
            method: "echo".into(),
            params: Some(Payload::json(r#"{"ok":true}"#).expect("json")),
        };
        let data = encode_envelope(&req, Encoding::Json).expect("envelope");
        self.send(encode(&Frame::message(cid, Subject::Rpc, data)))
            .await;
        match self.next().await {
            Next::Frame(Frame {
                body: Body::Message { data, .. },
                ..
            }) => decode_envelope(&data, Encoding::Json).expect("envelope"),
            other => panic!("expected the echo reply, got {other:?}"),
        }
    }
}

fn error_frame(next: &Next) -> (FrameIdOf, u16, &str) {
    match next {
        Next::Frame(Frame {
            id,
            body: Body::Error { code, message, .. },
            ..
        }) => (*id, *code, message.as_str()),
        other => panic!("expected an ErrorFrame, got {other:?}"),
    }
}

type FrameIdOf = [u8; 16];

/// A frame header with `kind`, `flags` and `id`, then `payload`.
fn raw_frame(kind: u8, flags: u8, id: [u8; 16], payload: &[u8]) -> Vec<u8> {
    let mut out = vec![kind, flags];
    out.extend_from_slice(&id);
    out.extend_from_slice(payload);
    out
}

/// A Message frame with a raw subject.
fn raw_message(id: [u8; 16], subject: &[u8], data: &[u8]) -> Vec<u8> {
    let mut payload = u32::try_from(subject.len())
        .expect("len")
        .to_le_bytes()
        .to_vec();
    payload.extend_from_slice(subject);
    payload.extend_from_slice(data);
    raw_frame(1, 0, id, &payload)
}

/// sideband.md §3 and §10, server side: negotiation failures, inbound
/// frame rules and what stays usable afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sbp_session_rules_on_the_listener() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = switchyard::daemon::Daemon::start(&dir.path().join("d.sock"), Default::default())
        .await
        .expect("daemon");
    let toml = format!(
        "[listeners.sb]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\n\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n[[routes]]\nlistener = \"sb\"\nupstream = \"daemon\"\n",
        daemon.path().display()
    );
    let bound =
        switchyard::app::bind(switchyard::config::Config::from_toml(&toml).expect("config"))
            .await
            .expect("bind");
    let url = bound.ws_url("sb").expect("url");
    let gw = bound.spawn();
    common::wait_connected(&gw, "daemon").await;
    let negotiation_failed = Next::Closed(1000, "negotiation_failed".into());

    // Negotiation failures (§10): ErrorFrame, then close 1000
    // `negotiation_failed`, the code reference clients do not retry.
    for (what, hello, code, message) in [
        (
            "wrong protocol",
            br#"{"protocol":"other","version":"1","peerId":"p"}"#.as_slice(),
            1001,
            "Unsupported protocol: other",
        ),
        (
            "wrong version",
            br#"{"protocol":"sideband","version":"2","peerId":"p"}"#.as_slice(),
            1001,
            "Unsupported protocol version: 2",
        ),
        ("not JSON", b"{nope".as_slice(), 1002, ""),
        (
            "no peerId",
            br#"{"protocol":"sideband","version":"1"}"#.as_slice(),
            1002,
            "",
        ),
    ] {
        let mut c = Raw::open(&url, Some(hello)).await;
        let next = c.next().await;
        let (_, got_code, got_message) = error_frame(&next);
        assert_eq!(got_code, code, "{what}: {next:?}");
        if message.is_empty() {
            assert!(
                got_message.starts_with("Failed to decode handshake"),
                "{what}: {next:?}"
            );
        } else {
            assert_eq!(got_message, message, "{what}");
        }
        assert_eq!(c.next().await, negotiation_failed, "{what}");
    }
    // A Handshake frame without data is an undecodable handshake: ErrorFrame
    // 1002 with the reference message, then the negotiation_failed close.
    let mut c = Raw::open(&url, None).await;
    let id = random_id();
    c.send(raw_frame(0, 0, id, &[0])).await;
    let next = c.next().await;
    assert_eq!(
        error_frame(&next),
        (id, 1002, "Invalid handshake frame: data is required"),
        "{next:?}"
    );
    assert_eq!(c.next().await, negotiation_failed, "empty handshake");
    // A first frame that is not a handshake: ErrorFrame 1000 about it.
    let mut c = Raw::open(&url, None).await;
    let id = random_id();
    c.send(encode(&Frame::control(id, Control::Ping))).await;
    let next = c.next().await;
    assert_eq!(error_frame(&next).0, id, "{next:?}");
    assert_eq!(error_frame(&next).1, 1000, "{next:?}");
    assert_eq!(c.next().await, negotiation_failed, "ping first");
    // A malformed first frame ends negotiation the same way.
    let mut c = Raw::open(&url, None).await;
    c.send(raw_message(random_id(), b"RPC", b"{}")).await;
    let next = c.next().await;
    assert!(
        matches!(
            next,
            Next::Frame(Frame {
                body: Body::Error { .. },
                ..
            })
        ),
        "{next:?}"
    );
    assert_eq!(c.next().await, negotiation_failed, "malformed first frame");

    // After the handshake.
    let mut c = Raw::handshaken(&url).await;
    // Ping → Pong, with or without a timestamp.
    c.send(encode(&Frame::control(random_id(), Control::Ping)))
        .await;
    assert!(matches!(
        c.next().await,
        Next::Frame(Frame {
            body: Body::Control(Control::Pong),
            ..
        })
    ));
    let mut ping_ts = raw_frame(0, 1, random_id(), &1_700_000_000_000i64.to_le_bytes());
    ping_ts.push(1);
    c.send(ping_ts).await;
    assert!(matches!(
        c.next().await,
        Next::Frame(Frame {
            body: Body::Control(Control::Pong),
            ..
        })
    ));
    // Acks are validated and ignored.
    c.send(raw_frame(2, 0, random_id(), &[7; 16])).await;
    assert_eq!(
        c.next_within(Duration::from_millis(200)).await,
        Next::Silence
    );
    // Non-fatal payload errors: ErrorFrame 1002 with the frame's id.
    for (what, frame, message) in [
        (
            "unknown control op",
            raw_frame(0, 0, [1; 16], &[9]),
            "Unknown control op",
        ),
        (
            "control without op",
            raw_frame(0, 0, [2; 16], &[]),
            "Invalid control frame: no operation",
        ),
        (
            "ping with data",
            raw_frame(0, 0, [3; 16], &[1, 0]),
            "Invalid ping/pong frame: must not have payload",
        ),
        (
            "message without subject",
            raw_frame(1, 0, [4; 16], &[3, 0]),
            "Invalid message frame: no subject",
        ),
        (
            "incomplete subject",
            raw_frame(1, 0, [5; 16], &[9, 0, 0, 0, b'r']),
            "Invalid message frame: incomplete subject",
        ),
        (
            "ack too short",
            raw_frame(2, 0, [6; 16], &[1; 15]),
            "Invalid ack frame: no frame ID",
        ),
        (
            "ack trailing data",
            raw_frame(2, 0, [7; 16], &[1; 17]),
            "Invalid ack frame: unexpected trailing data",
        ),
        (
            "subject RPC",
            raw_message([8; 16], b"RPC", b"{}"),
            "Invalid subject namespace",
        ),
        (
            "subject rpc/echo",
            raw_message([9; 16], b"rpc/echo", b"{}"),
            "Invalid subject namespace",
        ),
        (
            "subject app",
            raw_message([10; 16], b"app", b"{}"),
            "Invalid subject namespace",
        ),
        (
            "empty subject",
            raw_message([11; 16], b"", b"{}"),
            "Invalid subject namespace",
        ),
        (
            "subject not UTF-8",
            raw_message([12; 16], b"app/\xff\xfe", b"{}"),
            "Invalid subject namespace",
        ),
        (
            "subject of 257 bytes",
            raw_message(
                [13; 16],
                format!("app/{}", "x".repeat(253)).as_bytes(),
                b"{}",
            ),
            "Invalid subject namespace",
        ),
    ] {
        let id = <[u8; 16]>::try_from(&frame[2..18]).expect("id");
        c.send(frame).await;
        let next = c.next().await;
        assert_eq!(error_frame(&next), (id, 1002, message), "{what}: {next:?}");
    }
    // A 256-byte app/ subject is valid: dropped silently.
    c.send(raw_message(
        random_id(),
        format!("app/{}", "x".repeat(252)).as_bytes(),
        b"x",
    ))
    .await;
    // `stream`: 1003, non-fatal.
    let id = random_id();
    c.send(raw_message(id, b"stream", b"{}")).await;
    let next = c.next().await;
    assert_eq!(
        error_frame(&next),
        (id, 1003, "Unsupported feature: stream"),
        "{next:?}"
    );
    // An invalid envelope on `rpc` with a readable cid: E 1100 to that cid.
    let cid = [0x20u8; 16];
    let bad = format!(r#"{{"t":"r","cid":"{}"}}"#, "20".repeat(16));
    c.send(raw_message(random_id(), b"rpc", bad.as_bytes()))
        .await;
    match c.next().await {
        Next::Frame(Frame {
            id,
            body:
                Body::Message {
                    subject: Subject::Rpc,
                    data,
                },
            ..
        }) => {
            assert_ne!(id, cid, "a fresh frame id");
            match decode_envelope(&data, Encoding::Json).expect("envelope") {
                Message::Error { id, error } => {
                    assert_eq!(id, Some(WireId::Cid(cid)));
                    assert_eq!(error.code, 1100, "{error:?}");
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("expected E 1100, got {other:?}"),
    }
    // Without a readable cid: ErrorFrame 1002 `Malformed RPC envelope`.
    let id = random_id();
    c.send(raw_message(id, b"rpc", b"not json")).await;
    let next = c.next().await;
    assert_eq!(
        error_frame(&next),
        (id, 1002, "Malformed RPC envelope"),
        "{next:?}"
    );
    // Invalid envelopes on `event` and envelope/subject mismatches: dropped.
    c.send(raw_message(random_id(), b"event", b"not json"))
        .await;
    let r_on_event = format!(
        r#"{{"t":"r","m":"echo","cid":"{}","p":{{}}}}"#,
        "31".repeat(16)
    );
    c.send(raw_message(random_id(), b"event", r_on_event.as_bytes()))
        .await;
    c.send(raw_message(
        random_id(),
        b"rpc",
        br#"{"t":"N","e":"notify_hello"}"#,
    ))
    .await;
    assert_eq!(
        c.next_within(Duration::from_millis(300)).await,
        Next::Silence
    );
    // A Message frame id seen before is a duplicate: dropped, not answered
    // twice.
    let dup = random_id();
    let req = format!(
        r#"{{"t":"r","m":"echo","cid":"{}","p":[1]}}"#,
        common::clients::hex(&dup)
    );
    let frame = raw_message(dup, b"rpc", req.as_bytes());
    c.send(frame.clone()).await;
    c.send(frame).await;
    assert!(matches!(
        c.next().await,
        Next::Frame(Frame {
            body: Body::Message { .. },
            ..
        })
    ));
    assert_eq!(
        c.next_within(Duration::from_millis(300)).await,
        Next::Silence,
        "duplicate answered"
    );
    // A Message with a timestamp is fine; ts is informational.
    let ts_req = format!(
        r#"{{"t":"r","m":"echo","cid":"{}","p":[2]}}"#,
        "41".repeat(16)
    );
    let mut payload = 1_700_000_000_000i64.to_le_bytes().to_vec();
    payload.extend_from_slice(&3u32.to_le_bytes());
    payload.extend_from_slice(b"rpc");
    payload.extend_from_slice(ts_req.as_bytes());
    c.send(raw_frame(1, 1, random_id(), &payload)).await;
    assert!(matches!(
        c.next().await,
        Next::Frame(Frame {
            body: Body::Message { .. },
            ..
        })
    ));
    // ErrorFrames from the client, well-formed or not, are never answered
    // with an ErrorFrame (§10), so two endpoints cannot loop.
    c.send(encode(&Frame::error(
        random_id(),
        1002,
        "Invalid subject namespace",
    )))
    .await;
    c.send(raw_frame(3, 0, random_id(), &[0xea, 0x03])).await;
    c.send(raw_frame(
        3,
        0,
        random_id(),
        &[0xea, 0x03, 9, 0, 0, 0, b'x'],
    ))
    .await;
    c.send(raw_frame(
        3,
        0,
        random_id(),
        &[0xea, 0x03, 1, 0, 0, 0, 0xff],
    ))
    .await;
    assert_eq!(
        c.next_within(Duration::from_millis(300)).await,
        Next::Silence,
        "an ErrorFrame was answered"
    );
    // Still usable after all of that.
    assert!(matches!(c.echo().await, Message::Response { .. }));
    // A second handshake: ErrorFrame 1000, then close 1002.
    let id = random_id();
    let hello = Handshake::local(random_peer_id(), false).to_bytes();
    c.send(encode(&Frame::control(id, Control::Handshake(hello))))
        .await;
    let next = c.next().await;
    assert_eq!(
        (error_frame(&next).0, error_frame(&next).1),
        (id, 1000),
        "{next:?}"
    );
    assert!(matches!(c.next().await, Next::Closed(1002, _)));

    // Fatal header errors: ErrorFrame 1002 (with the frame id when the
    // header has one), then close 1002.
    for (what, frame, message, with_id) in [
        (
            "too short",
            vec![1, 0, 1, 2],
            "Invalid frame: too short",
            false,
        ),
        (
            "reserved flags",
            raw_frame(0, 2, [5; 16], &[1]),
            "Invalid frame: reserved flag bits must be zero",
            true,
        ),
        (
            "incomplete timestamp",
            raw_frame(0, 1, [6; 16], &[1]),
            "Invalid frame: incomplete timestamp",
            true,
        ),
        (
            "unknown kind",
            raw_frame(4, 0, [7; 16], &[1]),
            "Unknown frame kind",
            true,
        ),
    ] {
        let mut c = Raw::handshaken(&url).await;
        let id = frame
            .get(2..18)
            .map(|s| <[u8; 16]>::try_from(s).expect("id"));
        c.send(frame).await;
        let next = c.next().await;
        let (got_id, code, got) = error_frame(&next);
        assert_eq!((code, got), (1002, message), "{what}");
        if with_id {
            assert_eq!(Some(got_id), id, "{what}");
        }
        assert!(matches!(c.next().await, Next::Closed(1002, _)), "{what}");
    }
    // A fatal header error on an ErrorFrame is not answered, only closed.
    let mut c = Raw::handshaken(&url).await;
    c.send(raw_frame(3, 2, [8; 16], &[0xea, 0x03, 0, 0, 0, 0]))
        .await;
    assert!(
        matches!(c.next().await, Next::Closed(1002, _)),
        "fatal ErrorFrame"
    );
    // Control Close: the gateway stops and closes 1000. (§10 also wants
    // the peer's reason echoed; the gateway sends "closed by peer", because
    // `Outgoing::Close` only carries static reasons. Reported, not fixed.)
    let mut c = Raw::handshaken(&url).await;
    c.send(encode(&Frame::control(
        random_id(),
        Control::Close("bye".into()),
    )))
    .await;
    assert!(
        matches!(c.next().await, Next::Closed(1000, _)),
        "Control Close"
    );
    // Over the 1 MiB limit: close 1009.
    let mut c = Raw::handshaken(&url).await;
    c.send(raw_message(random_id(), b"app/big", &vec![0; 1_048_577]))
        .await;
    assert_eq!(
        c.next().await,
        Next::Closed(1009, "Message too large".into())
    );

    gw.shutdown().await;
    daemon.stop().await;
}

/// switchyard as a Sideband client (sideband.md §10, error-codes.md §4):
/// each request's cid is its frame id; an upstream ErrorFrame whose id is a
/// pending request's frame settles that call at once as `internal`, for
/// every client dialect, and other calls on the link go on; an
/// upstream-originated `r` in shared mode gets `E` 1101
/// `Method not found: <m>`; a link lost mid-call fails it `unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sideband_upstream_rules() {
    let (fake_url, fake) = fake_sideband_upstream().await;
    let toml = format!(
        "[listeners.j]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\nrequest_timeout_ms = 5000\n\n\
         [listeners.sb]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\nrequest_timeout_ms = 5000\n\n\
         [upstreams.fake]\ndialect = \"sideband\"\nurl = \"{fake_url}\"\n\n\
         [[routes]]\nlistener = \"j\"\nupstream = \"fake\"\n\n[[routes]]\nlistener = \"sb\"\nupstream = \"fake\"\n"
    );
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let (j_url, sb_url) = (
        bound.ws_url("j").expect("url"),
        bound.ws_url("sb").expect("url"),
    );
    let gw = bound.spawn();
    common::wait_connected(&gw, "fake").await;

    let mut ws = common::connect(&j_url).await;
    let started = std::time::Instant::now();
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"errframe","params":{},"id":1}"#,
    )
    .await;
    let v = common::json(&common::recv(&mut ws).await);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "settled, not timed out"
    );
    assert_eq!(v["id"], 1, "{v}");
    assert_eq!(v["error"]["code"], -32603, "internal: {v}");
    // error-codes.md §4 wants data {"origin":{"dialect":"sideband","code":
    // 1002,"message":"Invalid subject namespace"}}; the gateway sends a
    // detail string naming both (reported). Either way both are carried.
    let data = v["error"]["data"].to_string();
    assert!(
        data.contains("1002") && data.contains("Invalid subject namespace"),
        "{v}"
    );
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":{"ok":1},"id":2}"#,
    )
    .await;
    assert_eq!(
        common::recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","result":{"ok":1},"id":2}"#
    );

    for cbor in [false, true] {
        let mut c = SbClient::connect(&sb_url, cbor).await;
        match got(&c.call("errframe", "{}").await) {
            Got::Error(2000, _, data) => assert_eq!(data["kind"], "internal", "{data}"),
            other => panic!("cbor={cbor}: {other:?}"),
        }
        assert_eq!(result_json(&c.call("echo", "[1]").await), json!([1]));
    }

    // The upstream asks something in shared mode: answered 1101.
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"ask","params":{},"id":3}"#,
    )
    .await;
    assert_eq!(
        common::recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","result":{},"id":3}"#
    );
    let answered = common::eventually(Duration::from_secs(20), || {
        !fake.lock().expect("lock").replies.is_empty()
    })
    .await;
    assert!(answered, "the upstream's request was not answered");
    match &fake.lock().expect("lock").replies[..] {
        [Message::Error { error, .. }] => {
            assert_eq!(
                (error.code, error.message.as_str()),
                (1101, "Method not found: client.ask")
            );
        }
        other => panic!("{other:?}"),
    }
    // The link drops mid-call: unavailable, at once.
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"hangup","params":{},"id":4}"#,
    )
    .await;
    let v = common::json(&common::recv(&mut ws).await);
    assert_eq!(
        (&v["id"], &v["error"]["code"]),
        (&json!(4), &json!(-32009)),
        "{v}"
    );

    assert_eq!(
        fake.lock().expect("lock").cid_not_frame_id,
        Vec::<String>::new(),
        "a request's cid is its frame id"
    );
    gw.shutdown().await;
}

/// Configurable subjects: legacy `rpc/<method>` accepted on input, `app/…`
/// rejected with ErrorFrame 1003; a Control Close is answered with close
/// 1000 and the peer's own reason.
#[tokio::test]
async fn legacy_and_app_subjects_by_config_and_close_reason_echo() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = switchyard::daemon::Daemon::start(&dir.path().join("d.sock"), Default::default())
        .await
        .expect("daemon");
    let toml = format!(
        "[listeners.sb]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\n\
         sideband_legacy_subjects = true\nsideband_app_subjects = \"reject\"\n\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n[[routes]]\nlistener = \"sb\"\nupstream = \"daemon\"\n",
        daemon.path().display()
    );
    let bound =
        switchyard::app::bind(switchyard::config::Config::from_toml(&toml).expect("config"))
            .await
            .expect("bind");
    let url = bound.ws_url("sb").expect("url");
    let gw = bound.spawn();
    common::wait_connected(&gw, "daemon").await;
    let mut raw = Raw::handshaken(&url).await;
    // A legacy subject: the envelope's method wins.
    let cid = random_id();
    let req = Message::Request {
        id: WireId::Cid(cid),
        method: "echo".into(),
        params: Some(Payload::json("[7]").expect("json")),
    };
    let data = encode_envelope(&req, Encoding::Json).expect("envelope");
    raw.send(raw_message(cid, b"rpc/echo", &data)).await;
    match raw.next().await {
        Next::Frame(Frame {
            body: Body::Message { data, .. },
            ..
        }) => {
            let reply = decode_envelope(&data, Encoding::Json).expect("envelope");
            assert_eq!(result_json(&reply), json!([7]));
        }
        other => panic!("expected the reply, got {other:?}"),
    }
    // An app subject is refused, non-fatally.
    let id = random_id();
    raw.send(raw_message(id, b"app/vendor", b"opaque")).await;
    let next = raw.next().await;
    let (about, code, message) = error_frame(&next);
    assert_eq!(
        (about, code, message),
        (id, 1003, "Unsupported feature: app subjects")
    );
    assert!(matches!(raw.echo().await, Message::Response { .. }));
    // A Control Close: close 1000 with the same reason.
    raw.send(encode(&Frame::control(
        random_id(),
        Control::Close("bye now".into()),
    )))
    .await;
    assert_eq!(raw.next().await, Next::Closed(1000, "bye now".into()));
    gw.shutdown().await;
    daemon.stop().await;
}
