//! A persistent subscriber that does not read: its deliveries wait for
//! room in its outbox (4 messages here) instead of being dropped as pub/sub
//! events are; once it reads, every message arrives, in order, none lost.
//! The socket buffers are filled first (600 messages of 32 KiB, 19 MiB,
//! more than loopback TCP buffers hold), so the outbox really is full
//! while the subscriber does not read.

mod common;

use std::time::Duration;

use common::persist_node::Persist;
use common::scrape::{scrape, value, wait_value};
use common::{connect, recv, send};
use serde_json::{json, Value};

const LISTENERS: &str = r#"
[listeners.slow]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/slow"
outbox_capacity = 4
slow_consumer_timeout_ms = 60000
"#;

const MESSAGES: u64 = 600;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_does_not_read_loses_nothing() {
    let stack = Persist::start_with(LISTENERS, "").await;
    let mut slow = connect(&stack.urls["slow"]).await;
    let sub = json!({"jsonrpc": "2.0", "id": "s", "method": "rpc.subscribe.persistent",
        "params": {"subscription_id": "slow", "topic": "events.orders"}});
    send(&mut slow, &sub.to_string()).await;
    let reply: Value = serde_json::from_str(&recv(&mut slow).await).expect("JSON");
    assert_eq!(reply["result"]["resumed_from_sequence"], 0, "{reply}");

    // Published while the subscriber reads nothing.
    let mut publisher = connect(&stack.url).await;
    let pad = "x".repeat(32 * 1024);
    for i in 1..=MESSAGES {
        let push = json!({"jsonrpc": "2.0", "id": i, "method": "push",
            "params": {"method": "orders", "params": {"i": i, "pad": pad}}});
        send(&mut publisher, &push.to_string()).await;
        let r: Value = serde_json::from_str(&recv(&mut publisher).await).expect("JSON");
        assert_eq!(r["result"], json!({"pushed": true}), "{r}");
    }
    // The outbox filled up: the most messages ever queued is its capacity.
    let high = wait_value(
        stack.admin,
        "switchyard_outbox_high_water",
        &[("listener", "slow")],
        4.0,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(high, 4.0, "the outbox filled");

    // Now it reads: all of them, in order.
    for want in 1..=MESSAGES {
        let text = tokio::time::timeout(Duration::from_secs(30), recv(&mut slow))
            .await
            .expect("a delivery");
        let msg: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(msg["method"], "rpc.notification.persistent", "{msg}");
        assert_eq!(msg["params"]["sequence_id"], want, "in order, none lost");
        assert_eq!(msg["params"]["data"]["i"], want);
    }
    let dropped = value(
        &scrape(stack.admin).await,
        "switchyard_events_dropped_total",
        &[("listener", "slow")],
    );
    assert_eq!(dropped, 0.0, "nothing was dropped");
    stack.stop().await;
}
