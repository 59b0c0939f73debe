//! The diagnostic echo listener (`echo = true`), the target of the
//! Autobahn|Testsuite run (`scripts/autobahn.sh`): every text and binary
//! message comes back unchanged through the ordinary WebSocket stack, the
//! size limit still holds, and only JSON-RPC WebSocket listeners may echo.
//! And what Autobahn found: a frame that breaks RFC 6455 fails the
//! connection with a close frame (1002, or 1007 for text that is not
//! UTF-8) on every WebSocket listener, echo or not.

mod common;

use common::connect;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

async fn echo_gateway(limit: usize) -> (switchyard::app::Running, String) {
    gateway(limit, true).await
}

async fn gateway(limit: usize, echo: bool) -> (switchyard::app::Running, String) {
    let toml = format!(
        "[listeners.e]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/\"\n\
         echo = {echo}\nmax_message_bytes = {limit}\n"
    );
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("e").expect("url");
    (bound.spawn(), url)
}

async fn next_data(ws: &mut common::Ws) -> Message {
    loop {
        let msg = tokio::time::timeout(common::STEP, ws.next())
            .await
            .expect("an answer in time")
            .expect("the connection stays open")
            .expect("a frame");
        if !matches!(msg, Message::Ping(_) | Message::Pong(_)) {
            return msg;
        }
    }
}

#[tokio::test]
async fn text_and_binary_messages_come_back_unchanged_and_in_order() {
    let (_gateway, url) = echo_gateway(1 << 20).await;
    let mut ws = connect(&url).await;
    let sent = vec![
        Message::text(""),
        Message::text("not json at all"),
        Message::text("{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}"),
        Message::binary(vec![0u8, 255, 1, 2]),
        Message::text("ünïcödé ✓".repeat(1000)),
        Message::binary(vec![7u8; 65_536]),
    ];
    for m in &sent {
        ws.send(m.clone()).await.expect("send");
    }
    for m in &sent {
        assert_eq!(&next_data(&mut ws).await, m);
    }
}

#[tokio::test]
async fn a_message_over_the_limit_is_still_refused_with_1009() {
    let (_gateway, url) = echo_gateway(1024).await;
    let mut ws = connect(&url).await;
    ws.send(Message::text("a".repeat(1024)))
        .await
        .expect("send");
    assert_eq!(next_data(&mut ws).await, Message::text("a".repeat(1024)));
    ws.send(Message::text("a".repeat(1025)))
        .await
        .expect("send");
    // The JSON-RPC answer to an oversize message, then close 1009.
    let mut code = None;
    while let Some(Ok(msg)) = ws.next().await {
        if let Message::Close(frame) = msg {
            code = frame.map(|f| u16::from(f.code));
            break;
        }
        assert!(
            !matches!(&msg, Message::Text(t) if t.len() > 1024),
            "the oversize message must not come back"
        );
    }
    assert_eq!(code, Some(1009));
}

#[test]
fn only_jsonrpc_websocket_listeners_may_echo() {
    let toml = "[listeners.h]\ndialect = \"holon-rpc\"\naddress = \"127.0.0.1:0\"\necho = true\n\n\
                [listeners.n]\ndialect = \"ndjson\"\nsocket = \"/tmp/x.sock\"\necho = true\n";
    let err = switchyard::config::Config::from_toml(toml)
        .expect_err("echo on holon-rpc and ndjson is refused")
        .to_string();
    assert!(err.contains("listeners.h.echo"), "{err}");
    assert!(err.contains("listeners.n.echo"), "{err}");
}

/// Upgrades a raw TCP connection to `url`, sends `frame` (already encoded,
/// masked) and returns the close code of the first close frame the server
/// sends (`None`: the connection ended without one).
async fn close_code_after(url: &str, frame: &[u8]) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("ws://").trim_end_matches('/');
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(head.as_bytes())
        .await
        .expect("upgrade request");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let body = loop {
        let n = tokio::time::timeout(common::STEP, tcp.read(&mut buf))
            .await
            .expect("the upgrade answer in time")
            .expect("read");
        assert!(n > 0, "closed during the upgrade");
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            assert!(
                got.starts_with(b"HTTP/1.1 101"),
                "{}",
                String::from_utf8_lossy(&got)
            );
            break got.split_off(end + 4);
        }
    };
    tcp.write_all(frame).await.expect("frame");
    let mut rest = body;
    loop {
        // Server frames are unmasked; close frames are short.
        if rest.len() >= 2 {
            let (opcode, len) = (rest[0] & 0x0f, usize::from(rest[1] & 0x7f));
            assert!(len < 126, "no long frame expected");
            if rest.len() >= 2 + len {
                if opcode == 0x8 {
                    return (len >= 2).then(|| u16::from_be_bytes([rest[2], rest[3]]));
                }
                rest.drain(..2 + len);
                continue;
            }
        }
        let n = tokio::time::timeout(common::STEP, tcp.read(&mut buf))
            .await
            .expect("the server's answer in time")
            .unwrap_or(0);
        if n == 0 {
            return None;
        }
        rest.extend_from_slice(&buf[..n]);
    }
}

/// A masked client frame (mask 0, so the payload goes as is).
fn client_frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let len = u8::try_from(payload.len()).expect("short payload");
    assert!(len < 126);
    let mut f = vec![first, 0x80 | len, 0, 0, 0, 0];
    f.extend_from_slice(payload);
    f
}

#[tokio::test]
async fn a_frame_that_breaks_rfc_6455_is_answered_with_close_1002() {
    for echo in [false, true] {
        let (_gateway, url) = gateway(1 << 20, echo).await;
        // FIN + RSV1 + text, with no extension negotiated.
        let code = close_code_after(&url, &client_frame(0x80 | 0x40 | 0x1, b"hi")).await;
        assert_eq!(code, Some(1002), "reserved bit, echo = {echo}");
        // A reserved opcode (3).
        let code = close_code_after(&url, &client_frame(0x80 | 0x3, b"")).await;
        assert_eq!(code, Some(1002), "reserved opcode, echo = {echo}");
    }
}

#[tokio::test]
async fn a_text_message_that_is_not_utf8_is_answered_with_close_1007() {
    for echo in [false, true] {
        let (_gateway, url) = gateway(1 << 20, echo).await;
        let code =
            close_code_after(&url, &client_frame(0x80 | 0x1, &[0xce, 0xba, 0xff, 0xfe])).await;
        assert_eq!(code, Some(1007), "echo = {echo}");
    }
}
