//! A streaming feed whose topic is persistent: the reference NDJSON
//! daemon's `Subscribe` stream, configured as the feed `daemon.events`
//! and listed in `[[persistent_topics]]`, is open with nobody subscribed
//! (its events are stored for subscriptions that are not connected), and a
//! subscription that resumes gets every retained event it did not
//! acknowledge, in order, without a gap. A feed faster than the embedded
//! store is slowed to the store's pace, never thinned: every event is
//! stored and delivered, and so is every notification of a shared WebSocket
//! upstream faster than the store.

mod common;

use std::time::Duration;

use common::clients::{Speak, TestClient};
use common::scrape::{wait_above, wait_value};
use common::{connect, eventually, metric_value, recv, send, wait_connected, Ws};
use futures_util::StreamExt;
use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::daemon::ws::{WsDaemon, WsDialect};
use switchyard::daemon::{Daemon, DaemonOptions};
use tokio_tungstenite::tungstenite::Message;

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

/// Events in the burst: more than twice what the recorder's queue (4,096)
/// holds.
const BURST: u64 = 10_000;

/// Acknowledged in batches of this many (below the window of 1,024).
const ACK_EVERY: usize = 500;

/// How long the subscriber waits for its next frame: the whole burst is
/// stored with an `fsync` per commit on a busy machine.
const FRAME_WAIT: Duration = Duration::from_secs(60);

/// The next text frame within [`FRAME_WAIT`], or why none came.
async fn next_text(ws: &mut Ws) -> Result<String, String> {
    loop {
        match tokio::time::timeout(FRAME_WAIT, ws.next()).await {
            Err(_) => return Err(format!("nothing within {FRAME_WAIT:?}")),
            Ok(Some(Ok(Message::Text(t)))) => return Ok(t.to_string()),
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
            Ok(other) => return Err(format!("connection ended: {other:?}")),
        }
    }
}

/// The store's counts, for a failure message.
fn counts(gateway: &Running) -> String {
    let labels = [("backend", "embedded")];
    let failed = metric_value(
        gateway,
        "switchyard_persistent_publish_failed_total",
        &labels,
    );
    let stored = metric_value(gateway, "switchyard_persistent_published_total", &labels);
    format!("{failed} not stored, {stored} stored")
}

/// Receives deliveries 1 to `total` of subscription `id` on `ws`, in
/// order (a redelivery of an earlier one passed over), acknowledging them
/// in batches; `check` sees each one's params.
async fn receive_all(ws: &mut Ws, id: &str, total: u64, gateway: &Running, check: impl Fn(&Value)) {
    let mut next = 1u64;
    let mut unacked = Vec::new();
    let mut ack_id = 1000u64;
    while next <= total {
        let text = next_text(ws)
            .await
            .unwrap_or_else(|e| panic!("delivery {next}: {e} ({})", counts(gateway)));
        let msg: Value = serde_json::from_str(&text).expect("JSON");
        if msg["method"] != "rpc.notification.persistent" {
            // The reply to an acknowledgement batch.
            let acked = msg["result"]["acknowledged"]
                .as_array()
                .unwrap_or_else(|| panic!("{msg}"));
            assert!(acked.iter().all(|a| a["success"] == true), "{msg}");
            continue;
        }
        let params = &msg["params"];
        let seq = params["sequence_id"].as_u64().expect("sequence_id");
        if seq < next {
            continue; // sent again after the ack timeout: at least once
        }
        assert_eq!(seq, next, "consecutive sequences ({})", counts(gateway));
        check(params);
        next += 1;
        unacked.push(json!({"subscription_id": id, "sequence_id": seq}));
        if unacked.len() == ACK_EVERY || next > total {
            ack_id += 1;
            let acks = json!({"jsonrpc": "2.0", "id": ack_id,
                "method": "rpc.acknowledge.persistent.batch",
                "params": {"acknowledgments": std::mem::take(&mut unacked)}});
            send(ws, &acks.to_string()).await;
        }
    }
}

/// Nothing was counted as not stored, and `total` messages are stored.
fn assert_stored_all(gateway: &Running, total: u64) {
    let labels = [("backend", "embedded")];
    assert_eq!(
        metric_value(
            gateway,
            "switchyard_persistent_publish_failed_total",
            &labels
        ),
        0.0,
        "nothing counted as not stored"
    );
    assert_eq!(
        metric_value(gateway, "switchyard_persistent_stored_messages", &labels),
        total as f64,
        "every event sent is stored"
    );
}

/// A feed faster than the embedded store commits: the daemon sends
/// `BURST` events back to back, as fast as switchyard reads them. The
/// store falls behind, and switchyard stops reading the feed until it
/// catches up instead of dropping events: every event the daemon sent is
/// stored, in order, under consecutive sequences, and delivered to a
/// persistent subscriber; none is counted as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_faster_than_the_embedded_store_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let toml = format!(
        r#"
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
params = {{ burst = {BURST}, count = {BURST}, interval_ms = 1000 }}
topic = "daemon.events"

[[routes]]
listener = "public"
upstream = "daemon"

[persistence]
backend = "embedded"
path = "{}"

[[persistent_topics]]
topic = "daemon.events"
"#,
        socket.display(),
        dir.path().join("store").display()
    );
    let cfg = switchyard::config::Config::from_toml(&toml).expect("config");
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let gateway = bound.spawn();

    // The subscription exists before the daemon does (the feed keeps
    // trying to open meanwhile), so that every event is for it.
    let mut ws = connect(&url).await;
    let sub = json!({"jsonrpc": "2.0", "id": 1, "method": "rpc.subscribe.persistent",
        "params": {"subscription_id": "all", "topic": "daemon.events"}});
    send(&mut ws, &sub.to_string()).await;
    let reply: Value = serde_json::from_str(&recv(&mut ws).await).expect("JSON");
    assert_eq!(reply["result"]["resumed_from_sequence"], 0, "{reply}");
    let daemon = Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");

    receive_all(&mut ws, "all", BURST, &gateway, |params| {
        let seq = params["sequence_id"].as_u64();
        assert_eq!(
            Some(daemon_seq(params)),
            seq,
            "the daemon's event N is sequence N: none lost before it"
        );
    })
    .await;
    assert_stored_all(&gateway, BURST);
    gateway.shutdown().await;
    daemon.stop().await;
}

/// Notifications of a shared WebSocket upstream faster than the embedded
/// store commits: the reference JSON-RPC server sends `BURST` of them back
/// to back (`push` with `times`, as fast as switchyard reads), then its
/// reply to `push`. switchyard stops reading that connection while the
/// store is behind, so when the reply arrives every notification before it
/// is in the store's hands, none dropped; all are stored and delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_faster_than_the_embedded_store_lose_nothing() {
    let upstream = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::JsonRpc)
        .await
        .expect("json-rpc upstream");
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = format!(
        r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"

[upstreams.events]
dialect = "jsonrpc-ws"
url = "{}"
pool_size = 1

[[routes]]
listener = "public"
upstream = "events"

[persistence]
backend = "embedded"
path = "{}"

[[persistent_topics]]
topic = "events.orders"
"#,
        upstream.url(),
        dir.path().join("store").display()
    );
    let cfg = switchyard::config::Config::from_toml(&toml).expect("config");
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let gateway = bound.spawn();
    wait_connected(&gateway, "events").await;

    let mut subscriber = connect(&url).await;
    let sub = json!({"jsonrpc": "2.0", "id": 1, "method": "rpc.subscribe.persistent",
        "params": {"subscription_id": "all", "topic": "events.orders"}});
    send(&mut subscriber, &sub.to_string()).await;
    let reply: Value = serde_json::from_str(&recv(&mut subscriber).await).expect("JSON");
    assert_eq!(reply["result"]["resumed_from_sequence"], 0, "{reply}");

    let mut publisher = connect(&url).await;
    let push = json!({"jsonrpc": "2.0", "id": 1, "method": "push",
        "params": {"method": "orders", "params": {"order": 1}, "times": BURST}});
    send(&mut publisher, &push.to_string()).await;
    let pushed = next_text(&mut publisher)
        .await
        .unwrap_or_else(|e| panic!("push reply: {e} ({})", counts(&gateway)));
    let pushed: Value = serde_json::from_str(&pushed).expect("JSON");
    assert_eq!(pushed["result"], json!({"pushed": true}), "{pushed}");
    let failed = metric_value(
        &gateway,
        "switchyard_persistent_publish_failed_total",
        &[("backend", "embedded")],
    );
    assert_eq!(failed, 0.0, "none dropped on the way to the store");

    receive_all(&mut subscriber, "all", BURST, &gateway, |params| {
        assert_eq!(params["data"], json!({"order": 1}), "{params}");
    })
    .await;
    assert_stored_all(&gateway, BURST);
    gateway.shutdown().await;
    upstream.stop().await;
}
