//! JSON-RPC WS → NDJSON: exact id round trips, the JSON-RPC 2.0
//! specification's examples, and frame-level validation.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;
use switchyard::daemon::DaemonOptions;

#[tokio::test]
async fn every_id_form_round_trips_byte_identical() {
    let stack = Stack::start("", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    for id in [
        "1",
        "1.0",
        "-0",
        "1e3",
        "\"1\"",
        "\"\\u0031\"",
        "12345678901234567890",
        "null",
        "\"\"",
        "-5.25",
    ] {
        send(
            &mut ws,
            &format!(r#"{{"jsonrpc":"2.0","method":"echo","params":[{id}],"id":{id}}}"#),
        )
        .await;
        let reply = recv(&mut ws).await;
        assert_eq!(
            reply,
            format!(r#"{{"jsonrpc":"2.0","result":[{id}],"id":{id}}}"#),
            "id {id}"
        );
    }
    stack.gateway.shutdown().await;
}

/// Batch replies may come in any order: compare them as multisets.
fn normalize(v: Value) -> Value {
    match v {
        Value::Array(mut items) => {
            items.sort_by_key(|i| i.to_string());
            Value::Array(items)
        }
        other => other,
    }
}

#[tokio::test]
async fn jsonrpc_spec_examples_through_the_gateway() {
    let stack = Stack::start("", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    for (request, expected) in common::spec::SPEC_EXAMPLES {
        send(&mut ws, request).await;
        // A marker request after each example proves what came (or did not
        // come) for the example itself.
        send(
            &mut ws,
            r#"{"jsonrpc":"2.0","method":"echo","params":["marker"],"id":"marker"}"#,
        )
        .await;
        let first = recv(&mut ws).await;
        match expected {
            Some(want) => {
                assert_eq!(
                    normalize(json(&first)),
                    normalize(json(want)),
                    "example {request}"
                );
                let marker = recv(&mut ws).await;
                assert_eq!(json(&marker)["id"], "marker");
            }
            None => assert_eq!(
                json(&first)["id"],
                "marker",
                "example {request} produced {first}"
            ),
        }
    }
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn binary_frame_closes_1003_and_parse_error_keeps_the_connection() {
    let stack = Stack::start("", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    send(&mut ws, "{not json").await;
    assert_eq!(json(&recv(&mut ws).await)["error"]["code"], -32700);
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#,
    )
    .await;
    assert_eq!(json(&recv(&mut ws).await)["result"], serde_json::json!([1]));
    use futures_util::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::Binary(
        vec![1u8, 2, 3].into(),
    ))
    .await
    .expect("send");
    let (code, reason) = expect_close(&mut ws).await;
    assert_eq!(code, 1003);
    assert_eq!(reason, "binary frames are not supported");
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn oversize_message_gets_the_error_then_close_1009() {
    let stack = Stack::start("max_message_bytes = 1024", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    let overhead = r#"{"jsonrpc":"2.0","method":"echo","params":[""],"id":1}"#.len();
    let at_limit = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":["{}"],"id":1}}"#,
        "x".repeat(1024 - overhead)
    );
    assert_eq!(at_limit.len(), 1024);
    send(&mut ws, &at_limit).await;
    assert_eq!(json(&recv(&mut ws).await)["id"], 1);
    let over = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":["{}"],"id":2}}"#,
        "x".repeat(2000)
    );
    send(&mut ws, &over).await;
    assert_eq!(
        recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request","data":"Message size exceeds maximum of 1024 bytes"},"id":null}"#
    );
    assert_eq!(expect_close(&mut ws).await.0, 1009);
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn batch_limit_is_enforced_with_the_spec_error() {
    let stack = Stack::start("max_batch_items = 3", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    let item = r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#;
    send(&mut ws, &format!("[{item},{item},{item},{item}]")).await;
    assert_eq!(
        recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request","data":"Batch size exceeds maximum of 3"},"id":null}"#
    );
    // The connection stays open and a batch at the limit is served.
    send(&mut ws, &format!("[{item},{item},{item}]")).await;
    let reply = json(&recv(&mut ws).await);
    assert_eq!(reply.as_array().map(Vec::len), Some(3));
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn ping_notification_gets_pong_and_unrouted_rpc_methods_are_refused() {
    let stack = Stack::start("", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    send(&mut ws, r#"{"jsonrpc":"2.0","method":"ping"}"#).await;
    assert_eq!(recv(&mut ws).await, r#"{"jsonrpc":"2.0","method":"pong"}"#);
    send(&mut ws, r#"{"jsonrpc":"2.0","method":"rpc.nope","id":3}"#).await;
    assert_eq!(
        recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":3}"#
    );
    expect_silence(&mut ws, Duration::from_millis(100)).await;
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn a_method_no_route_matches_is_told_from_the_upstreams_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let daemon = switchyard::daemon::Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    // `public` routes everything to the daemon; `lonely` has no route.
    let toml = format!(
        "{}\n[listeners.lonely]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/lonely\"\n",
        stack_toml(&socket, "", "")
    );
    let cfg = switchyard::config::Config::from_toml(&toml).expect("valid config");
    assert_eq!(cfg.warnings().len(), 1, "{:?}", cfg.warnings());
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let (public, lonely) = (bound.ws_url("public"), bound.ws_url("lonely"));
    let gateway = bound.spawn();
    wait_connected(&gateway, "daemon").await;
    let call = r#"{"jsonrpc":"2.0","method":"no.such.method","id":1}"#;

    let mut ws = connect(&public.expect("public url")).await;
    send(&mut ws, call).await;
    let upstreams = json(&recv(&mut ws).await);
    assert_eq!(upstreams["error"]["code"], -32601, "{upstreams}");
    assert!(upstreams["error"].get("data").is_none(), "{upstreams}");

    let mut ws = connect(&lonely.expect("lonely url")).await;
    send(&mut ws, call).await;
    let ours = json(&recv(&mut ws).await);
    assert_eq!(ours["error"]["code"], -32601, "{ours}");
    assert_eq!(ours["error"]["message"], "Method not found", "{ours}");
    assert_eq!(ours["error"]["data"], "no route matched", "{ours}");
    assert_eq!(ours["id"], 1, "{ours}");
    gateway.shutdown().await;
    drop(daemon);
}
