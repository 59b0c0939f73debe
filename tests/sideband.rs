//! Sideband through the gateway: a Sideband listener in front of the
//! reference NDJSON daemon (JSON and CBOR envelopes), and a Sideband
//! upstream (a second gateway's Sideband listener) behind a JSON-RPC
//! listener.

mod common;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use switchyard::dialect::sideband::{
    decode, decode_envelope, encode, encode_envelope, random_id, Body, Control, Encoding, Frame,
    Handshake, Subject,
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

    async fn next_frame(ws: &mut common::Ws) -> Frame {
        loop {
            let msg = tokio::time::timeout(common::STEP, ws.next())
                .await
                .expect("frame in time")
                .expect("open")
                .expect("read");
            match msg {
                WsMessage::Binary(b) => return decode(&b).expect("valid frame"),
                WsMessage::Ping(_) | WsMessage::Pong(_) => continue,
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    async fn call(&mut self, method: &str, params: &str) -> Message {
        let cid: [u8; 16] = rand::random();
        let req = Message::Request {
            id: WireId::Cid(cid),
            method: method.into(),
            params: Some(Payload::json(params).expect("json")),
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
