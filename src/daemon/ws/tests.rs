//! Reference WebSocket server tests over real sockets; JSON-RPC dialect here,
//! holon-rpc in `tests/holon.rs`.

// In tests a panic is the failure report (STYLE §8.3 rule 5 exempts tests).
#![allow(clippy::unwrap_used)]

mod holon;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::*;

const WAIT: Duration = Duration::from_secs(5);

type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn start(dialect: WsDialect) -> WsDaemon {
    WsDaemon::start("127.0.0.1:0".parse().unwrap(), dialect)
        .await
        .unwrap()
}

/// Connects offering `protocol`; returns the client and the selected one.
async fn connect_with(url: &str, protocol: Option<&str>) -> (Client, Option<String>) {
    let mut req = url.into_client_request().unwrap();
    if let Some(p) = protocol {
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", HeaderValue::from_str(p).unwrap());
    }
    let (ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    let selected = resp
        .headers()
        .get("Sec-WebSocket-Protocol")
        .map(|v| v.to_str().unwrap().to_owned());
    (ws, selected)
}

async fn connect(d: &WsDaemon) -> Client {
    connect_with(&d.url(), None).await.0
}

/// The next data or close frame (pings and pongs skipped).
async fn next(c: &mut Client) -> Message {
    loop {
        let msg = tokio::time::timeout(WAIT, c.next()).await.unwrap();
        match msg.unwrap().unwrap() {
            Message::Ping(_) | Message::Pong(_) => {}
            msg => return msg,
        }
    }
}

async fn recv(c: &mut Client) -> String {
    match next(c).await {
        Message::Text(text) => text.to_string(),
        other => panic!("expected a text frame, got {other:?}"),
    }
}

async fn send(c: &mut Client, text: &str) {
    c.send(Message::text(text)).await.unwrap();
}

async fn call(c: &mut Client, text: &str) -> String {
    send(c, text).await;
    recv(c).await
}

/// Reads up to the server's close frame: its code and reason.
async fn closed(c: &mut Client) -> (u16, String) {
    match next(c).await {
        Message::Close(Some(frame)) => (frame.code.into(), frame.reason.to_string()),
        other => panic!("expected a close frame, got {other:?}"),
    }
}

/// Waits until `f` holds, polling.
async fn eventually(f: impl Fn() -> bool) {
    tokio::time::timeout(WAIT, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn jsonrpc_methods_and_raw_ids() {
    let d = start(WsDialect::JsonRpc).await;
    let mut c = connect(&d).await;
    let cases = [
        (
            r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1.0}"#,
            r#"{"jsonrpc":"2.0","result":19,"id":1.0}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":12345678901234567890}"#,
            r#"{"jsonrpc":"2.0","result":7,"id":12345678901234567890}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"echo","params":{"a": [1, "\u0041"]},"id":"\u0041"}"#,
            r#"{"jsonrpc":"2.0","result":{"a": [1, "\u0041"]},"id":"\u0041"}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"get_data","id":null}"#,
            r#"{"jsonrpc":"2.0","result":["hello",5],"id":null}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"fail","params":{"code":7,"message":"no","data":[1]},"id":-0}"#,
            r#"{"jsonrpc":"2.0","error":{"code":7,"message":"no","data":[1]},"id":-0}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"Subscribe","id":"1"}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":"1"}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"rpc.heartbeat","id":"h1"}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":"h1"}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"foobar, "params":"bar","baz]"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"echo","params":null,"id":7}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":7}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":{"a":1}}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}"#,
        ),
        (
            "[]",
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}"#,
        ),
    ];
    for (request, reply) in cases {
        assert_eq!(call(&mut c, request).await, reply, "for {request}");
    }
    // A notification gets nothing: the next frame answers the next request.
    send(
        &mut c,
        r#"{"jsonrpc":"2.0","method":"notify_hello","params":[7]}"#,
    )
    .await;
    let reply = call(&mut c, r#"{"jsonrpc":"2.0","method":"update","id":8}"#).await;
    assert_eq!(reply, r#"{"jsonrpc":"2.0","result":null,"id":8}"#);
    d.stop().await;
}

#[tokio::test]
async fn jsonrpc_batches() {
    let d = start(WsDialect::JsonRpc).await;
    let mut c = connect(&d).await;
    let batch = r#"[{"jsonrpc":"2.0","method":"sleep","params":{"ms":30},"id":"a"},
        {"jsonrpc":"2.0","method":"notify_sum","params":[1,2]},
        1,
        {"jsonrpc":"2.0","method":"sum","params":[1,2],"id":2}]"#;
    let want = concat!(
        r#"[{"jsonrpc":"2.0","result":30,"id":"a"},"#,
        r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null},"#,
        r#"{"jsonrpc":"2.0","result":3,"id":2}]"#,
    );
    assert_eq!(call(&mut c, batch).await, want);
    // A batch of notifications gets no frame at all.
    send(
        &mut c,
        r#"[{"jsonrpc":"2.0","method":"update","params":[1]}]"#,
    )
    .await;
    let reply = call(&mut c, r#"{"jsonrpc":"2.0","method":"whoami","id":1}"#).await;
    assert_eq!(
        reply,
        r#"{"jsonrpc":"2.0","result":{"connection":1},"id":1}"#
    );
    d.stop().await;
}

#[tokio::test]
async fn jsonrpc_requests_run_concurrently() {
    let d = start(WsDialect::JsonRpc).await;
    let mut c = connect(&d).await;
    send(
        &mut c,
        r#"{"jsonrpc":"2.0","method":"sleep","params":[300],"id":1}"#,
    )
    .await;
    send(
        &mut c,
        r#"{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}"#,
    )
    .await;
    assert_eq!(
        recv(&mut c).await,
        r#"{"jsonrpc":"2.0","result":[2],"id":2}"#
    );
    assert_eq!(
        recv(&mut c).await,
        r#"{"jsonrpc":"2.0","result":300,"id":1}"#
    );
    d.stop().await;
}

#[tokio::test]
async fn jsonrpc_callback_round_trips() {
    let d = start(WsDialect::JsonRpc).await;
    let mut c = connect(&d).await;
    send(&mut c, r#"{"jsonrpc":"2.0","method":"callback","params":{"method":"ask","params":{"q":1}},"id":5}"#).await;
    let ask = recv(&mut c).await;
    assert_eq!(
        ask,
        r#"{"jsonrpc":"2.0","id":"s1","method":"ask","params":{"q":1}}"#
    );
    // An unknown reply id is ignored.
    send(&mut c, r#"{"jsonrpc":"2.0","id":"s9","result":0}"#).await;
    send(&mut c, r#"{"jsonrpc":"2.0","id":"s1","result":{"a":42}}"#).await;
    let reply = recv(&mut c).await;
    assert_eq!(
        reply,
        r#"{"jsonrpc":"2.0","result":{"reply":{"a":42}},"id":5}"#
    );

    send(
        &mut c,
        r#"{"jsonrpc":"2.0","method":"callback","params":{"method":"ask"},"id":6}"#,
    )
    .await;
    assert_eq!(
        recv(&mut c).await,
        r#"{"jsonrpc":"2.0","id":"s2","method":"ask"}"#
    );
    send(
        &mut c,
        r#"{"jsonrpc":"2.0","id":"s2","error":{"code":12,"message":"nope"}}"#,
    )
    .await;
    let reply = recv(&mut c).await;
    let want =
        r#"{"jsonrpc":"2.0","result":{"reply":{"error":{"code":12,"message":"nope"}}},"id":6}"#;
    assert_eq!(reply, want);
    d.stop().await;
}

#[tokio::test]
async fn jsonrpc_push_sends_a_notification_first() {
    let d = start(WsDialect::JsonRpc).await;
    let mut c = connect(&d).await;
    send(
        &mut c,
        r#"{"jsonrpc":"2.0","method":"push","params":{"method":"tick","params":[1]},"id":1}"#,
    )
    .await;
    assert_eq!(
        recv(&mut c).await,
        r#"{"jsonrpc":"2.0","method":"tick","params":[1]}"#
    );
    assert_eq!(
        recv(&mut c).await,
        r#"{"jsonrpc":"2.0","result":{"pushed":true},"id":1}"#
    );
    let bad = call(
        &mut c,
        r#"{"jsonrpc":"2.0","method":"push","params":[1],"id":2}"#,
    )
    .await;
    assert!(
        bad.starts_with(
            r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params","data":"#
        ),
        "{bad}"
    );
    d.stop().await;
}

#[tokio::test]
async fn whoami_counts_connections() {
    let d = start(WsDialect::JsonRpc).await;
    let whoami = r#"{"jsonrpc":"2.0","method":"whoami","id":0}"#;
    let mut c1 = connect(&d).await;
    let mut c2 = connect(&d).await;
    let one = r#"{"jsonrpc":"2.0","result":{"connection":1},"id":0}"#;
    let two = r#"{"jsonrpc":"2.0","result":{"connection":2},"id":0}"#;
    assert_eq!(call(&mut c2, whoami).await, two);
    assert_eq!(call(&mut c1, whoami).await, one);
    assert_eq!((d.accepted(), d.connections()), (2, 2));
    c1.close(None).await.unwrap();
    eventually(|| d.connections() == 1).await;
    assert_eq!(d.accepted(), 2);
    d.stop().await;
}

#[tokio::test]
async fn close_me_answers_then_closes_1001() {
    let d = start(WsDialect::JsonRpc).await;
    let mut c = connect(&d).await;
    let reply = call(&mut c, r#"{"jsonrpc":"2.0","method":"close_me","id":1}"#).await;
    assert_eq!(
        reply,
        r#"{"jsonrpc":"2.0","result":{"closing":true},"id":1}"#
    );
    assert_eq!(closed(&mut c).await.0, 1001);
    // Reading on sends the client's close reply; then the server hangs up.
    let end = tokio::time::timeout(Duration::from_secs(1), c.next()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
    assert_eq!(d.connections(), 0);
    d.stop().await;
}

#[tokio::test]
async fn binary_frames_close_1003_and_pings_are_answered() {
    let d = start(WsDialect::JsonRpc).await;
    let mut c = connect(&d).await;
    c.send(Message::Ping(b"hi"[..].into())).await.unwrap();
    let pong = tokio::time::timeout(WAIT, c.next()).await.unwrap();
    assert_eq!(pong.unwrap().unwrap(), Message::Pong(b"hi"[..].into()));
    c.send(Message::binary(b"{}".to_vec())).await.unwrap();
    let (code, reason) = closed(&mut c).await;
    assert_eq!(
        (code, reason.as_str()),
        (1003, "binary frames are not supported")
    );
    d.stop().await;
}

#[tokio::test]
async fn subprotocol_and_path() {
    let d = start(WsDialect::JsonRpc).await;
    let (_c, selected) = connect_with(&d.url(), Some("foo, JSONRPC")).await;
    assert_eq!(selected.as_deref(), Some("JSONRPC"));
    let (_c, selected) = connect_with(&d.url(), None).await;
    assert_eq!(selected, None);
    let wrong = d.url().replace("/rpc", "/ws");
    assert!(tokio_tungstenite::connect_async(wrong).await.is_err());
    assert_eq!(d.accepted(), 2);
    d.stop().await;
}

#[tokio::test]
async fn stop_drops_connections_without_close_frames() {
    let d = start(WsDialect::JsonRpc).await;
    let url = d.url();
    let mut c = connect(&d).await;
    send(
        &mut c,
        r#"{"jsonrpc":"2.0","method":"sleep","params":[5000],"id":1}"#,
    )
    .await;
    eventually(|| d.connections() == 1).await;
    tokio::time::timeout(WAIT, d.stop()).await.unwrap();
    let end = tokio::time::timeout(WAIT, c.next()).await.unwrap();
    assert!(
        !matches!(end, Some(Ok(Message::Text(_) | Message::Close(_)))),
        "{end:?}"
    );
    assert!(tokio_tungstenite::connect_async(url).await.is_err());
}

#[tokio::test]
async fn oversized_messages_close_1009() {
    let d = start(WsDialect::JsonRpc).await;
    let mut c = connect(&d).await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":["{}"],"id":1}}"#,
        "x".repeat(MAX_MESSAGE)
    );
    send(&mut c, &big).await;
    let want = r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request","data":"Message size exceeds maximum of 1048576 bytes"},"id":null}"#;
    assert_eq!(recv(&mut c).await, want);
    assert_eq!(closed(&mut c).await, (1009, "message too large".to_owned()));
    d.stop().await;

    let d = start(WsDialect::Holon).await;
    let mut c = connect(&d).await;
    send(&mut c, &big).await;
    assert_eq!(closed(&mut c).await.0, 1009);
    d.stop().await;
}
