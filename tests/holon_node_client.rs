//! An independent holon-rpc client: Node.js with the `ws` package (the
//! library `HolonClient` runs on outside browsers) drives a session through a
//! switchyard holon-rpc listener in front of the reference holon upstream in
//! per-client mode.
//!
//! The test installs what it needs itself: `npm ci` in `tests/node` (the
//! committed `package-lock.json` pins `ws`) when `node_modules/ws` is missing
//! or not the pinned version. Missing `node`/`npm` is a failure, not a skip.
//!
//! `tests/node/holon_client.mjs` checks every frame with the `HolonClient`
//! rules (holon-rpc.md §2), calls `echo`, heartbeats, answers the upstream's
//! `callback` request, and records the close codes of three protocol errors
//! and the answer to an invalid envelope with a usable id. It prints one JSON
//! summary; this test asserts every expected value in it itself, so a script
//! that stops checking cannot pass.

mod common;

use common::node::{ensure_node_modules, node_dir, pinned_ws_version, require_tool};
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use switchyard::daemon::ws::{WsDaemon, WsDialect};

/// How long the Node script may run (its own deadline is 90 s).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

const ECHO_PARAMS: &str =
    r#"{"text":"hello","n":1,"nested":{"list":[1,2.5,null,true]},"unicode":"héllo ☃"}"#;

/// The gateway: holon-rpc listener `browser` at `/rpc` → the reference holon
/// upstream `app`, one upstream link per client so that the upstream's
/// `callback` requests reach this client.
fn gateway_toml(upstream_url: &str) -> String {
    format!(
        r#"
[listeners.browser]
dialect = "holon-rpc"
address = "127.0.0.1:0"
path = "/rpc"
request_timeout_ms = 20000

[upstreams.app]
dialect = "holon-rpc"
url = "{upstream_url}"
mode = "per-client"

[[routes]]
listener = "browser"
upstream = "app"
"#
    )
}

async fn run_script(url: &str) -> Output {
    let script = node_dir().join("holon_client.mjs");
    let child = tokio::process::Command::new("node")
        .arg(&script)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run `node {}`: {e}", script.display()));
    tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("`node holon_client.mjs` ran longer than {SCRIPT_TIMEOUT:?}"))
        .expect("node output")
}

fn is_s_id(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|id| id.len() > 1 && id.starts_with('s'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_ws_client_drives_a_holon_session() {
    let node_version = require_tool("node");
    let dir = node_dir();
    let pinned = pinned_ws_version(&dir);
    tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || ensure_node_modules(&dir)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));

    let upstream = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::Holon)
        .await
        .expect("holon upstream");
    let toml = gateway_toml(&upstream.url());
    let cfg = switchyard::config::Config::from_toml(&toml)
        .unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("browser").expect("listener url");
    let gateway = bound.spawn();

    let out = run_script(&url).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let context = format!(
        "node {node_version}, exit {}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    let summary: Value = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the script printed no JSON summary\n{context}"));
    println!("holon_client.mjs summary: {summary:#}");

    // The script's own verdict.
    assert_eq!(summary["failures"], json!([]), "{context}");
    assert_eq!(summary["ok"], true, "{context}");
    assert_eq!(out.status.code(), Some(0), "{context}");
    assert_eq!(summary["ws"], pinned.as_str(), "{context}");
    assert_eq!(summary["url"], url.as_str(), "{context}");
    // Nothing switchyard sent broke a HolonClient check, and nothing arrived
    // that the script did not ask for.
    assert_eq!(summary["violations"], json!([]), "{context}");
    assert_eq!(summary["unexpected"], json!([]), "{context}");

    let steps = &summary["steps"];
    assert_eq!(steps["connect"]["protocol"], "holon-rpc", "{context}");

    // 1. echo
    let echo_params: Value = serde_json::from_str(ECHO_PARAMS).expect("echo params");
    assert_eq!(
        steps["echo"]["reply"],
        json!({"jsonrpc": "2.0", "id": "1", "result": echo_params}),
        "{context}"
    );

    // 2. heartbeat, answered within HolonClient's 5 s.
    assert_eq!(
        steps["heartbeat"]["reply"],
        json!({"jsonrpc": "2.0", "id": "h1", "result": {}}),
        "{context}"
    );
    assert!(
        steps["heartbeat"]["ms"]
            .as_u64()
            .is_some_and(|ms| ms < 5000),
        "{context}"
    );

    // 3. callback: the upstream's request reaches the client as an `s<N>`
    // request with the params as sent; the client's answer goes back.
    let callback = &steps["callback"];
    let ask = &callback["server_request"];
    assert!(is_s_id(&ask["id"]), "server request id: {ask}\n{context}");
    assert_eq!(
        ask,
        &json!({"jsonrpc": "2.0", "id": ask["id"], "method": "ui.confirm", "params": {"text": "ok?"}}),
        "{context}"
    );
    assert_eq!(
        callback["heartbeat_during"]["reply"],
        json!({"jsonrpc": "2.0", "id": "h2", "result": {}}),
        "{context}"
    );
    assert_eq!(
        callback["reply"],
        json!({"jsonrpc": "2.0", "id": "2", "result": {"reply": {"confirmed": true}}}),
        "{context}"
    );
    assert_eq!(
        steps["main"]["server_requests"],
        json!([ask]),
        "exactly one server-initiated request\n{context}"
    );

    // 4. protocol errors close the connection with the holon-rpc.md §10 codes,
    // and nothing is sent before the close.
    let closes = &summary["closes"];
    for (name, code, reason) in [
        ("malformed_json", 1002, "malformed JSON"),
        ("binary", 1003, "binary frames are not supported"),
        (
            "invalid_envelope_no_id",
            1002,
            "invalid envelope: id must be a non-empty string",
        ),
    ] {
        assert_eq!(
            closes[name],
            json!({"code": code, "reason": reason, "closed_by": "server", "frames": []}),
            "{name}\n{context}"
        );
    }

    // 5. an invalid envelope with a usable id is answered -32600 with that id,
    // and the connection stays open.
    let invalid = &steps["invalid_with_id"];
    let reply = &invalid["reply"];
    assert_eq!(reply["jsonrpc"], "2.0", "{context}");
    assert_eq!(reply["id"], "7", "{context}");
    assert_eq!(reply["error"]["code"], -32600, "{context}");
    assert_eq!(reply["error"]["message"], "Invalid Request", "{context}");
    assert!(
        reply["error"]["data"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "the reason goes in error.data\n{context}"
    );
    assert_eq!(
        reply.as_object().map(|o| o.len()),
        Some(3),
        "{reply}\n{context}"
    );
    assert_eq!(invalid["open_after"], true, "{context}");
    assert_eq!(
        invalid["echo_after"],
        json!({"jsonrpc": "2.0", "id": "8", "result": {"still": "open"}}),
        "{context}"
    );

    gateway.shutdown().await;
    upstream.stop().await;
}
