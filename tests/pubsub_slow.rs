//! A pub/sub subscriber that never reads its socket: its events
//! are dropped (counted `slow_consumer`) and it is closed after the
//! slow-consumer timeout, while 99 others get every event of the reference
//! daemon's `Subscribe` feed (harness in `common::feed`) without a gap, and
//! its outbox stays within its bound: the byte budget (`outbox_max_bytes`,
//! 1.5 MiB here), before the message count (128 events, over 2 MiB).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::clients::Ended;
use common::feed::*;
use common::scrape::{scrape, value, wait_above, wait_value};
use common::Ws;
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

/// `outbox_max_bytes`: about 93 events of 16.5 KiB, short of the 128 that
/// `outbox_capacity` allows (over 2 MiB), and still ~1.8 s of slack for a
/// reader on a busy machine.
const BUDGET: usize = 1536 * 1024;

/// The `seq` of an event frame, found without parsing the (large) frame.
fn quick_seq(text: &str) -> Option<u64> {
    let at = text.find("\"seq\":")? + "\"seq\":".len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Reads events until one has `seq >= target` (once a target is set);
/// returns every seq read. The subscribe reply (id "sub") is skipped.
async fn keep_up(
    mut ws: Ws,
    highest: Arc<AtomicU64>,
    mut target: watch::Receiver<u64>,
) -> Vec<u64> {
    let mut seqs = Vec::new();
    loop {
        let frame = tokio::time::timeout(SETTLE, ws.next())
            .await
            .expect("a reader waited too long for an event")
            .expect("a reader's connection ended")
            .expect("read");
        let Message::Text(text) = frame else {
            continue;
        };
        let Some(seq) = quick_seq(&text) else {
            assert!(
                text.contains("\"subscribed\":true"),
                "{}",
                &text[..text.len().min(200)]
            );
            continue;
        };
        seqs.push(seq);
        highest.fetch_max(seq, Ordering::Relaxed);
        let t = *target.borrow_and_update();
        if t > 0 && seq >= t {
            return seqs;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_is_dropped_then_closed_and_slows_nobody() {
    // 16 KiB events every 20 ms; a short slow-consumer timeout; a byte
    // budget of about 93 events' worth, the count cap at 128.
    let feed = Feed::start(
        "{ interval_ms = 20, pad_bytes = 16384 }",
        &format!(
            "outbox_capacity = 128\noutbox_max_bytes = {BUDGET}\nslow_consumer_timeout_ms = 1000"
        ),
    )
    .await;
    let subscribe = |p: &str| {
        json!({"jsonrpc": "2.0", "method": "rpc.subscribe", "params": {"topic": p}, "id": "sub"})
            .to_string()
    };

    // The one that never reads (not even the subscribe reply).
    let mut slow = common::connect_tiny_window(&feed.jsonrpc).await;
    slow.send(Message::Text(subscribe(TOPIC).into()))
        .await
        .expect("send");

    let highest = Arc::new(AtomicU64::new(0));
    let (set_target, target) = watch::channel(0u64);
    let mut readers = Vec::new();
    for i in 0..99 {
        let mut ws = common::connect(&feed.jsonrpc).await;
        let pattern = if i % 2 == 0 { TOPIC } else { "daemon.>" };
        ws.send(Message::Text(subscribe(pattern).into()))
            .await
            .expect("send");
        readers.push(tokio::spawn(keep_up(ws, highest.clone(), target.clone())));
    }
    assert_eq!(
        wait_value(
            feed.admin,
            SUBSCRIPTIONS,
            &[("listener", "public")],
            100.0,
            SETTLE
        )
        .await,
        100.0
    );

    // The slow one's events are dropped and counted…
    let slow_drops = [("listener", "public"), ("reason", "slow_consumer")];
    let dropped = wait_above(
        feed.admin,
        "switchyard_events_dropped_total",
        &slow_drops,
        0.0,
        Duration::from_secs(60),
    )
    .await;
    assert!(dropped > 0.0, "no slow_consumer drops counted");
    // …then it is closed after the slow-consumer timeout: its subscription
    // goes with its connection.
    assert_eq!(
        wait_value(
            feed.admin,
            SUBSCRIPTIONS,
            &[("listener", "public")],
            99.0,
            Duration::from_secs(60)
        )
        .await,
        99.0,
        "the slow subscriber was not closed"
    );
    // Memory per subscriber stayed within its outbox: within the byte
    // budget plus one frame (events never wait for room), far below
    // outbox_capacity events (about 16.5 KiB each as frames).
    let metrics = scrape(feed.admin).await;
    let high_water = value(
        &metrics,
        "switchyard_outbox_high_water",
        &[("listener", "public")],
    );
    assert!(high_water <= 128.0, "outbox high water {high_water}");
    let queued = value(
        &metrics,
        "switchyard_outbox_queued_bytes_max",
        &[("listener", "public")],
    );
    assert!(
        queued <= (BUDGET + 17 * 1024) as f64,
        "{queued} bytes queued for one subscriber (budget {BUDGET})"
    );
    // Draining it now shows the end: a close (1008) or the connection gone.
    let end = drain(&mut slow).await;
    assert!(
        matches!(end, Ended::Close(1008) | Ended::Eof),
        "the slow subscriber ended with {end:?}"
    );

    // The others carry on and got every event, without a gap.
    let _ = set_target.send(highest.load(Ordering::Relaxed) + 10);
    for (i, reader) in readers.into_iter().enumerate() {
        let seqs = reader.await.expect("reader task");
        assert!(seqs.len() > 10, "reader {i}: {seqs:?}");
        assert_consecutive(&format!("reader {i}"), &seqs);
    }
    // One upstream stream all along.
    assert_eq!(feed.daemon().subscribe_streams().started, 1);
    feed.stop().await;
}

/// Reads a connection to its end; returns how it ended.
async fn drain(ws: &mut Ws) -> Ended {
    loop {
        match tokio::time::timeout(SETTLE, ws.next()).await {
            Err(_) => panic!("the slow subscriber's connection did not end"),
            Ok(Some(Ok(Message::Close(f)))) => {
                return Ended::Close(f.map_or(1005, |f| u16::from(f.code)))
            }
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_)) | None) => return Ended::Eof,
        }
    }
}
