//! Wire edges every listener must get right whatever the client does:
//! messages far over the size limit still get the dialect's answer and a
//! close frame (never a reset), and subprotocol offers are matched as each
//! dialect's note says.

mod common;

use common::clients::{Speak, TestClient};
use common::{json, Ws, STEP};
use futures_util::{SinkExt, StreamExt};
use switchyard::daemon::{Daemon, DaemonOptions};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};
use tokio_tungstenite::tungstenite::Message;

/// The default `max_message_bytes`.
const LIMIT: usize = 1024 * 1024;

/// Sizes over the limit: just over it, and far over (more than the WebSocket
/// library's headroom above it).
const OVERSIZE: [usize; 3] = [LIMIT + 1, LIMIT + LIMIT / 5, 2 * LIMIT];

struct Gw {
    _dir: tempfile::TempDir,
    daemon: Daemon,
    gateway: switchyard::app::Running,
    /// JSON-RPC WS, holon-rpc, Sideband URLs and the NDJSON socket path.
    jsonrpc: String,
    holon: String,
    sideband: String,
    ndjson: String,
}

/// One listener per dialect with default limits, routed to the reference
/// daemon.
async fn gateway() -> Gw {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&dir.path().join("d.sock"), DaemonOptions::default())
        .await
        .expect("daemon");
    let sock = dir.path().join("local.sock");
    let toml = format!(
        "[listeners.j]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\n\n\
         [listeners.h]\ndialect = \"holon-rpc\"\naddress = \"127.0.0.1:0\"\npath = \"/holon\"\n\n\
         [listeners.s]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\n\n\
         [listeners.n]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [upstreams.d]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [[routes]]\nlistener = \"j\"\nupstream = \"d\"\n[[routes]]\nlistener = \"h\"\nupstream = \"d\"\n\
         [[routes]]\nlistener = \"s\"\nupstream = \"d\"\n[[routes]]\nlistener = \"n\"\nupstream = \"d\"\n",
        sock.display(),
        daemon.path().display()
    );
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let (jsonrpc, holon, sideband) = (
        bound.ws_url("j").expect("url"),
        bound.ws_url("h").expect("url"),
        bound.ws_url("s").expect("url"),
    );
    let ndjson = bound.unix_path("n").expect("socket").display().to_string();
    let gateway = bound.spawn();
    common::wait_connected(&gateway, "d").await;
    Gw {
        _dir: dir,
        daemon,
        gateway,
        jsonrpc,
        holon,
        sideband,
        ndjson,
    }
}

/// What a client saw after sending an oversize message.
#[derive(Debug)]
struct Answer {
    texts: Vec<String>,
    /// The close frame's code and reason; `None` when the connection ended
    /// without one (1006, reset).
    close: Option<(u16, String)>,
}

/// Sends `msg` while reading what the gateway answers, until the close.
/// The gateway may close while the client is still writing: a failed write
/// is an expected outcome, and what arrived is still read.
async fn send_oversize(ws: Ws, msg: Message) -> Answer {
    let (mut sink, mut stream) = ws.split();
    let sending = tokio::spawn(async move {
        let _ = sink.send(msg).await;
        sink
    });
    let mut texts = Vec::new();
    let close = loop {
        let next = tokio::time::timeout(STEP, stream.next())
            .await
            .expect("the gateway answers an oversize message in time");
        match next {
            Some(Ok(Message::Text(t))) => texts.push(t.to_string()),
            Some(Ok(Message::Close(f))) => {
                break Some(f.map_or((1005, String::new()), |f| {
                    (u16::from(f.code), f.reason.to_string())
                }))
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => break None,
        }
    };
    // The write may still be blocked on a socket the gateway has left.
    sending.abort();
    Answer { texts, close }
}

/// A JSON-RPC text of exactly `size` bytes.
fn request_of(size: usize) -> String {
    let head = r#"{"jsonrpc":"2.0","method":"echo","params":[""#;
    let tail = r#""],"id":"big"}"#;
    format!("{head}{}{tail}", "x".repeat(size - head.len() - tail.len()))
}

#[tokio::test]
async fn far_oversize_messages_get_the_dialects_answer_and_close_1009() {
    let gw = gateway().await;
    for size in OVERSIZE {
        // JSON-RPC WS: the -32600 error, then 1009.
        let TestClient::Ws(_, ws) = TestClient::connect(Speak::JsonRpc, &gw.jsonrpc).await else {
            unreachable!()
        };
        let got = send_oversize(*ws, Message::Text(request_of(size).into())).await;
        assert_eq!(
            got.texts,
            [format!(
                r#"{{"jsonrpc":"2.0","error":{{"code":-32600,"message":"Invalid Request","data":"Message size exceeds maximum of {LIMIT} bytes"}},"id":null}}"#
            )],
            "jsonrpc-ws, {size} bytes"
        );
        assert_eq!(
            got.close,
            Some((1009, "message too large".to_owned())),
            "jsonrpc-ws, {size} bytes"
        );

        // holon-rpc: close 1009 only.
        let TestClient::Ws(_, ws) = TestClient::connect(Speak::Holon, &gw.holon).await else {
            unreachable!()
        };
        let got = send_oversize(*ws, Message::Text(request_of(size).into())).await;
        assert!(got.texts.is_empty(), "holon-rpc, {size} bytes: {got:?}");
        assert_eq!(
            got.close,
            Some((1009, "message too large".to_owned())),
            "holon-rpc, {size} bytes"
        );

        // Sideband (after the handshake): close 1009 only.
        let sb = common::clients::SbClient::connect(Speak::SidebandJson, &gw.sideband).await;
        let got = send_oversize(sb.ws, Message::Binary(vec![0u8; size].into())).await;
        assert!(got.texts.is_empty(), "sideband, {size} bytes: {got:?}");
        assert_eq!(
            got.close,
            Some((1009, "Message too large".to_owned())),
            "sideband, {size} bytes"
        );

        // NDJSON: the -32600 error line, then EOF.
        let stream = UnixStream::connect(&gw.ndjson).await.expect("connect");
        let (read, mut write) = stream.into_split();
        let line = format!("{}\n", request_of(size));
        let sending = tokio::spawn(async move {
            let _ = write.write_all(line.as_bytes()).await;
            write
        });
        let mut lines = BufReader::new(read).lines();
        let first = tokio::time::timeout(STEP, lines.next_line())
            .await
            .expect("the error line in time");
        let first = first.ok().flatten().unwrap_or_else(|| {
            panic!("ndjson, {size} bytes: the connection ended before the error line")
        });
        assert_eq!(
            json(&first)["error"]["data"],
            format!("Line exceeds maximum of {LIMIT} bytes"),
            "ndjson, {size} bytes"
        );
        // Then EOF; a reset after the line is as good (the gateway leaves
        // the rest of the line unread).
        let rest = tokio::time::timeout(STEP, lines.next_line())
            .await
            .expect("the end in time");
        assert!(
            !matches!(rest, Ok(Some(_))),
            "ndjson, {size} bytes: nothing after the error line, got {rest:?}"
        );
        sending.abort();
    }
    // Every listener still serves.
    let mut calm = TestClient::connect(Speak::JsonRpc, &gw.jsonrpc).await;
    calm.send(r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#)
        .await;
    assert_eq!(json(&calm.recv().await)["result"], serde_json::json!([1]));
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

/// A raw upgrade request to `url` offering `offer` (if any): the status
/// code and the `Sec-WebSocket-Protocol` of the response, as sent.
async fn handshake(url: &str, offer: Option<&str>) -> (u16, Option<String>) {
    let rest = url.strip_prefix("ws://").expect("a ws:// URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = TcpStream::connect(authority).await.expect("connect");
    let offer = offer.map_or(String::new(), |o| {
        format!("Sec-WebSocket-Protocol: {o}\r\n")
    });
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{offer}\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let read = async {
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut byte).await.expect("read");
            assert!(n > 0, "the connection ended inside the response head");
            head.push(byte[0]);
        }
    };
    tokio::time::timeout(STEP, read)
        .await
        .expect("the response head in time");
    let head = String::from_utf8(head).expect("an ASCII response head");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head}"));
    let protocol = lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("sec-websocket-protocol")
            .then(|| value.trim().to_owned())
    });
    (status, protocol)
}

#[tokio::test]
async fn holon_rpc_subprotocol_is_matched_case_insensitively_and_echoed_as_offered() {
    let gw = gateway().await;
    for (offer, echo) in [
        (Some("holon-rpc"), Some("holon-rpc")),
        (Some("Holon-RPC"), Some("Holon-RPC")),
        (Some("HOLON-RPC"), Some("HOLON-RPC")),
        (Some("chat, Holon-Rpc"), Some("Holon-Rpc")),
        (Some("chat"), None),
        (None, None),
    ] {
        assert_eq!(
            handshake(&gw.holon, offer).await,
            (101, echo.map(str::to_owned)),
            "holon-rpc, offering {offer:?}"
        );
    }
    // The other dialects' notes name their token only; it is still echoed
    // when offered.
    assert_eq!(
        handshake(&gw.jsonrpc, Some("jsonrpc")).await,
        (101, Some("jsonrpc".to_owned()))
    );
    assert_eq!(
        handshake(&gw.sideband, Some("sideband.v1")).await,
        (101, Some("sideband.v1".to_owned()))
    );
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

/// A client that closes gets the closing handshake completed: a close frame
/// back, echoing its code (RFC 6455 §5.5.1), not a dropped TCP connection.
#[tokio::test]
async fn a_close_from_the_client_is_answered_with_a_close_frame() {
    let gw = gateway().await;
    for (name, url) in [
        ("jsonrpc-ws", &gw.jsonrpc),
        ("holon-rpc", &gw.holon),
        ("sideband", &gw.sideband),
    ] {
        let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .expect("connect");
        let frame = tokio_tungstenite::tungstenite::protocol::CloseFrame {
            code: 1000.into(),
            reason: "bye".into(),
        };
        ws.send(Message::Close(Some(frame))).await.expect("close");
        // Whatever was already on its way (the Sideband handshake) comes
        // first; then the gateway's close frame.
        let answer = tokio::time::timeout(STEP, async {
            loop {
                match ws.next().await {
                    Some(Ok(Message::Close(frame))) => return Ok(frame.map(|f| u16::from(f.code))),
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(e.to_string()),
                    None => return Err("ended without a close frame".to_owned()),
                }
            }
        })
        .await
        .expect("an answer to the close");
        assert_eq!(answer, Ok(Some(1000)), "{name}");
    }
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}
