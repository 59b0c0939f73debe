//! Retention of persistent topics (jsonrpc-ws.md §7.3): `max_count`,
//! `max_bytes` and `max_age_seconds` (see `common::persist_node::TOPICS`),
//! each evicting the oldest messages, with what a subscription had not
//! acknowledged counted in `switchyard_persistent_evicted_unacked_total`
//! (read from the admin listener's `/metrics` with the Prometheus text
//! parser). Clients: the independent Node `json-rpc-2.0` script.

mod common;

use common::persist_node::*;
use common::scrape::{scrape, value, wait_value};
use serde_json::json;

const SUBSCRIBE: &str = "rpc.subscribe.persistent";
const ACK: &str = "rpc.acknowledge.persistent";
const EVICTED: &str = "switchyard_persistent_evicted_unacked_total";
const STORED: &str = "switchyard_persistent_stored_messages";
const MEMORY: [(&str, &str); 1] = [("backend", "memory")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_count_keeps_the_newest_and_counts_what_was_not_acknowledged() {
    // events.count: max_count = 3.
    let stack = Persist::start().await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    c.open("pub").await;
    c.ok("a", SUBSCRIBE, subscribe("keeper", "events.count"))
        .await;
    c.ok("a", SUBSCRIBE, subscribe("acker", "events.count"))
        .await;
    // Each is delivered to both before the next is published (and evicts).
    for i in 1..=5 {
        c.publish("pub", "count", json!({"i": i})).await;
        c.notes("a", 2 * i).await;
    }
    let notes = c.notes("a", 10).await;
    let of = |id: &str| -> Vec<u64> {
        let mine: Vec<_> = notes
            .iter()
            .filter(|n| n["subscription_id"] == id)
            .cloned()
            .collect();
        seqs(&mine)
    };
    assert_eq!(of("keeper"), [1, 2, 3, 4, 5]);
    assert_eq!(of("acker"), [1, 2, 3, 4, 5]);
    // 1 and 2 were evicted. "acker" acknowledges 1 … too late: the
    // evictions happened when 4 and 5 were stored, so 2 for each.
    let evicted = wait_value(stack.admin, EVICTED, &MEMORY, 4.0, SETTLE).await;
    assert_eq!(evicted, 4.0);
    assert_eq!(value(&scrape(stack.admin).await, STORED, &MEMORY), 3.0);
    c.ok("a", ACK, ack("acker", 5)).await;

    // Resumed, "keeper" reports the floor moved over what is gone, and
    // gets what is retained.
    c.close("a").await;
    stack.attached(0).await;
    c.open("a2").await;
    let resumed = c
        .ok("a2", SUBSCRIBE, subscribe("keeper", "events.count"))
        .await;
    assert_eq!(resumed["resumed_from_sequence"], 2);
    assert_eq!(seqs(&c.notes("a2", 3).await), [3, 4, 5]);
    // "acker" acknowledged 5 only: 3 and 4 are still owed.
    let acker = c
        .ok("a2", SUBSCRIBE, subscribe("acker", "events.count"))
        .await;
    assert_eq!(acker["resumed_from_sequence"], 2);
    c.exit().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_bytes_evicts_the_oldest_until_the_data_fits() {
    // events.bytes: max_bytes = 40; each datum here is 15 bytes of JSON
    // text ("0123456789abc" with its quotes), so two fit.
    let stack = Persist::start().await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    c.open("pub").await;
    c.ok("a", SUBSCRIBE, subscribe("bytes", "events.bytes"))
        .await;
    for n in 1..=4 {
        c.publish("pub", "bytes", json!("0123456789abc")).await;
        c.notes("a", n).await;
    }
    assert_eq!(seqs(&c.notes("a", 4).await), [1, 2, 3, 4]);
    let evicted = wait_value(stack.admin, EVICTED, &MEMORY, 2.0, SETTLE).await;
    assert_eq!(evicted, 2.0);
    let metrics = scrape(stack.admin).await;
    assert_eq!(value(&metrics, STORED, &MEMORY), 2.0);
    assert_eq!(
        value(&metrics, "switchyard_persistent_stored_bytes", &MEMORY),
        30.0
    );
    c.close("a").await;
    stack.attached(0).await;
    c.open("a2").await;
    let resumed = c
        .ok("a2", SUBSCRIBE, subscribe("bytes", "events.bytes"))
        .await;
    assert_eq!(resumed["resumed_from_sequence"], 2);
    assert_eq!(seqs(&c.notes("a2", 2).await), [3, 4]);
    c.exit().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_age_evicts_old_messages_by_a_periodic_sweep() {
    // events.age: max_age_seconds = 1.
    let stack = Persist::start().await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    c.open("pub").await;
    c.ok("a", SUBSCRIBE, subscribe("aged", "events.age")).await;
    c.publish("pub", "age", json!(1)).await;
    c.publish("pub", "age", json!(2)).await;
    assert_eq!(seqs(&c.notes("a", 2).await), [1, 2]);
    c.ok("a", ACK, ack("aged", 1)).await;
    // Nothing is published after them: the sweep (every second) evicts
    // them once a second old; 2 was not acknowledged.
    let stored = wait_value(stack.admin, STORED, &MEMORY, 0.0, SETTLE).await;
    assert_eq!(stored, 0.0);
    assert_eq!(value(&scrape(stack.admin).await, EVICTED, &MEMORY), 1.0);
    c.close("a").await;
    stack.attached(0).await;
    c.open("a2").await;
    let resumed = c.ok("a2", SUBSCRIBE, subscribe("aged", "events.age")).await;
    assert_eq!(resumed["resumed_from_sequence"], 2, "2 is gone");
    // Nothing is owed: the next delivery is the next message.
    c.publish("pub", "age", json!(3)).await;
    assert_eq!(seqs(&c.notes("a2", 1).await), [3]);
    c.exit().await;
    stack.stop().await;
}
