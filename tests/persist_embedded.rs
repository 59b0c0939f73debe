//! The embedded store behind the whole gateway (in process), with the
//! independent Node `json-rpc-2.0` client of tests/persist.rs: a
//! subscription, its messages, acknowledgements and the topic's sequence
//! survive a restart of switchyard on the same `persistence.path`; a
//! second switchyard on a path in use is refused before it binds; the
//! store metrics carry `backend="embedded"`; a store whose writes fail (a
//! full disk, injected through the store file's `WriteFaults` seam) makes
//! the gateway not ready, answers -32009 without changing anything, and
//! serves again once writes succeed. (The `kill -9` case is
//! tests/persist_crash.rs.)

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::persist_node::*;
use common::scrape::{scrape, value};
use serde_json::json;
use switchyard::persist::local::embedded::WriteFaults;

const SUBSCRIBE: &str = "rpc.subscribe.persistent";
const ACK: &str = "rpc.acknowledge.persistent";

fn embedded(store: &Path) -> String {
    format!(
        "[persistence]\nbackend = \"embedded\"\npath = \"{}\"\n",
        store.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_the_same_path_resumes_positions_messages_and_sequences() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let stack = Persist::start_with("", &embedded(&store)).await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    c.open("pub").await;
    let first = c.ok("a", SUBSCRIBE, subscribe("p", "events.orders")).await;
    assert_eq!(first["resumed_from_sequence"], 0);
    for i in 1..=4 {
        c.publish("pub", "orders", json!({"order": i})).await;
    }
    let notes = c.notes("a", 4).await;
    assert_eq!(seqs(&notes), [1, 2, 3, 4]);
    for seq in [1, 3] {
        c.ok("a", ACK, ack("p", seq)).await;
    }
    let metrics = scrape(stack.admin).await;
    let stored = value(
        &metrics,
        "switchyard_persistent_stored_messages",
        &[("backend", "embedded")],
    );
    assert_eq!(
        stored, 4.0,
        "the stored-messages gauge of the embedded backend"
    );
    c.exit().await;
    stack.stop().await;

    // A new gateway (and a new upstream) on the same store.
    let stack = Persist::start_with("", &embedded(&store)).await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    c.open("pub").await;
    let resumed = c.ok("a", SUBSCRIBE, subscribe("p", "events.orders")).await;
    assert_eq!(
        resumed,
        json!({"subscription_id": "p", "topic": "events.orders", "resumed_from_sequence": 1})
    );
    // 2 and 4 again, exactly as first delivered (timestamps included);
    // then a new one, numbered after the last stored before the restart.
    let again = c.notes("a", 2).await;
    assert_eq!(seqs(&again), [2, 4]);
    assert_eq!(again[0], notes[1]);
    assert_eq!(again[1], notes[3]);
    c.publish("pub", "orders", json!({"order": 5})).await;
    assert_eq!(seqs(&c.notes("a", 3).await), [2, 4, 5]);
    c.exit().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_gateway_on_a_store_in_use_is_refused_before_it_binds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let stack = Persist::start_with("", &embedded(&store)).await;
    let toml = format!(
        "[listeners.other]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\n\n\
         [upstreams.u]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [[routes]]\nlistener = \"other\"\nupstream = \"u\"\n\n{}",
        dir.path().join("nobody.sock").display(),
        embedded(&store),
    );
    let cfg = switchyard::config::Config::from_toml(&toml).expect("config");
    let err = match switchyard::app::bind(cfg).await {
        Ok(_) => panic!("a second gateway opened a store in use"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("open in another process"), "{err}");
    stack.stop().await;
}

/// GETs `path` from the admin listener: status and body.
async fn http(admin: SocketAddr, path: &str) -> (u16, String) {
    let reply = common::http::get(admin, path, &[]).await;
    (reply.status, reply.text().to_owned())
}

/// Polls `/readyz` until it answers `status` (the store reopens with a
/// backoff of a few seconds at most).
async fn readyz_becomes(admin: SocketAddr, status: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (got, body) = http(admin, "/readyz").await;
        if got == status {
            return body;
        }
        assert!(Instant::now() < deadline, "/readyz stayed {got}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_write_is_not_ready_changes_nothing_and_serves_again_once_reopened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let faults = WriteFaults::register(&store);
    let stack = Persist::start_with("", &embedded(&store)).await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    c.open("pub").await;
    c.ok("a", SUBSCRIBE, subscribe("p", "events.orders")).await;
    c.publish("pub", "orders", json!({"order": 1})).await;
    assert_eq!(seqs(&c.notes("a", 1).await), [1]);
    readyz_becomes(stack.admin, 200).await;

    faults.set(true);
    let failed = c.call("a", ACK, ack("p", 1)).await;
    assert_error(&failed, -32009, "an ack whose commit failed");
    let retried = c.call("a", ACK, ack("p", 1)).await;
    assert_error(&retried, -32009, "its retry, not answered from memory");
    let refused = c
        .call("a", SUBSCRIBE, subscribe("q", "events.orders"))
        .await;
    assert_error(&refused, -32009, "a subscribe while the store fails");
    let body = readyz_becomes(stack.admin, 503).await;
    assert!(
        body.contains("persistent store (embedded)") && body.contains("No space left on device"),
        "{body}"
    );
    let (_, page) = http(stack.admin, "/").await;
    let section = page
        .split("<section id=\"store\">")
        .nth(1)
        .expect("the status page shows the store");
    assert!(
        section.contains("failing") && section.contains("No space left on device"),
        "{section}"
    );

    // Room again: the store is reopened, the failed ack had changed
    // nothing (1 is acknowledged only now), and the open subscription
    // delivers again.
    faults.set(false);
    readyz_becomes(stack.admin, 200).await;
    c.ok("a", ACK, ack("p", 1)).await;
    c.publish("pub", "orders", json!({"order": 2})).await;
    assert_eq!(seqs(&c.notes("a", 2).await), [1, 2]);
    let q = c.ok("a", SUBSCRIBE, subscribe("q", "events.orders")).await;
    assert_eq!(q["resumed_from_sequence"], 2);
    let (_, page) = http(stack.admin, "/").await;
    assert!(page.contains("<section id=\"store\">") && page.contains("serving"));
    c.exit().await;
    stack.stop().await;

    // What a restart finds: 1 acknowledged (its successful retry).
    let stack = Persist::start_with("", &embedded(&store)).await;
    let mut c = Client::start(&stack.url).await;
    c.open("a").await;
    let resumed = c.ok("a", SUBSCRIBE, subscribe("p", "events.orders")).await;
    assert_eq!(resumed["resumed_from_sequence"], 1);
    c.exit().await;
    stack.stop().await;
}
