//! Topic pub/sub (jsonrpc-ws.md §7.1–7.2) through an independent client:
//! Node.js with the npm `json-rpc-2.0` package over `ws`
//! (`tests/node/pubsub_client.mjs`), one case of the script per test.
//!
//! The gateway (in process) has a JSON-RPC WebSocket listener `public`
//! routed to the reference JSON-RPC WebSocket daemon as upstream `events`
//! (shared mode, one pooled connection). The script publishes by calling
//! the daemon's `push {"method":M,"params":P}` through the gateway: the
//! daemon sends the notification M on switchyard's shared connection, which
//! switchyard publishes as topic `events.M`. Subscription counts are read
//! from the admin listener's `/metrics` (`switchyard_subscriptions{listener}`)
//! with the Prometheus text parser.
//!
//! The script only records what it saw; every expected value is asserted
//! here. Missing `node`/`npm` is a failure, not a skip.

mod common;

use common::pubsub_node::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards_match_whole_tokens_and_gt_needs_a_token() {
    let (stack, s) = run_case("wildcards").await;
    for peer in ["star", "gt", "mid", "exact", "deep", "all"] {
        assert_eq!(
            s["calls"][format!("subscribe {peer}")],
            ok_subscribed(),
            "{peer}"
        );
    }
    let (created, eu, orders, users, ordersx) = (
        "events.orders.created",
        "events.orders.eu.created",
        "events.orders",
        "events.users.created",
        "events.ordersx.created",
    );
    // `*` is exactly one token.
    assert_eq!(topics(&s, "star"), [created, MARKER]);
    // `>` is one or more trailing tokens: `events.orders.>` does not match
    // `events.orders`.
    assert_eq!(topics(&s, "gt"), [created, eu, MARKER]);
    // `*` in the middle; `ordersx` is another token, not a prefix match.
    assert_eq!(topics(&s, "mid"), [created, users, ordersx, MARKER]);
    assert_eq!(topics(&s, "exact"), [orders, MARKER]);
    // `a.*.>`: at least two tokens after `events`.
    assert_eq!(topics(&s, "deep"), [created, eu, users, ordersx, MARKER]);
    assert_eq!(
        topics(&s, "all"),
        [created, eu, orders, users, ordersx, MARKER]
    );
    // The exact delivery shape, with the concrete topic and the data as
    // published, for a wildcard subscriber.
    let frame: Value =
        serde_json::from_str(s["frames"]["gt"][0].as_str().expect("a frame")).expect("JSON frame");
    assert_eq!(
        frame,
        json!({"jsonrpc": "2.0", "method": "rpc.notification", "params": {
            "topic": created,
            "data": {"i": 1, "text": "héllo ☃", "list": [1, 2.5, null, true]},
        }}),
    );
    let data: Vec<&Value> = s["notes"]["all"]
        .as_array()
        .expect("notes")
        .iter()
        .map(|n| &n["data"]["i"])
        .collect();
    assert_eq!(
        data[..5],
        [&json!(1), &json!(2), &json!(3), &json!(4), &json!(5)]
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_topics_and_params_get_invalid_params_with_a_detail() {
    let (stack, s) = run_case("invalid").await;
    for label in [
        "empty",
        "empty token",
        "leading dot",
        "trailing dot",
        "partial star",
        "partial star after",
        "partial gt",
        "gt not last",
        "gt first",
        "257 bytes",
        "258 UTF-8 bytes",
    ] {
        assert_invalid_params(&s, &format!("invalid {label}"));
    }
    for label in [
        "params number",
        "params missing topic",
        "params absent",
        "params array",
        "unsubscribe invalid",
        "batch topics string",
        "batch topic number",
        "batch missing topics",
        "unsubscribe batch invalid",
    ] {
        assert_invalid_params(&s, label);
    }
    for label in [
        "star then gt",
        "star",
        "gt",
        "plain",
        "256 bytes",
        "256 UTF-8 bytes",
    ] {
        assert_eq!(
            s["calls"][format!("valid {label}")],
            ok_subscribed(),
            "{label}"
        );
    }
    assert_eq!(s["calls"]["unsubscribe valid"], ok_unsubscribed());
    // Nothing was published, so nothing arrived.
    assert_eq!(topics(&s, "p"), Vec::<String>::new());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_twice_is_a_no_op_and_unsubscribe_is_idempotent() {
    let (stack, s) = run_case("idempotence").await;
    assert_eq!(s["calls"]["subscribe 1"], ok_subscribed());
    assert_eq!(s["calls"]["subscribe 2"], ok_subscribed());
    for label in [
        "unsubscribe 1",
        "unsubscribe 2",
        "unsubscribe never",
        "unsubscribe concrete",
        "unsubscribe wildcard",
    ] {
        assert_eq!(s["calls"][label], ok_unsubscribed(), "{label}");
    }
    assert_eq!(s["calls"]["subscribe wildcard"], ok_subscribed());
    // Subscribed twice: delivered once, and one unsubscribe ends it.
    // Unsubscribing `events.y.z` leaves the pattern `events.y.*` in place.
    assert_eq!(
        topics(&s, "a"),
        ["events.x", MARKER, MARKER, "events.y.z", MARKER, MARKER]
    );
    let notes = s["notes"]["a"].as_array().expect("notes");
    assert_eq!(notes[0]["data"], json!({"i": 1}));
    assert_eq!(notes[3]["data"], json!({"i": 3}));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_results_keep_request_order_and_batches_are_atomic() {
    let (stack, s) = run_case("batch").await;
    assert_eq!(
        s["calls"]["subscribe batch"],
        json!({"result": {"subscribed": ["events.b3", "events.b1", "events.b2.*", MARKER]}})
    );
    assert_eq!(
        s["calls"]["unsubscribe batch"],
        json!({"result": {"unsubscribed": ["events.b3", "events.b1"]}})
    );
    assert_invalid_params(&s, "subscribe batch invalid");
    assert_invalid_params(&s, "unsubscribe batch invalid");
    assert_eq!(
        topics(&s, "a"),
        [
            // Subscribed by the batch.
            "events.b1",
            "events.b2.x",
            "events.b3",
            MARKER,
            // b1 and b3 unsubscribed by the batch; b2.* kept.
            "events.b2.y",
            MARKER,
            // The failed subscribe batch added neither c1 nor c2; the failed
            // unsubscribe batch left b2.* in place.
            "events.b2.z",
            MARKER,
        ]
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reaches_a_connection_once_however_many_patterns_match() {
    let (stack, s) = run_case("once").await;
    for label in [
        "a events.o.created",
        "a events.o.*",
        "a events.*.created",
        "a events.>",
        "b events.o.created",
        "b events.>",
    ] {
        assert_eq!(s["calls"][label], ok_subscribed(), "{label}");
    }
    assert_eq!(topics(&s, "a"), ["events.o.created", MARKER]);
    assert_eq!(topics(&s, "b"), ["events.o.created", MARKER]);
    assert_eq!(s["notes"]["a"][0]["data"], json!({"once": true}));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_go_with_their_connection() {
    let stack = PubSub::start().await;
    assert_eq!(stack.subscriptions().await, 0.0);
    let mut script = Script::start(&stack.url, "cleanup").await;
    // a: k1 (twice: one subscription) and k2.*; b: k3, k4, k5.
    script.checkpoint("subscribed").await;
    assert_eq!(stack.subscriptions().await, 5.0);
    script.resume().await;
    // a closed with a close frame: its two go.
    script.checkpoint("a closed").await;
    assert_eq!(stack.settle(3.0).await, 3.0);
    script.resume().await;
    script.checkpoint("b unsubscribed").await;
    assert_eq!(stack.subscriptions().await, 2.0);
    script.resume().await;
    // b dropped without a close frame: the rest go.
    script.checkpoint("b gone").await;
    assert_eq!(stack.settle(0.0).await, 0.0);
    script.resume().await;
    let s = script.summary().await;
    assert_eq!(s["calls"]["a k1"], ok_subscribed());
    assert_eq!(s["calls"]["a k1 again"], ok_subscribed());
    assert_eq!(s["calls"]["a k2"], ok_subscribed());
    assert_eq!(
        s["calls"]["b batch"],
        json!({"result": {"subscribed": ["events.k3", "events.k4", "events.k5"]}})
    );
    assert_eq!(s["calls"]["b unsubscribe"], ok_unsubscribed());
    assert_eq!(s["closes"]["a"]["code"], 1000, "{s:#}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_holds_at_most_1000_subscriptions() {
    let stack = PubSub::start().await;
    let mut script = Script::start(&stack.url, "cap").await;
    script.checkpoint("full").await;
    assert_eq!(stack.subscriptions().await, 1000.0);
    script.resume().await;
    let s = script.summary().await;
    assert_eq!(
        s["calls"]["batch 998"],
        json!({"count": 998, "in_order": true, "error": null})
    );
    // 998 + 3 > 1,000: refused whole, nothing subscribed.
    assert_resource_exhausted(&s, "batch over cap");
    assert_eq!(
        s["calls"]["batch to cap"],
        json!({"result": {"subscribed": ["events.cap.998", MARKER]}})
    );
    assert_resource_exhausted(&s, "one past cap");
    // An existing pattern is still a no-op at the cap.
    assert_eq!(s["calls"]["existing at cap"], ok_subscribed());
    assert_eq!(s["calls"]["unsubscribe one"], ok_unsubscribed());
    assert_eq!(s["calls"]["room again"], ok_subscribed());
    // cap.999 (only in the refused batch) and cap.1001 (refused at the
    // cap) were not delivered; cap.998 was; cap.1001 after making room was.
    assert_eq!(
        topics(&s, "a"),
        ["events.cap.998", MARKER, "events.cap.1001", MARKER]
    );
    // The script's connections are gone: so are their subscriptions.
    assert_eq!(stack.settle(0.0).await, 0.0);
    stack.stop().await;
}
