//! An independent Sideband client: Node.js with the `ws` package and a tiny
//! SBP frame codec of its own (`tests/node/sideband_client.mjs`, written
//! from sideband.md §2, not from switchyard's code) drives a session
//! through a switchyard `sideband` listener in front of the reference NDJSON
//! daemon.
//!
//! The test installs what it needs itself: `npm ci` in `tests/node` (the
//! committed `package-lock.json` pins `ws`) when `node_modules/ws` is missing
//! or not the pinned version, under the same lock as the holon Node client
//! test, which shares `tests/node`. Missing `node`/`npm` is a failure, not a
//! skip.
//!
//! The script handshakes, calls `echo`, pings, sends an event, and records
//! what the gateway does with three malformed frames (too short, an invalid
//! subject, a text frame) and with a first frame that is not a handshake. It
//! prints one JSON summary; this test asserts every expected value in it
//! itself, so a script that stops checking cannot pass.

mod common;

use common::node::{ensure_node_modules, node_dir, pinned_ws_version, require_tool};

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use switchyard::daemon::{Daemon, DaemonOptions};

/// How long the Node script may run (its own deadline is 60 s).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(90);

/// The gateway: Sideband listener `sb` at `/sb` → the reference NDJSON
/// daemon.
fn gateway_toml(socket: &Path) -> String {
    format!(
        r#"
[listeners.sb]
dialect = "sideband"
address = "127.0.0.1:0"
path = "/sb"
request_timeout_ms = 20000

[upstreams.daemon]
dialect = "ndjson"
socket = "{}"

[[routes]]
listener = "sb"
upstream = "daemon"
"#,
        socket.display()
    )
}

async fn run_script(url: &str) -> Output {
    let script = node_dir().join("sideband_client.mjs");
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
        .unwrap_or_else(|_| panic!("`node sideband_client.mjs` ran longer than {SCRIPT_TIMEOUT:?}"))
        .expect("node output")
}

fn is_hex32(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_ws_client_drives_a_sideband_session() {
    let node_version = require_tool("node");
    let dir = node_dir();
    let pinned = pinned_ws_version(&dir);
    tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || ensure_node_modules(&dir)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));

    let tmp = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&tmp.path().join("d.sock"), DaemonOptions::default())
        .await
        .expect("daemon");
    let toml = gateway_toml(daemon.path());
    let cfg = switchyard::config::Config::from_toml(&toml)
        .unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("sb").expect("listener url");
    let gateway = bound.spawn();
    common::wait_connected(&gateway, "daemon").await;

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
    println!("sideband_client.mjs summary: {summary:#}");

    // The script's own verdict.
    assert_eq!(summary["failures"], json!([]), "{context}");
    assert_eq!(summary["ok"], true, "{context}");
    assert_eq!(out.status.code(), Some(0), "{context}");
    assert_eq!(summary["ws"], pinned.as_str(), "{context}");
    assert_eq!(summary["url"], url.as_str(), "{context}");
    // Every frame decoded with the script's own codec, no frame id was
    // reused, and nothing unexpected happened.
    assert_eq!(summary["violations"], json!([]), "{context}");
    assert_eq!(summary["unexpected"], json!([]), "{context}");

    let steps = &summary["steps"];
    // 1. handshake: the gateway's is the first frame (§3, §10).
    let hs = &steps["handshake"];
    assert_eq!(
        hs["first_frame"],
        json!({"kind": "control", "op": "handshake"}),
        "{context}"
    );
    let hello = &hs["received"];
    assert_eq!(hello["protocol"], "sideband", "{context}");
    assert_eq!(hello["version"], "1", "{context}");
    assert!(
        is_hex32(&hello["peerId"]),
        "peerId {}\n{context}",
        hello["peerId"]
    );
    assert_eq!(hello["caps"], json!(["rpc", "encoding/cbor"]), "{context}");
    assert_eq!(hello["metadata"], json!({}), "{context}");
    // No subprotocol offered, none selected.
    assert_eq!(hs["subprotocol"], "", "{context}");
    // A fresh peerId per connection (four handshaken connections).
    let peer_ids = summary["peer_ids"].as_array().expect("peer_ids");
    assert_eq!(peer_ids.len(), 4, "{context}");
    let distinct: std::collections::HashSet<String> =
        peer_ids.iter().map(|p| p.to_string()).collect();
    assert_eq!(distinct.len(), peer_ids.len(), "{context}");

    // 2. echo: `R` on `rpc` with the request's cid, in a frame of its own.
    let echo = &steps["echo"];
    assert!(is_hex32(&echo["cid"]), "{context}");
    assert_eq!(echo["subject"], "rpc", "{context}");
    assert_eq!(echo["frame_id_is_fresh"], true, "{context}");
    assert_eq!(
        echo["reply"],
        json!({"t": "R", "cid": echo["cid"], "result": {"text": "hello", "n": 1, "big": 12345, "nested": {"list": [1, 2.5, null, true]}, "unicode": "héllo ☃"}}),
        "{context}"
    );

    // 3. Ping → Pong.
    assert_eq!(
        steps["ping"]["reply"],
        json!({"kind": "control", "op": "pong"}),
        "{context}"
    );

    // 4. the event is not answered; the next call still is.
    let event = &steps["event"];
    assert_eq!(event["quiet"], json!([]), "{context}");
    assert_eq!(event["reply_after"]["t"], "R", "{context}");
    assert_eq!(
        event["reply_after"]["result"],
        json!({"after": "event"}),
        "{context}"
    );
    assert_eq!(steps["main"]["unread"], json!([]), "{context}");
    // A graceful close (Control Close, then 1000) is answered with 1000.
    assert_eq!(steps["main"]["close"]["code"], 1000, "{context}");

    // 5. malformed frames.
    let malformed = &summary["malformed"];
    // (a) too short: ErrorFrame 1002, then close 1002.
    let short = &malformed["too_short"];
    let frames = short["frames"].as_array().expect("frames");
    assert_eq!(frames.len(), 1, "{context}");
    assert_eq!(
        (
            &frames[0]["kind"],
            &frames[0]["code"],
            &frames[0]["message"]
        ),
        (
            &json!("error"),
            &json!(1002),
            &json!("Invalid frame: too short")
        ),
        "{context}"
    );
    assert!(is_hex32(&frames[0]["id"]), "{context}");
    assert_eq!(short["close"]["code"], 1002, "{context}");
    // (b) invalid subject: non-fatal ErrorFrame 1002 carrying the
    // offending frame's id; the connection stays usable.
    let sub = &malformed["invalid_subject"];
    assert_eq!(
        sub["frames"],
        json!([{"kind": "error", "id": sub["offending_id"], "flags": 0, "ts": null, "code": 1002, "message": "Invalid subject namespace", "details": ""}]),
        "{context}"
    );
    assert_eq!(sub["quiet"], json!([]), "{context}");
    assert_eq!(sub["open_after"], true, "{context}");
    assert_eq!(sub["echo_after"]["t"], "R", "{context}");
    assert_eq!(
        sub["echo_after"]["result"],
        json!({"still": "open"}),
        "{context}"
    );
    // (c) a text frame: close 1003, nothing before it.
    let text = &malformed["text_frame"];
    assert_eq!(text["frames"], json!([]), "{context}");
    assert_eq!(
        text["close"],
        json!({"code": 1003, "reason": "Text frames not supported"}),
        "{context}"
    );
    // (d) a Message before any handshake: the gateway's own handshake (sent
    // at once), ErrorFrame 1000 about that frame, close 1000
    // `negotiation_failed`.
    let first = &malformed["not_handshake_first"];
    let frames = first["frames"].as_array().expect("frames");
    assert_eq!(frames.len(), 2, "{context}");
    assert_eq!(
        frames[0],
        json!({"kind": "control", "op": "handshake"}),
        "{context}"
    );
    assert_eq!(
        (&frames[1]["kind"], &frames[1]["code"], &frames[1]["id"]),
        (&json!("error"), &json!(1000), &first["offending_id"]),
        "{context}"
    );
    assert_eq!(
        first["close"],
        json!({"code": 1000, "reason": "negotiation_failed"}),
        "{context}"
    );

    gateway.shutdown().await;
    daemon.stop().await;
}
