//! Persistent subscriptions (jsonrpc-ws.md §7.3) through an independent
//! client: Node.js with the npm `json-rpc-2.0` package over `ws`
//! (`tests/node/persist_client.mjs`), driven command by command.
//!
//! The gateway (in process, memory backend) has a JSON-RPC WebSocket
//! listener `public` routed to the reference JSON-RPC WebSocket daemon as
//! upstream `events`; a client publishes by calling the daemon's
//! `push {"method":M,"params":P}` through the gateway, which publishes the
//! notification as topic `events.M`, stored when it matches a
//! `[[persistent_topics]]` entry (see `common::persist_node::TOPICS`).
//!
//! Waiting is on events: a subscriber's notifications, a reply. Where a
//! test must show that something is NOT delivered, it publishes a later
//! message and waits for it: a subscription's deliveries are in order, so
//! an unwanted one would have come first.

mod common;

use common::persist_node::*;
use serde_json::{json, Value};

const SUBSCRIBE: &str = "rpc.subscribe.persistent";
const ACK: &str = "rpc.acknowledge.persistent";
const UNSUBSCRIBE: &str = "rpc.unsubscribe.persistent";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_deliver_ack_and_resume_with_the_exact_shapes() {
    let stack = Persist::start().await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    c.open("pub").await;

    // A new subscription on an empty topic starts at 0.
    let first = c
        .ok("a", SUBSCRIBE, subscribe("proc-1", "events.orders"))
        .await;
    assert_eq!(
        first,
        json!({"subscription_id": "proc-1", "topic": "events.orders", "resumed_from_sequence": 0})
    );
    for i in 1..=4 {
        c.publish("pub", "orders", json!({"order": i, "text": "héllo ☃"}))
            .await;
    }
    let notes = c.notes("a", 4).await;
    // Sequences from 1 per topic, in order, with the data as published.
    assert_eq!(seqs(&notes), [1, 2, 3, 4]);
    for (i, note) in notes.iter().enumerate() {
        assert_eq!(note["subscription_id"], "proc-1");
        assert_eq!(note["topic"], "events.orders");
        assert_eq!(note["data"], json!({"order": i + 1, "text": "héllo ☃"}));
        assert_timestamp(&note["timestamp"]);
    }
    // The exact frame.
    let frame: Value = serde_json::from_str(&c.frames("a", 4).await[0]).expect("a JSON frame");
    assert_eq!(frame["jsonrpc"], "2.0");
    assert_eq!(frame["method"], "rpc.notification.persistent");
    assert!(frame.get("id").is_none(), "a notification: {frame}");
    assert_eq!(
        frame["params"]
            .as_object()
            .expect("params")
            .keys()
            .collect::<Vec<_>>(),
        [
            "data",
            "sequence_id",
            "subscription_id",
            "timestamp",
            "topic"
        ]
    );

    // Per-message acks: 1, 2 and 4; re-ack is a no-op, still true.
    for seq in [1, 2, 4, 4] {
        let acked = c.ok("a", ACK, ack("proc-1", seq)).await;
        assert_eq!(acked, json!({"acknowledged": true}));
    }

    // Another subscription starts after the topic's last sequence.
    c.open("b").await;
    let later = c
        .ok("b", SUBSCRIBE, subscribe("proc-2", "events.orders"))
        .await;
    assert_eq!(later["resumed_from_sequence"], 4);

    // proc-1's connection closes: the subscription detaches and keeps its
    // position.
    c.close("a").await;
    c.publish("pub", "orders", json!({"order": 5})).await;
    assert_eq!(
        seqs(&c.notes("b", 1).await),
        [5],
        "proc-2 gets the live one"
    );

    // Resumed: every message ≤ 2 acknowledged; then 3 (unacked) and 5
    // (stored while detached), with their original sequence ids and
    // timestamps; 4 (acked) is not sent again.
    c.open("a2").await;
    let resumed = c
        .ok("a2", SUBSCRIBE, subscribe("proc-1", "events.orders"))
        .await;
    assert_eq!(
        resumed,
        json!({"subscription_id": "proc-1", "topic": "events.orders", "resumed_from_sequence": 2})
    );
    let again = c.notes("a2", 2).await;
    assert_eq!(seqs(&again), [3, 5]);
    assert_eq!(again[0], notes[2], "message 3 exactly as first delivered");
    c.publish("pub", "orders", json!({"order": 6})).await;
    assert_eq!(seqs(&c.notes("a2", 3).await), [3, 5, 6], "then live ones");

    let gone = c
        .ok("a2", UNSUBSCRIBE, json!({"subscription_id": "proc-1"}))
        .await;
    assert_eq!(gone, json!({"unsubscribed": true}));
    c.exit().await;
    stack.stop().await;
}

/// RFC 3339 UTC with milliseconds: `2025-12-26T12:00:00.000Z`.
fn assert_timestamp(value: &Value) {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("timestamp {value}"));
    assert_eq!(text.len(), 24, "{text}");
    assert!(text.ends_with('Z'), "{text}");
    assert_eq!(&text[19..20], ".", "{text}");
    humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
}
