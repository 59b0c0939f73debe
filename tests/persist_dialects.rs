//! Persistent subscriptions in every client dialect (jsonrpc-ws.md §7.3
//! delivered as pub/sub events are; router/persistent.rs): the methods
//! answered in the client's dialect, the delivery form, and an ack round
//! trip: acknowledged messages are not sent again when the subscription
//! resumes on a new connection, unacknowledged ones are.
//!
//! - holon-rpc: a server request `rpc.notification.persistent` with an
//!   `s<N>` id (the client answers it);
//! - Sideband (JSON v1 and CBOR v2): an `N` envelope on `event`, `e` =
//!   `rpc.notification.persistent`, `d` = the params object;
//! - NDJSON: the JSON-RPC notification, one line.
//!
//! Events are published by a JSON-RPC client calling the daemon's `push`
//! (see `common::persist_node`).

mod common;

use common::clients::{Speak, TestClient};
use common::persist_node::Persist;
use common::scrape::wait_value;
use serde_json::{json, Value};
use std::time::Duration;

const LISTENERS: &str = r#"
[listeners.holon]
dialect = "holon-rpc"
address = "127.0.0.1:0"
path = "/holon"

[listeners.sb]
dialect = "sideband"
address = "127.0.0.1:0"
path = "/sb"

[listeners.local]
dialect = "ndjson"
socket = "{dir}/gw.sock"
"#;

const NOTIFICATION: &str = "rpc.notification.persistent";

/// One client and the deliveries it has seen.
struct Peer {
    c: TestClient,
    speak: Speak,
    next_id: u64,
    deliveries: Vec<Value>,
}

impl Peer {
    async fn connect(speak: Speak, endpoint: &str) -> Peer {
        Peer {
            c: TestClient::connect(speak, endpoint).await,
            speak,
            next_id: 1,
            deliveries: Vec::new(),
        }
    }

    /// Calls `method`; returns the reply (deliveries meanwhile are kept).
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = format!("c{}", self.next_id);
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.c.send(&request.to_string()).await;
        loop {
            let msg = self.read().await;
            if msg["id"] == id && msg.get("method").is_none() {
                return msg;
            }
        }
    }

    /// Reads until `n` deliveries were seen in all.
    async fn deliveries(&mut self, n: usize) -> Vec<Value> {
        while self.deliveries.len() < n {
            let msg = self.read().await;
            assert!(msg.get("method").is_none(), "unexpected: {msg}");
        }
        self.deliveries.clone()
    }

    /// The next message; a delivery is checked for its dialect's form,
    /// answered (holon-rpc) and kept.
    async fn read(&mut self) -> Value {
        let text = self.c.recv().await;
        let msg: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        if msg["method"] != NOTIFICATION {
            return msg;
        }
        match self.speak {
            Speak::Holon => {
                let id = msg["id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("an s<N> id: {msg}"));
                assert!(id.starts_with('s'), "{msg}");
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": {}});
                self.c.send(&answer.to_string()).await;
            }
            // Sideband: an `N` envelope (rendered without an id by the
            // test client, which checked the subject is `event`).
            _ => assert!(msg.get("id").is_none(), "a notification: {msg}"),
        }
        self.deliveries.push(msg["params"].clone());
        json!({"delivery": true})
    }
}

async fn round_trip(speak: Speak) {
    let stack = Persist::start_with(LISTENERS, "").await;
    let endpoint = match speak {
        Speak::Holon => &stack.urls["holon"],
        Speak::SidebandJson | Speak::SidebandCbor => &stack.urls["sb"],
        Speak::Ndjson => &stack.urls["local"],
        Speak::JsonRpc => &stack.url,
        Speak::Http => panic!("an HTTP client holds no subscription connection"),
    }
    .clone();
    let mut publisher = Peer::connect(Speak::JsonRpc, &stack.url).await;
    let mut a = Peer::connect(speak, &endpoint).await;
    let id = format!("{speak:?}");
    let topic = "events.p.dialect";
    let sub = json!({"subscription_id": id, "topic": topic});
    let reply = a.call("rpc.subscribe.persistent", sub.clone()).await;
    assert_eq!(
        reply["result"],
        json!({"subscription_id": id, "topic": topic, "resumed_from_sequence": 0}),
        "{reply}"
    );
    for n in 1..=2 {
        let push = json!({"method": "p.dialect", "params": {"n": n}});
        let pushed = publisher.call("push", push).await;
        assert_eq!(pushed["result"], json!({"pushed": true}), "{pushed}");
    }
    let got = a.deliveries(2).await;
    for (i, params) in got.iter().enumerate() {
        assert_eq!(params["subscription_id"], id.as_str());
        assert_eq!(params["topic"], topic);
        assert_eq!(params["sequence_id"], i + 1);
        assert_eq!(params["data"], json!({"n": i + 1}));
        assert!(params["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')));
    }
    let acked = a
        .call(
            "rpc.acknowledge.persistent",
            json!({"subscription_id": id, "sequence_id": 1}),
        )
        .await;
    assert_eq!(acked["result"], json!({"acknowledged": true}), "{acked}");
    // An error in the dialect's own form: another connection cannot ack.
    let mut b = Peer::connect(speak, &endpoint).await;
    let refused = b
        .call(
            "rpc.acknowledge.persistent",
            json!({"subscription_id": id, "sequence_id": 2}),
        )
        .await;
    let code = refused["error"]["code"].as_i64();
    let want = match speak {
        Speak::Holon => 5,
        Speak::SidebandJson | Speak::SidebandCbor => 2000,
        _ => -32003,
    };
    assert_eq!(code, Some(want), "{refused}");
    // Resumed on another connection: 1 was acknowledged, 2 comes again.
    drop(a);
    // Until the gateway sees the first connection close, b would get
    // -32005: wait for the subscription to detach.
    let attached = wait_value(
        stack.admin,
        "switchyard_persistent_subscriptions_attached",
        &[("backend", "memory")],
        0.0,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(attached, 0.0);
    let resumed = b.call("rpc.subscribe.persistent", sub.clone()).await;
    assert_eq!(resumed["result"]["resumed_from_sequence"], 1, "{resumed}");
    let again = b.deliveries(1).await;
    assert_eq!(again[0], got[1], "2 again, exactly");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holon_rpc_clients_get_s_requests() {
    round_trip(Speak::Holon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sideband_json_clients_get_n_envelopes() {
    round_trip(Speak::SidebandJson).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sideband_cbor_clients_get_n_envelopes() {
    round_trip(Speak::SidebandCbor).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ndjson_clients_get_notification_lines() {
    round_trip(Speak::Ndjson).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holon_deliveries_wait_for_the_push_window_instead_of_dropping() {
    let listeners = r#"
[listeners.holon]
dialect = "holon-rpc"
address = "127.0.0.1:0"
path = "/holon"
max_unanswered_pushes = 2
"#;
    let stack = Persist::start_with(listeners, "").await;
    let mut publisher = Peer::connect(Speak::JsonRpc, &stack.url).await;
    let mut c = TestClient::connect(Speak::Holon, &stack.urls["holon"]).await;
    let sub = json!({"jsonrpc": "2.0", "id": "sub", "method": "rpc.subscribe.persistent",
        "params": {"subscription_id": "w", "topic": "events.p.window"}});
    c.send(&sub.to_string()).await;
    let reply: Value = serde_json::from_str(&c.recv().await).expect("JSON");
    assert_eq!(reply["result"]["resumed_from_sequence"], 0, "{reply}");
    for n in 1..=6 {
        let push = json!({"method": "p.window", "params": {"n": n}});
        let pushed = publisher.call("push", push).await;
        assert_eq!(pushed["result"], json!({"pushed": true}), "{pushed}");
    }
    // Two at a time: each pair answered lets the next pair through.
    let mut seen = Vec::new();
    while seen.len() < 6 {
        let mut pending = Vec::new();
        for _ in 0..2 {
            let msg: Value = serde_json::from_str(&c.recv().await).expect("JSON");
            assert_eq!(msg["method"], NOTIFICATION, "{msg}");
            seen.push(msg["params"]["sequence_id"].as_u64().expect("seq"));
            pending.push(msg["id"].as_str().expect("s<N>").to_owned());
        }
        // Every event is stored and due, but a third push waits for an
        // answer: nothing more comes while these two are unanswered.
        c.silence(Duration::from_millis(500)).await;
        for id in pending {
            c.send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string())
                .await;
        }
    }
    assert_eq!(seen, [1, 2, 3, 4, 5, 6], "none dropped, in order");
    let dropped = common::scrape::value(
        &common::scrape::scrape(stack.admin).await,
        "switchyard_dropped_messages_total",
        &[("dialect", "holon-rpc"), ("reason", "push_window")],
    );
    assert_eq!(dropped, 0.0);
    stack.stop().await;
}
