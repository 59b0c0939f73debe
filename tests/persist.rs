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
    stack.attached(1).await;
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

const SUBSCRIBE_BATCH: &str = "rpc.subscribe.persistent.batch";
const ACK_BATCH: &str = "rpc.acknowledge.persistent.batch";
const UNSUBSCRIBE_BATCH: &str = "rpc.unsubscribe.persistent.batch";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgement_errors_name_the_unknown_and_the_never_delivered() {
    let stack = Persist::start().await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    c.open("b").await;
    c.ok("a", SUBSCRIBE, subscribe("s", "events.orders")).await;
    c.publish("b", "orders", json!(1)).await;
    assert_eq!(seqs(&c.notes("a", 1).await), [1]);

    // A sequence never delivered to it: -32602.
    let never = c.call("a", ACK, ack("s", 2)).await;
    assert_error(&never, -32602, "seq 2 (not stored yet)");
    assert_error(&c.call("a", ACK, ack("s", 0)).await, -32602, "seq 0");
    // An unknown id, or one another connection holds: -32003.
    assert_error(&c.call("a", ACK, ack("nobody", 1)).await, -32003, "unknown");
    assert_error(&c.call("b", ACK, ack("s", 1)).await, -32003, "held by a");
    // Malformed params: -32602.
    for (label, params) in [
        ("no sequence_id", json!({"subscription_id": "s"})),
        (
            "string sequence_id",
            json!({"subscription_id": "s", "sequence_id": "1"}),
        ),
        (
            "negative",
            json!({"subscription_id": "s", "sequence_id": -1}),
        ),
        ("no id", json!({"sequence_id": 1})),
        ("array", json!(["s", 1])),
    ] {
        assert_error(&c.call("a", ACK, params).await, -32602, label);
    }
    // The holder's ack still works, and a re-ack is a no-op.
    assert_eq!(
        c.ok("a", ACK, ack("s", 1)).await,
        json!({"acknowledged": true})
    );
    assert_eq!(
        c.ok("a", ACK, ack("s", 1)).await,
        json!({"acknowledged": true})
    );
    c.exit().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_holds_an_id_and_an_id_keeps_its_topic() {
    let stack = Persist::start().await;
    let mut c = Client::start(&stack.url).await;
    for peer in ["a", "b", "pub"] {
        c.open(peer).await;
    }
    c.ok("a", SUBSCRIBE, subscribe("held", "events.orders"))
        .await;
    // Active on another connection: -32005, for either topic.
    let other = c
        .call("b", SUBSCRIBE, subscribe("held", "events.orders"))
        .await;
    assert_error(&other, -32005, "active on a");
    let topic = c
        .call("a", SUBSCRIBE, subscribe("held", "events.p.x"))
        .await;
    assert_error(&topic, -32005, "same id, other topic, same connection");

    for i in 1..=3 {
        c.publish("pub", "orders", json!({"i": i})).await;
    }
    assert_eq!(seqs(&c.notes("a", 3).await), [1, 2, 3]);
    c.ok("a", ACK, ack("held", 1)).await;
    // Repeating it on the holder: a no-op reporting the current position
    // (nothing is sent again: 4 comes next).
    let repeat = c
        .ok("a", SUBSCRIBE, subscribe("held", "events.orders"))
        .await;
    assert_eq!(
        repeat,
        json!({"subscription_id": "held", "topic": "events.orders", "resumed_from_sequence": 1})
    );
    c.publish("pub", "orders", json!({"i": 4})).await;
    assert_eq!(seqs(&c.notes("a", 4).await), [1, 2, 3, 4]);

    // Unsubscribing another connection's id: -32003; it stays.
    let foreign = c
        .call("b", UNSUBSCRIBE, json!({"subscription_id": "held"}))
        .await;
    assert_error(&foreign, -32003, "held by a");

    // Detached, the id keeps its topic: -32005 for another one.
    c.close("a").await;
    stack.attached(0).await;
    let detached = c
        .call("b", SUBSCRIBE, subscribe("held", "events.p.x"))
        .await;
    assert_error(&detached, -32005, "existing id, other topic");
    // Taken over on b: the position was kept (floor 1).
    let taken = c
        .ok("b", SUBSCRIBE, subscribe("held", "events.orders"))
        .await;
    assert_eq!(taken["resumed_from_sequence"], 1);
    assert_eq!(seqs(&c.notes("b", 3).await), [2, 3, 4]);

    // Unsubscribe deletes it, and is idempotent.
    for _ in 0..2 {
        let gone = c
            .ok("b", UNSUBSCRIBE, json!({"subscription_id": "held"}))
            .await;
        assert_eq!(gone, json!({"unsubscribed": true}));
    }
    let never = c
        .ok("b", UNSUBSCRIBE, json!({"subscription_id": "never-was"}))
        .await;
    assert_eq!(never, json!({"unsubscribed": true}));
    // Deleted: subscribing again is a new subscription (after the last
    // sequence, not from the old floor), and another topic is fine now.
    let fresh = c.ok("b", SUBSCRIBE, subscribe("held", "events.p.x")).await;
    assert_eq!(fresh["resumed_from_sequence"], 0);
    c.ok("b", UNSUBSCRIBE, json!({"subscription_id": "held"}))
        .await;
    let again = c
        .ok("b", SUBSCRIBE, subscribe("held", "events.orders"))
        .await;
    assert_eq!(again["resumed_from_sequence"], 4);
    c.exit().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_must_be_concrete_and_persistent() {
    let stack = Persist::start().await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    for (label, topic) in [
        ("star", "events.p.*"),
        ("gt", "events.>"),
        ("invalid", "events..orders"),
        ("empty", ""),
    ] {
        let reply = c.call("a", SUBSCRIBE, subscribe("x", topic)).await;
        assert_error(&reply, -32602, label);
    }
    let plain = c.call("a", SUBSCRIBE, subscribe("x", "events.plain")).await;
    assert_error(&plain, -32602, "not persistent");
    let detail = plain["error"]["data"].as_str().unwrap_or_default();
    assert!(detail.contains("not persistent"), "{detail}");
    for (label, params) in [
        ("empty id", subscribe("", "events.orders")),
        ("long id", subscribe(&"x".repeat(257), "events.orders")),
        ("no topic", json!({"subscription_id": "x"})),
        ("no params", Value::Null),
    ] {
        assert_error(&c.call("a", SUBSCRIBE, params).await, -32602, label);
    }
    // Nothing above created "x".
    let x = c.ok("a", SUBSCRIBE, subscribe("x", "events.p.q")).await;
    assert_eq!(x["resumed_from_sequence"], 0);
    c.exit().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_forms_keep_request_order_and_batch_subscribe_is_atomic() {
    let stack = Persist::start().await;
    let mut c = Client::start(&stack.url).await;
    for peer in ["a", "b", "pub"] {
        c.open(peer).await;
    }
    c.ok("b", SUBSCRIBE, subscribe("b-held", "events.p.b"))
        .await;
    // One invalid item (a wildcard), or one conflict: nothing subscribed.
    let bad = c
        .call(
            "a",
            SUBSCRIBE_BATCH,
            json!({"subscriptions": [subscribe("one", "events.p.one"), subscribe("two", "events.p.*")]}),
        )
        .await;
    assert_error(&bad, -32602, "wildcard item");
    let conflict = c
        .call(
            "a",
            SUBSCRIBE_BATCH,
            json!({"subscriptions": [subscribe("one", "events.p.one"), subscribe("b-held", "events.p.b")]}),
        )
        .await;
    assert_error(&conflict, -32005, "item held by b");
    // "one" was not left subscribed by either: b may take it.
    let one = c.ok("b", SUBSCRIBE, subscribe("one", "events.p.one")).await;
    assert_eq!(one["resumed_from_sequence"], 0);
    c.ok("b", UNSUBSCRIBE, json!({"subscription_id": "one"}))
        .await;

    // Results in request order.
    let batch = c
        .ok(
            "a",
            SUBSCRIBE_BATCH,
            json!({"subscriptions": [subscribe("z", "events.p.z"), subscribe("m", "events.orders")]}),
        )
        .await;
    assert_eq!(
        batch,
        json!({"subscriptions": [
            {"subscription_id": "z", "resumed_from_sequence": 0},
            {"subscription_id": "m", "resumed_from_sequence": 0},
        ]})
    );
    c.publish("pub", "orders", json!(1)).await;
    c.publish("pub", "p.z", json!(2)).await;
    let notes = c.notes("a", 2).await;
    let mut got: Vec<(String, u64)> = notes
        .iter()
        .map(|n| {
            let id = n["subscription_id"].as_str().expect("id").to_owned();
            (id, n["sequence_id"].as_u64().expect("seq"))
        })
        .collect();
    got.sort();
    assert_eq!(got, [("m".to_owned(), 1), ("z".to_owned(), 1)]);

    // Batch acknowledgement: per item.
    let acks = c
        .ok(
            "a",
            ACK_BATCH,
            json!({"acknowledgments": [ack("m", 1), ack("z", 7), ack("nobody", 1), ack("b-held", 1), ack("z", 1), ack("m", 1)]}),
        )
        .await;
    assert_eq!(
        acks,
        json!({"acknowledged": [
            {"subscription_id": "m", "sequence_id": 1, "success": true},
            {"subscription_id": "z", "sequence_id": 7, "success": false},
            {"subscription_id": "nobody", "sequence_id": 1, "success": false},
            {"subscription_id": "b-held", "sequence_id": 1, "success": false},
            {"subscription_id": "z", "sequence_id": 1, "success": true},
            {"subscription_id": "m", "sequence_id": 1, "success": true},
        ]})
    );
    let malformed = c
        .call(
            "a",
            ACK_BATCH,
            json!({"acknowledgments": [{"subscription_id": "m"}]}),
        )
        .await;
    assert_error(&malformed, -32602, "item without sequence_id");

    // Batch unsubscribe (switchyard's extension): in order; one held by
    // another connection fails it all.
    let foreign = c
        .call(
            "a",
            UNSUBSCRIBE_BATCH,
            json!({"subscription_ids": ["z", "b-held"]}),
        )
        .await;
    assert_error(&foreign, -32003, "b-held is b's");
    let gone = c
        .ok(
            "a",
            UNSUBSCRIBE_BATCH,
            json!({"subscription_ids": ["z", "m", "never"]}),
        )
        .await;
    assert_eq!(gone, json!({"unsubscribed": ["z", "m", "never"]}));
    // Deleted: "m" is new again (after sequence 1).
    let m = c.ok("b", SUBSCRIBE, subscribe("m", "events.orders")).await;
    assert_eq!(m["resumed_from_sequence"], 1);
    c.exit().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_message_is_sent_again_on_the_same_connection() {
    // events.short: ack_timeout_ms = 300.
    let stack = Persist::start().await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    c.open("pub").await;
    c.ok("a", SUBSCRIBE, subscribe("slow", "events.short"))
        .await;
    c.publish("pub", "short", json!({"n": 1})).await;
    let notes = c.notes("a", 2).await;
    assert_eq!(seqs(&notes), [1, 1], "sent again after the ack timeout");
    assert_eq!(notes[0], notes[1], "same sequence id, timestamp and data");
    c.ok("a", ACK, ack("slow", 1)).await;
    // What arrived before the ack's reply (a redelivery queued before the
    // ack was recorded comes first on the connection).
    let before = c.notes("a", 0).await.len();
    // Acknowledged: never sent again. 2's own redelivery comes 300 ms
    // after 2, later than 1's next one would have.
    c.publish("pub", "short", json!({"n": 2})).await;
    let notes = c.notes("a", before + 2).await;
    assert_eq!(seqs(&notes[before..]), [2, 2], "{notes:?}");
    c.ok("a", ACK, ack("slow", 2)).await;
    let redelivered = common::scrape::value(
        &common::scrape::scrape(stack.admin).await,
        "switchyard_persistent_redelivered_total",
        &[("backend", "memory")],
    );
    assert!(redelivered >= 2.0, "redelivered {redelivered}");
    c.exit().await;
    stack.stop().await;
}
