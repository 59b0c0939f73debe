//! Sideband listener replies (sideband.md §5, §6, §10): a client's reply
//! with an unknown cid is dropped silently whatever its shape, and a
//! connection that sends legacy subjects is answered on them.

mod common;

use futures_util::{SinkExt, StreamExt};
use switchyard::dialect::sideband::{
    decode_envelope, decode_with, encode, encode_envelope, random_id, random_peer_id, Body,
    Control, Encoding, Frame, Handshake, Subject, SubjectRules,
};
use switchyard::envelope::{Message, Outcome, Payload, WireId};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// A handshaken raw Sideband connection.
struct Raw {
    ws: common::Ws,
}

impl Raw {
    /// Connects and exchanges handshakes; `cbor` advertises CBOR envelopes.
    async fn open(url: &str, cbor: bool) -> Raw {
        let mut raw = Raw {
            ws: common::connect(url).await,
        };
        let hello = Handshake::local(random_peer_id(), cbor).to_bytes();
        raw.send(encode(&Frame::control(
            random_id(),
            Control::Handshake(hello),
        )))
        .await;
        let first = raw.next().await;
        assert!(
            matches!(first.body, Body::Control(Control::Handshake(_))),
            "expected the gateway handshake first, got {first:?}"
        );
        raw
    }

    async fn send(&mut self, bytes: Vec<u8>) {
        self.ws
            .send(WsMessage::Binary(bytes.into()))
            .await
            .expect("send");
    }

    /// The next SBP frame (WebSocket pings skipped).
    async fn next(&mut self) -> Frame<'static> {
        loop {
            let msg = tokio::time::timeout(common::STEP, self.ws.next())
                .await
                .expect("a frame in time")
                .expect("open")
                .expect("read");
            match msg {
                WsMessage::Binary(b) => {
                    return decode_with(&b, SubjectRules::AcceptLegacy)
                        .expect("valid frame")
                        .into_owned()
                }
                WsMessage::Ping(_) | WsMessage::Pong(_) => continue,
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// Sends `msg` as an envelope in `enc` on `subject`, with frame id `id`.
    async fn send_envelope(&mut self, id: [u8; 16], subject: &[u8], msg: &Message, enc: Encoding) {
        let data = encode_envelope(msg, enc).expect("envelope");
        self.send(raw_message(id, subject, &data)).await;
    }

    /// The next Message frame: its subject and decoded envelope.
    async fn next_envelope(&mut self) -> (Subject, Message) {
        match self.next().await {
            Frame {
                body: Body::Message { subject, data },
                ..
            } => {
                let msg = decode_envelope(&data, Encoding::detect(&data)).expect("envelope");
                (subject, msg)
            }
            other => panic!("expected a Message frame, got {other:?}"),
        }
    }
}

/// A Message frame with a raw subject.
fn raw_message(id: [u8; 16], subject: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = vec![1, 0];
    out.extend_from_slice(&id);
    out.extend_from_slice(&u32::try_from(subject.len()).expect("len").to_le_bytes());
    out.extend_from_slice(subject);
    out.extend_from_slice(data);
    out
}

fn echo_request(cid: [u8; 16], params: &str) -> Message {
    Message::Request {
        id: WireId::Cid(cid),
        method: "echo".into(),
        params: Some(Payload::json(params).expect("json")),
    }
}

/// A gateway with one Sideband listener `sb` (plus `extra` listener lines)
/// in front of the reference daemon.
async fn gateway(
    extra: &str,
) -> (
    switchyard::app::Running,
    String,
    switchyard::daemon::Daemon,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = switchyard::daemon::Daemon::start(&dir.path().join("d.sock"), Default::default())
        .await
        .expect("daemon");
    let toml = format!(
        "[listeners.sb]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\n{extra}\n\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n[[routes]]\nlistener = \"sb\"\nupstream = \"daemon\"\n",
        daemon.path().display()
    );
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("sb").expect("url");
    let gw = bound.spawn();
    common::wait_connected(&gw, "daemon").await;
    (gw, url, daemon, dir)
}

/// `{"t":"R","cid":…}` without `result` is a valid void
/// reply; with a cid switchyard never issued it is dropped silently, as a
/// reply with a result is, in JSON and in CBOR. The next thing the client
/// hears is the answer to its following request, not an `E` 1100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_cid_replies_are_dropped_silently_void_or_not() {
    let (gw, url, daemon, _dir) = gateway("").await;
    for (cbor, enc) in [(false, Encoding::Json), (true, Encoding::Cbor)] {
        let mut c = Raw::open(&url, cbor).await;
        let replies = [
            Message::Response {
                id: WireId::Cid(random_id()),
                result: Outcome::Void,
            },
            Message::Response {
                id: WireId::Cid(random_id()),
                result: Outcome::Value(Payload::json("{\"x\":1}").expect("json")),
            },
            Message::Response {
                id: WireId::Cid(random_id()),
                result: Outcome::Value(Payload::json("null").expect("json")),
            },
        ];
        for reply in &replies {
            c.send_envelope(random_id(), b"rpc", reply, enc).await;
        }
        let cid = random_id();
        c.send_envelope(cid, b"rpc", &echo_request(cid, "[1]"), enc)
            .await;
        let (subject, msg) = c.next_envelope().await;
        assert_eq!(subject, Subject::Rpc);
        match msg {
            Message::Response { id, .. } => assert_eq!(id, WireId::Cid(cid), "cbor={cbor}"),
            other => panic!("cbor={cbor}: an unknown-cid reply was answered: {other:?}"),
        }
    }
    gw.shutdown().await;
    daemon.stop().await;
}

/// With `sideband_legacy_subjects = true`, a request on
/// `rpc/echo` is answered on `rpc/echo` (sideband.md §5, §10: responses on
/// the request's own subject), and so is an invalid envelope's `E` 1100;
/// a request on `rpc` is still answered on `rpc`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_subject_requests_are_answered_on_their_own_subject() {
    let (gw, url, daemon, _dir) = gateway("sideband_legacy_subjects = true").await;
    let mut c = Raw::open(&url, false).await;
    for subject in [b"rpc/echo".as_slice(), b"rpc/other.name"] {
        let cid = random_id();
        c.send_envelope(cid, subject, &echo_request(cid, "[7]"), Encoding::Json)
            .await;
        let (got, msg) = c.next_envelope().await;
        let want = std::str::from_utf8(subject).expect("utf8");
        assert_eq!(
            got,
            Subject::LegacyRpc(want["rpc/".len()..].to_owned()),
            "reply subject for {want}"
        );
        assert!(
            matches!(&msg, Message::Response { id, .. } if *id == WireId::Cid(cid)),
            "{msg:?}"
        );
    }
    // An invalid envelope with a readable cid: E 1100 on the same subject.
    let bad = format!(r#"{{"t":"r","cid":"{}"}}"#, "20".repeat(16));
    c.send(raw_message(random_id(), b"rpc/echo", bad.as_bytes()))
        .await;
    let (got, msg) = c.next_envelope().await;
    assert_eq!(got, Subject::LegacyRpc("echo".into()));
    assert!(
        matches!(&msg, Message::Error { error, .. } if error.code == 1100),
        "{msg:?}"
    );
    // The current subject is still answered on `rpc`.
    let cid = random_id();
    c.send_envelope(cid, b"rpc", &echo_request(cid, "[8]"), Encoding::Json)
        .await;
    let (got, msg) = c.next_envelope().await;
    assert_eq!(got, Subject::Rpc);
    assert!(matches!(msg, Message::Response { .. }), "{msg:?}");
    gw.shutdown().await;
    daemon.stop().await;
}
