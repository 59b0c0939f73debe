//! A streaming feed whose topic is persistent: the reference NDJSON
//! daemon's `Subscribe` stream, configured as the feed `daemon.events`
//! and listed in `[[persistent_topics]]`, is open with nobody subscribed
//! (its events are stored for subscriptions that are not connected), and a
//! subscription that resumes gets every retained event it did not
//! acknowledge, in order, without a gap.

mod common;

use std::time::Duration;

use common::clients::{Speak, TestClient};
use common::scrape::{wait_above, wait_value};
use common::{eventually, wait_connected};
use serde_json::{json, Value};
use switchyard::daemon::{Daemon, DaemonOptions};

const SETTLE: Duration = Duration::from_secs(30);

/// The daemon's event sequence number in a delivery's params.
fn daemon_seq(params: &Value) -> u64 {
    params["data"]["event"]["data"]["seq"]
        .as_u64()
        .unwrap_or_else(|| panic!("no daemon seq: {params}"))
}

/// The next persistent delivery's params (replies are not expected).
async fn delivery(c: &mut TestClient) -> Value {
    let msg: Value = serde_json::from_str(&c.recv().await).expect("JSON");
    assert_eq!(msg["method"], "rpc.notification.persistent", "{msg}");
    msg["params"].clone()
}

/// `rpc.subscribe.persistent`: its reply is the first frame, before any
/// delivery, even when retained messages are ready at once.
async fn subscribe(c: &mut TestClient, id: u64, params: Value) -> Value {
    let req =
        json!({"jsonrpc": "2.0", "id": id, "method": "rpc.subscribe.persistent", "params": params});
    c.send(&req.to_string()).await;
    let msg: Value = serde_json::from_str(&c.recv().await).expect("JSON");
    assert_eq!(msg["id"], id, "the reply comes before any delivery: {msg}");
    msg
}

/// A call whose reply may come after deliveries (which are passed over).
async fn call(c: &mut TestClient, id: u64, method: &str, params: Value) -> Value {
    let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    c.send(&req.to_string()).await;
    loop {
        let msg: Value = serde_json::from_str(&c.recv().await).expect("JSON");
        if msg["id"] == id {
            return msg;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_feed_is_stored_while_nobody_listens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let daemon = Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    let toml = format!(
        r#"
[admin]
address = "127.0.0.1:0"

[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"

[upstreams.daemon]
dialect = "ndjson"
socket = "{}"
backoff_initial_ms = 50
backoff_max_ms = 200

[[upstreams.daemon.feeds]]
method = "Subscribe"
params = {{ interval_ms = 10 }}
topic = "daemon.events"

[[routes]]
listener = "public"
upstream = "daemon"

[[persistent_topics]]
topic = "daemon.events"
max_count = 10000
"#,
        socket.display()
    );
    let cfg = switchyard::config::Config::from_toml(&toml).expect("config");
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let admin = bound.admin_addr().expect("admin");
    let gateway = bound.spawn();
    wait_connected(&gateway, "daemon").await;

    // Nobody subscribes, yet the feed opens and its events are stored.
    let opened = eventually(SETTLE, || daemon.subscribe_streams().open == 1).await;
    assert!(opened, "{:?}", daemon.subscribe_streams());
    let stored = wait_above(
        admin,
        "switchyard_persistent_stored_messages",
        &[("backend", "memory")],
        2.0,
        SETTLE,
    )
    .await;
    assert!(stored > 2.0, "stored {stored}");

    // A subscriber takes some, acknowledges the first two, and leaves.
    let mut c = TestClient::connect(Speak::JsonRpc, &url).await;
    let sub = json!({"subscription_id": "feed", "topic": "daemon.events"});
    let reply = subscribe(&mut c, 1, sub.clone()).await;
    let start = reply["result"]["resumed_from_sequence"]
        .as_u64()
        .unwrap_or_else(|| panic!("{reply}"));
    assert!(start >= 3, "starts after what was stored: {reply}");
    let first: Vec<Value> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(delivery(&mut c).await);
        }
        v
    };
    let seqs: Vec<u64> = first
        .iter()
        .map(|p| p["sequence_id"].as_u64().expect("seq"))
        .collect();
    assert_eq!(seqs, [start + 1, start + 2, start + 3, start + 4]);
    for (i, seq) in seqs[..2].iter().enumerate() {
        let ack = json!({"subscription_id": "feed", "sequence_id": seq});
        let id = 10 + i as u64;
        let acked = call(&mut c, id, "rpc.acknowledge.persistent", ack).await;
        assert_eq!(acked["result"], json!({"acknowledged": true}), "{acked}");
    }
    drop(c);

    // Resumed: from the second ack, the unacknowledged ones in order, then
    // what was stored while away: consecutive, no gap.
    // Until the gateway has seen the first connection go, the id is held
    // (-32005): wait for it to detach.
    let attached = wait_value(
        admin,
        "switchyard_persistent_subscriptions_attached",
        &[("backend", "memory")],
        0.0,
        SETTLE,
    )
    .await;
    assert_eq!(attached, 0.0);
    let mut c = TestClient::connect(Speak::JsonRpc, &url).await;
    let again = subscribe(&mut c, 2, sub.clone()).await;
    assert_eq!(again["result"]["resumed_from_sequence"], start + 2);
    let resumed: Vec<Value> = {
        let mut v = Vec::new();
        for _ in 0..6 {
            v.push(delivery(&mut c).await);
        }
        v
    };
    assert_eq!(resumed[0], first[2], "3rd, exactly as first delivered");
    assert_eq!(resumed[1], first[3]);
    for pair in resumed.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert_eq!(
            b["sequence_id"].as_u64(),
            a["sequence_id"].as_u64().map(|s| s + 1)
        );
        assert_eq!(daemon_seq(b), daemon_seq(a) + 1, "no gap in the feed");
    }
    gateway.shutdown().await;
    daemon.stop().await;
}
