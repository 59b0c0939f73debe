//! Pub/sub feeds: the reference NDJSON daemon's `Subscribe`
//! stream configured as a feed of upstream `daemon` under topic
//! `daemon.events` (harness in `common::feed`), fanned out to subscribers in
//! every client dialect: one upstream stream for many subscribers, every
//! event to every one of them in order, heartbeats consumed, the stream
//! closed when the last one leaves and reopened when the upstream ends it.
//!
//! The daemon counts its `Subscribe` streams
//! ([`switchyard::daemon::Daemon::subscribe_streams`]); gauges come from the
//! admin listener's `/metrics`.

mod common;

use common::clients::{Speak, TestClient};
use common::feed::*;
use common::scrape::{scrape, value, wait_above, wait_value};
use serde_json::{json, Value};
use switchyard::daemon::SubscribeStreams;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_subscribers_in_every_dialect_share_one_upstream_stream() {
    // A heartbeat 7 ms after every line: switchyard must consume them,
    // never publish them.
    // `*.events` and `>` reach past the upstream's own topics: allowed here.
    let feed = Feed::start(
        "{ interval_ms = 20, heartbeat_ms = 7 }",
        "allow_topics = [\">\"]",
    )
    .await;
    let none = SubscribeStreams {
        started: 0,
        open: 0,
    };
    // No subscriber, no stream.
    assert_eq!(feed.daemon().subscribe_streams(), none);

    let mut plan = Vec::new();
    for i in 0..20 {
        let pattern = if i % 2 == 0 { TOPIC } else { "daemon.>" };
        plan.push((Speak::JsonRpc, pattern));
    }
    for i in 0..10 {
        let pattern = if i % 2 == 0 { TOPIC } else { "*.events" };
        plan.push((Speak::Holon, pattern));
    }
    for i in 0..10 {
        let speak = if i % 2 == 0 {
            Speak::SidebandJson
        } else {
            Speak::SidebandCbor
        };
        plan.push((speak, if i < 5 { TOPIC } else { ">" }));
    }
    for i in 0..10 {
        plan.push((Speak::Ndjson, if i % 2 == 0 { TOPIC } else { "daemon.*" }));
    }
    assert_eq!(plan.len(), 50);

    const EVENTS: usize = 25;
    let mut tasks = Vec::new();
    for (i, (speak, pattern)) in plan.iter().copied().enumerate() {
        let c = TestClient::connect(speak, &feed.endpoint(speak)).await;
        tasks.push(tokio::spawn(async move {
            let (c, seqs) = subscribe_and_collect(c, pattern, EVENTS).await;
            (i, speak, c, seqs)
        }));
    }
    let mut clients = Vec::new();
    for task in tasks {
        let (i, speak, c, seqs) = task.await.expect("subscriber task");
        assert_consecutive(&format!("subscriber {i} ({speak:?})"), &seqs);
        clients.push((speak, c));
    }
    // Every subscriber attached; the daemon served ONE stream.
    let one = SubscribeStreams {
        started: 1,
        open: 1,
    };
    assert_eq!(feed.daemon().subscribe_streams(), one);
    let metrics = scrape(feed.admin).await;
    let daemon = [("upstream", "daemon")];
    assert_eq!(value(&metrics, "switchyard_feeds_open", &daemon), 1.0);
    let published = value(&metrics, "switchyard_events_published_total", &daemon);
    assert!(published >= EVENTS as f64, "published {published}");
    for (name, n) in [
        ("public", 20.0),
        ("holon", 10.0),
        ("sb", 10.0),
        ("local", 10.0),
    ] {
        assert_eq!(feed.subscriptions(name).await, n, "{name}");
    }

    // All but one leave: the stream stays.
    let (last_speak, last) = clients.pop().expect("a client");
    drop(clients);
    for name in ["public", "holon", "sb"] {
        let left = wait_value(
            feed.admin,
            SUBSCRIPTIONS,
            &[("listener", name)],
            0.0,
            SETTLE,
        )
        .await;
        assert_eq!(left, 0.0, "{name}");
    }
    assert_eq!(feed.subscriptions(listener(last_speak)).await, 1.0);
    assert_eq!(feed.daemon().subscribe_streams(), one);
    // The last one still gets events.
    let (last, more) = collect_more(last, 3).await;
    assert_consecutive("the last subscriber", &more);

    // The last one leaves: the daemon sees its stream end.
    drop(last);
    let ended = SubscribeStreams {
        started: 1,
        open: 0,
    };
    assert_eq!(feed.streams_become(ended).await, ended);
    let open = wait_value(
        feed.admin,
        "switchyard_feeds_open",
        &[("upstream", "daemon")],
        0.0,
        SETTLE,
    )
    .await;
    assert_eq!(open, 0.0);
    assert_eq!(feed.subscriptions(listener(last_speak)).await, 0.0);
    feed.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_the_upstream_ends_is_reopened_for_its_subscribers() {
    let mut feed = Feed::start("{ interval_ms = 20 }", "").await;
    let c = TestClient::connect(Speak::JsonRpc, &feed.jsonrpc).await;
    let (mut c, seqs) = subscribe_and_collect(c, TOPIC, 3).await;
    assert_consecutive("before", &seqs);
    let mut last = *seqs.last().expect("events");

    // The daemon dies (its stream with it) and comes back.
    feed.restart_daemon().await;
    // The subscriber stays connected; the new daemon's stream starts again
    // at seq 1 and reaches it.
    let mut after = Vec::new();
    while after.len() < 3 {
        let (next, seq) = collect_more(c, 1).await;
        c = next;
        if !after.is_empty() || seq[0] <= last {
            after.push(seq[0]);
        }
        last = seq[0];
    }
    assert_consecutive("after the restart", &after);
    let one = SubscribeStreams {
        started: 1,
        open: 1,
    };
    assert_eq!(feed.daemon().subscribe_streams(), one);
    let open = value(
        &scrape(feed.admin).await,
        "switchyard_feeds_open",
        &[("upstream", "daemon")],
    );
    assert_eq!(open, 1.0);
    drop(c);
    let ended = SubscribeStreams {
        started: 1,
        open: 0,
    };
    assert_eq!(feed.streams_become(ended).await, ended);
    feed.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holon_subscriber_gets_at_most_64_unanswered_events() {
    let feed = Feed::start("{ interval_ms = 5 }", "").await;
    let mut c = TestClient::connect(Speak::Holon, &feed.holon).await;
    let request = json!({"jsonrpc": "2.0", "method": "rpc.subscribe", "params": {"topic": TOPIC}, "id": "sub"});
    c.send(&request.to_string()).await;
    // 64 events, none answered.
    let mut pending = Vec::new();
    while pending.len() < 64 {
        let msg: Value = serde_json::from_str(&c.recv().await).expect("JSON");
        if msg["id"] == "sub" {
            assert_eq!(msg["result"], json!({"subscribed": true}), "{msg}");
            continue;
        }
        let (_, data) = event_of(Speak::Holon, &msg).unwrap_or_else(|| panic!("{msg}"));
        pending.push((msg["id"].as_str().expect("s<N>").to_owned(), seq_of(&data)));
    }
    // Further events are dropped and counted…
    let dropped = wait_above(
        feed.admin,
        "switchyard_events_dropped_total",
        &[("listener", "holon"), ("reason", "push_window")],
        0.0,
        SETTLE,
    )
    .await;
    assert!(dropped > 0.0, "no push_window drops counted");
    // …not queued: once the 64 are answered, the next event is a later one.
    let last = pending.last().map(|(_, seq)| *seq).expect("events");
    for (id, _) in &pending {
        c.send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string())
            .await;
    }
    let (_, next) = collect_more(c, 1).await;
    assert!(
        next[0] > last + 1,
        "event {} after {last}: the window let a 65th through",
        next[0]
    );
    feed.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_that_ran_is_reopened_after_the_initial_backoff_every_time() {
    // Doubling from 200 ms without a reset, the 7th reopen would wait
    // 12.8 s: longer than a subscriber waits for an event (10 s).
    let keys = "backoff_initial_ms = 200\nbackoff_max_ms = 60000";
    let mut feed = Feed::start_with("{ interval_ms = 10 }", "", keys).await;
    let c = TestClient::connect(Speak::JsonRpc, &feed.jsonrpc).await;
    let (mut c, seqs) = subscribe_and_collect(c, TOPIC, 2).await;
    let mut last = *seqs.last().expect("events");
    for restart in 1..=7 {
        feed.restart_daemon().await;
        // The new stream starts again at seq 1.
        loop {
            let (next, seq) = collect_more(c, 1).await;
            c = next;
            // A stream's seq only grows: a step back is a new stream.
            let fresh = seq[0] <= last;
            last = seq[0];
            if fresh {
                break;
            }
        }
        let streams = feed.daemon().subscribe_streams();
        assert_eq!(streams.started, 1, "restart {restart}: {streams:?}");
    }
    drop(c);
    feed.stop().await;
}
