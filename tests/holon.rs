//! holon-rpc both ways: callbacks into many clients, heartbeats towards
//! upstreams, reply-id classification, shared-mode refusals, params a holon
//! upstream cannot carry, and several dialects on one port.

mod common;

use std::time::Duration;

use common::clients::{Speak, TestClient};
use common::{json, metric_value};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use switchyard::daemon::ws::{WsDaemon, WsDialect};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

/// A gateway whose listeners are `(name, dialect, path)` on one address,
/// all routed to one upstream given by TOML lines.
async fn gateway(
    listeners: &[(&str, &str, &str)],
    upstream: &str,
    extra: &str,
) -> (switchyard::app::Running, Vec<String>) {
    let mut toml = String::new();
    for (name, dialect, path) in listeners {
        toml += &format!("[listeners.{name}]\ndialect = \"{dialect}\"\naddress = \"127.0.0.1:0\"\npath = \"{path}\"\n{extra}\n\n");
        toml += &format!("[[routes]]\nlistener = \"{name}\"\nupstream = \"up\"\n\n");
    }
    toml += &format!("[upstreams.up]\n{upstream}\nbackoff_initial_ms = 50\nbackoff_max_ms = 100\n");
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let urls = listeners
        .iter()
        .map(|(n, _, _)| bound.ws_url(n).expect("url"))
        .collect();
    (bound.spawn(), urls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_holon_clients_each_get_their_own_callbacks() {
    let upstream = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::Holon)
        .await
        .expect("daemon");
    let up = format!(
        "dialect = \"holon-rpc\"\nurl = \"{}\"\nmode = \"per-client\"",
        upstream.url()
    );
    let (gw, urls) = gateway(&[("h", "holon-rpc", "/holon")], &up, "").await;
    let tasks = (0..32).map(|i| {
        let url = urls[0].clone();
        tokio::spawn(async move {
            let mut c = TestClient::connect(Speak::Holon, &url).await;
            for round in 0..3 {
                let call = format!(r#"{{"jsonrpc":"2.0","id":"c{round}","method":"callback","params":{{"method":"ui.who","params":{{"client":{i},"round":{round}}}}}}}"#);
                c.send(&call).await;
                let ask = json(&c.recv().await);
                assert_eq!(ask["method"], "ui.who");
                assert_eq!(ask["params"], json!({"client": i, "round": round}), "client {i} got another client's callback");
                c.send(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{"me":{i},"round":{round}}}}}"#, ask["id"])).await;
                let reply = json(&c.recv().await);
                assert_eq!(reply["id"], format!("c{round}"));
                assert_eq!(reply["result"], json!({"reply": {"me": i, "round": round}}));
            }
        })
    });
    for t in futures_util::future::join_all(tasks).await {
        t.expect("client task");
    }
    assert_eq!(
        upstream.accepted(),
        32,
        "one upstream connection per client"
    );
    gw.shutdown().await;
    upstream.stop().await;
}

/// Selects the holon-rpc subprotocol, as every holon server does.
// The callback's signature is tungstenite's; its error type is large.
#[allow(clippy::result_large_err)]
fn select_holon(
    _: &Request,
    mut resp: Response,
) -> Result<Response, tokio_tungstenite::tungstenite::handshake::server::ErrorResponse> {
    resp.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("holon-rpc"),
    );
    Ok(resp)
}

/// A holon upstream that completes the handshake, records what it reads
/// and never answers anything.
async fn silent_holon_upstream() -> (String, tokio::sync::mpsc::UnboundedReceiver<Message>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("ws://{}/rpc", listener.local_addr().expect("addr"));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(tcp, select_holon).await
                else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    let _ = tx.send(msg);
                }
            });
        }
    });
    (url, rx)
}

#[tokio::test]
async fn missed_heartbeat_closes_the_upstream_with_4000_and_fails_calls() {
    let (url, mut seen) = silent_holon_upstream().await;
    let up = format!("dialect = \"holon-rpc\"\nurl = \"{url}\"\nheartbeat_interval_ms = 100\nheartbeat_timeout_ms = 200");
    let (gw, urls) = gateway(&[("j", "jsonrpc-ws", "/rpc")], &up, "").await;
    common::wait_connected(&gw, "up").await;
    let mut c = TestClient::connect(Speak::JsonRpc, &urls[0]).await;
    c.send(r#"{"jsonrpc":"2.0","method":"anything","params":{},"id":1}"#)
        .await;
    let v = json(&c.recv().await);
    assert_eq!(v["error"]["code"], -32009, "{v}");
    // What the upstream saw: our request with a string id, a heartbeat, and
    // a close 4000 "heartbeat timeout".
    let mut texts = Vec::new();
    let close = loop {
        match tokio::time::timeout(common::STEP, seen.recv())
            .await
            .expect("upstream saw frames")
        {
            Some(Message::Text(t)) => texts.push(json(&t)),
            Some(Message::Close(f)) => break f,
            Some(_) => continue,
            None => panic!("upstream channel closed"),
        }
    };
    assert!(
        texts
            .iter()
            .any(|t| t["method"] == "anything" && t["id"] == "1" && t["params"] == json!({})),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t["method"] == "rpc.heartbeat" && t["id"] == "h1"),
        "{texts:?}"
    );
    let close = close.expect("close frame");
    assert_eq!(u16::from(close.code), 4000);
    assert_eq!(close.reason.as_str(), "heartbeat timeout");
    gw.shutdown().await;
}

/// A holon upstream that answers each request with a reply for an unknown
/// id, the real reply, and the real reply again; `slow` is answered only
/// once the returned `Notify` is notified.
async fn noisy_holon_upstream() -> (String, std::sync::Arc<tokio::sync::Notify>) {
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let slow_released = release.clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("ws://{}/rpc", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        let Ok(ws) = tokio_tungstenite::accept_hdr_async(tcp, select_holon).await else {
            return;
        };
        let (mut tx, mut rx) = ws.split();
        while let Some(Ok(Message::Text(t))) = rx.next().await {
            let v: serde_json::Value = serde_json::from_str(&t).expect("json");
            let id = v["id"].clone();
            if v["method"] == "slow" {
                slow_released.notified().await;
            }
            for reply in [
                json!({"jsonrpc":"2.0","id":"999999","result":"unknown"}),
                json!({"jsonrpc":"2.0","id":id,"result":"ok"}),
                json!({"jsonrpc":"2.0","id":id,"result":"again"}),
            ] {
                if tx
                    .send(Message::Text(reply.to_string().into()))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    (url, release)
}

#[tokio::test]
async fn unknown_duplicate_and_stale_reply_ids_are_counted_apart() {
    let (url, release_slow) = noisy_holon_upstream().await;
    let up = format!("dialect = \"holon-rpc\"\nurl = \"{url}\"\npool_size = 1");
    // `fast` is answered at once, well within the timeout however busy the
    // machine; `slow` is held until it timed out.
    let (gw, urls) = gateway(
        &[("j", "jsonrpc-ws", "/rpc")],
        &up,
        "request_timeout_ms = 2000",
    )
    .await;
    common::wait_connected(&gw, "up").await;
    let mut c = TestClient::connect(Speak::JsonRpc, &urls[0]).await;
    c.send(r#"{"jsonrpc":"2.0","method":"fast","params":{},"id":1}"#)
        .await;
    assert_eq!(json(&c.recv().await)["result"], "ok");
    c.send(r#"{"jsonrpc":"2.0","method":"slow","params":{},"id":2}"#)
        .await;
    assert_eq!(json(&c.recv().await)["error"]["code"], -32008);
    release_slow.notify_one();
    let count = |kind: &str| {
        metric_value(
            &gw,
            "switchyard_unmatched_responses_total",
            &[
                ("dialect", "holon-rpc"),
                ("side", "upstream"),
                ("kind", kind),
            ],
        )
    };
    // fast: unknown + duplicate; slow (timed out): unknown + stale twice
    // (the spec checks stale before duplicate).
    let settled = common::eventually(Duration::from_secs(20), || {
        count("unknown") == 2.0 && count("stale") == 2.0 && count("duplicate") == 1.0
    })
    .await;
    assert!(
        settled,
        "unknown {} stale {} duplicate {}",
        count("unknown"),
        count("stale"),
        count("duplicate")
    );
    c.silence(Duration::from_millis(100)).await;
    gw.shutdown().await;
}

#[tokio::test]
async fn shared_mode_refuses_upstream_requests_and_holon_targets_refuse_array_params() {
    let upstream = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::Holon)
        .await
        .expect("daemon");
    let up = format!("dialect = \"holon-rpc\"\nurl = \"{}\"", upstream.url());
    let (gw, urls) = gateway(&[("j", "jsonrpc-ws", "/rpc")], &up, "").await;
    common::wait_connected(&gw, "up").await;
    let mut c = TestClient::connect(Speak::JsonRpc, &urls[0]).await;
    // In shared mode an upstream-originated request has no owner.
    c.send(
        r#"{"jsonrpc":"2.0","method":"callback","params":{"method":"ui.ask","params":{}},"id":1}"#,
    )
    .await;
    let v = json(&c.recv().await);
    assert_eq!(v["result"]["reply"]["error"]["code"], -32601, "{v}");
    assert_eq!(
        v["result"]["reply"]["error"]["message"], "method \"ui.ask\" not registered",
        "{v}"
    );
    let refused = metric_value(
        &gw,
        "switchyard_dropped_messages_total",
        &[("reason", "upstream_request")],
    );
    assert_eq!(refused, 1.0);
    // holon-rpc takes only object params: refused locally, never forwarded.
    c.send(r#"{"jsonrpc":"2.0","method":"echo","params":[1,2],"id":2}"#)
        .await;
    let v = json(&c.recv().await);
    assert_eq!(v["error"]["code"], -32602, "{v}");
    gw.shutdown().await;
    upstream.stop().await;
}

#[tokio::test]
async fn several_dialects_share_one_port_and_unknown_paths_get_404() {
    let upstream = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::JsonRpc)
        .await
        .expect("daemon");
    let up = format!("dialect = \"jsonrpc-ws\"\nurl = \"{}\"", upstream.url());
    let (gw, urls) = gateway(
        &[("j", "jsonrpc-ws", "/rpc"), ("h", "holon-rpc", "/holon")],
        &up,
        "",
    )
    .await;
    assert_eq!(
        urls[0].rsplit_once('/').map(|p| p.0),
        urls[1].rsplit_once('/').map(|p| p.0),
        "same address"
    );
    let mut j = TestClient::connect(Speak::JsonRpc, &urls[0]).await;
    j.send(r#"{"jsonrpc":"2.0","method":"echo","params":{"x":1},"id":7}"#)
        .await;
    assert_eq!(
        j.recv().await,
        r#"{"jsonrpc":"2.0","result":{"x":1},"id":7}"#
    );
    let mut h = TestClient::connect(Speak::Holon, &urls[1]).await;
    h.send(r#"{"jsonrpc":"2.0","id":"7","method":"echo","params":{"x":1}}"#)
        .await;
    assert_eq!(
        h.recv().await,
        r#"{"jsonrpc":"2.0","result":{"x":1},"id":"7"}"#
    );
    // The path picks the dialect: a holon frame on the JSON-RPC path is
    // plain JSON-RPC there (a request with a string id).
    let base = urls[0]
        .rsplit_once('/')
        .map(|p| p.0.to_owned())
        .expect("base");
    match tokio_tungstenite::connect_async(format!("{base}/nope")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 404),
        other => panic!("expected HTTP 404, got {other:?}"),
    }
    gw.shutdown().await;
    upstream.stop().await;
}
