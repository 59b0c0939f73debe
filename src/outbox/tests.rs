//! The Outbox bound under random producer and consumer speeds: whatever
//! the interleaving of offers (events), replies that wait for room, and
//! reads by the writer, the queue never holds more than its capacity, the
//! bytes it counts are exactly what is queued or waiting, every queued
//! frame is read once and in order, and a full queue drops offers rather
//! than growing.

#![allow(clippy::unwrap_used)] // in tests a panic is the failure report

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::dialect::render::Style;
use crate::dialect::Dialect;
use crate::telemetry::metrics::Metrics;

const CAPACITY: usize = 4;
/// The byte budget: about three of the largest frames the ops make.
const BUDGET: usize = 6 * 1024;

#[derive(Debug, Clone)]
enum Op {
    /// A producer offers an event of this many bytes (never waits).
    Offer(usize),
    /// A reply of this many bytes is queued, waiting for room if needed.
    Reply(usize),
    /// The writer reads this many frames (what is there).
    Read(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1usize..2048).prop_map(Op::Offer),
        (1usize..8192).prop_map(Op::Reply),
        (1usize..6).prop_map(Op::Read),
    ]
}

/// What the writer does with a frame: release it, and keep its tag.
fn take(reader: &OutboxReader, out: Outgoing) -> String {
    reader.inner.budget.taken(out.size());
    match out {
        Outgoing::Text(t) => t.split_inclusive(':').next().unwrap_or_default().to_owned(),
        other => format!("{other:?}"),
    }
}

fn outbox(patience: Duration) -> (Outbox, OutboxReader, prometheus::IntGauge) {
    let metrics = Metrics::new().unwrap();
    let gauges = Gauges {
        messages: prometheus::IntGauge::new("m", "m").unwrap(),
        bytes: prometheus::IntGauge::new("b", "b").unwrap(),
    };
    let bytes = gauges.bytes.clone();
    let codec = OutCodec::new(Form::Text(Dialect::JsonRpc, Style::Frame), metrics);
    let (o, r) = Outbox::channel(CAPACITY, BUDGET, codec, patience, gauges);
    (o, r, bytes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_queue_stays_bounded_and_loses_nothing_it_accepted(ops in proptest::collection::vec(op(), 1..120)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (outbox, mut reader, high) = outbox(Duration::from_secs(60));
            let mut accepted: Vec<String> = Vec::new();
            let mut replies = 0usize;
            let mut read: Vec<String> = Vec::new();
            let mut waiting: Vec<tokio::task::JoinHandle<()>> = Vec::new();
            let mut largest = 0usize;
            for op in ops {
                match op {
                    Op::Offer(n) => {
                        let tag = format!("o{}:", accepted.len() + read.len() + replies);
                        let text = format!("{tag}{}", "x".repeat(n));
                        largest = largest.max(text.len());
                        let size = i64::try_from(text.len()).unwrap();
                        let fits = outbox.inner.budget.fits(size);
                        match outbox.offer_frame(Outgoing::Text(text)) {
                            Offer::Queued => accepted.push(tag),
                            // Dropped only when full: messages, bytes, or
                            // a reply waiting for room.
                            Offer::Full => prop_assert!(
                                reader.rx.len() == CAPACITY
                                    || !fits
                                    || waiting.iter().any(|w| !w.is_finished())
                            ),
                            other => prop_assert!(false, "unexpected {other:?}"),
                        }
                    }
                    Op::Reply(n) => {
                        replies += 1;
                        let text = format!("r{replies}:{}", "y".repeat(n));
                        largest = largest.max(text.len());
                        // A reply is never dropped: it waits for room.
                        let o = outbox.clone();
                        waiting.push(tokio::spawn(async move {
                            o.send_frame(Outgoing::Text(text)).await;
                        }));
                        tokio::task::yield_now().await;
                    }
                    Op::Read(k) => {
                        for _ in 0..k {
                            match reader.rx.try_recv() {
                                Ok(out) => read.push(take(&reader, out)),
                                Err(_) => break,
                            }
                        }
                        tokio::task::yield_now().await;
                    }
                }
                prop_assert!(reader.rx.len() <= CAPACITY);
                // The queue's bytes stay within the budget (or one frame
                // alone above it).
                let queued = usize::try_from(outbox.inner.budget.queued()).unwrap();
                prop_assert!(queued <= BUDGET.max(largest), "queued {queued} B");
                // What is counted is what is queued plus what waits: never
                // more than (capacity + waiting replies) frames.
                let held = outbox.inner.budget.held();
                let bound = (CAPACITY + waiting.len()) * largest;
                prop_assert!(held >= 0 && usize::try_from(held).unwrap() <= bound, "held {held} > {bound}");
            }
            // Drain: every waiting reply gets in, everything is read.
            loop {
                tokio::task::yield_now().await;
                match reader.rx.try_recv() {
                    Ok(out) => read.push(take(&reader, out)),
                    Err(_) if waiting.iter().all(tokio::task::JoinHandle::is_finished) => break,
                    Err(_) => {}
                }
            }
            prop_assert_eq!(outbox.inner.budget.held(), 0, "all released");
            prop_assert!(high.get() <= i64::try_from((CAPACITY + waiting.len()) * largest).unwrap());
            // Every accepted offer was read once, in the order offered, and
            // every reply once.
            let offers: Vec<String> = read.iter().filter(|t| t.starts_with('o')).cloned().collect();
            prop_assert_eq!(offers, accepted);
            let mut got: Vec<String> = read.iter().filter(|t| t.starts_with('r')).cloned().collect();
            got.sort();
            got.dedup();
            prop_assert_eq!(got.len(), replies);
            prop_assert_eq!(read.iter().filter(|t| t.starts_with('r')).count(), replies);
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn a_queue_that_gets_room_again_is_not_slow() {
    let (outbox, mut reader, _) = outbox(Duration::from_secs(60));
    for _ in 0..CAPACITY {
        assert_eq!(outbox.offer_frame(Outgoing::Ping), Offer::Queued);
    }
    // Full: the offer is dropped and the watch starts...
    assert_eq!(outbox.offer_frame(Outgoing::Ping), Offer::Full);
    assert!(outbox.inner.watching.load(Ordering::Acquire));
    // ...and ends as soon as there is room again.
    assert!(reader.recv().await.is_some());
    while outbox.inner.watching.load(Ordering::Acquire) {
        tokio::task::yield_now().await;
    }
    assert!(!outbox.slow().is_cancelled());
}

#[tokio::test]
async fn a_queue_full_for_the_patience_makes_the_client_slow() {
    let (outbox, _reader, _) = outbox(Duration::from_millis(50));
    for _ in 0..CAPACITY {
        assert_eq!(outbox.offer_frame(Outgoing::Ping), Offer::Queued);
    }
    assert_eq!(outbox.offer_frame(Outgoing::Ping), Offer::Full);
    // Nobody reads: slow once the patience is over.
    tokio::time::timeout(Duration::from_secs(30), outbox.slow().cancelled())
        .await
        .expect("the client became slow");
}

fn text(n: usize) -> Outgoing {
    Outgoing::Text("x".repeat(n))
}

#[tokio::test]
async fn an_offer_over_the_byte_budget_is_dropped_though_messages_have_room() {
    let (outbox, mut reader, high) = outbox(Duration::from_secs(60));
    // Two frames of 3 KiB fill the 6 KiB budget; a third does not fit,
    // though the queue has room for two more messages.
    assert_eq!(outbox.offer_frame(text(3 * 1024)), Offer::Queued);
    assert_eq!(outbox.offer_frame(text(3 * 1024)), Offer::Queued);
    assert_eq!(outbox.offer_frame(text(1)), Offer::Full);
    assert_eq!(reader.rx.len(), 2);
    assert_eq!(high.get(), i64::try_from(BUDGET).unwrap());
    // The writer takes one out: room again.
    assert!(reader.recv().await.is_some());
    assert_eq!(outbox.offer_frame(text(1)), Offer::Queued);
}

#[tokio::test]
async fn a_frame_larger_than_the_budget_goes_out_alone() {
    let (outbox, mut reader, _) = outbox(Duration::from_secs(60));
    // An empty queue takes one frame of any size, offered or sent...
    assert_eq!(outbox.offer_frame(text(BUDGET * 2)), Offer::Queued);
    // ...and nothing more fits beside it.
    assert_eq!(outbox.offer_frame(text(1)), Offer::Full);
    assert!(reader.recv().await.is_some());
    tokio::time::timeout(Duration::from_secs(30), outbox.send_frame(text(BUDGET * 2)))
        .await
        .expect("a reply larger than the budget is queued at once when the queue is empty");
    assert_eq!(reader.rx.len(), 1);
}

#[tokio::test]
async fn a_reply_waits_for_bytes_and_offers_yield_to_it() {
    let (outbox, mut reader, high) = outbox(Duration::from_secs(60));
    assert_eq!(outbox.offer_frame(text(BUDGET - 100)), Offer::Queued);
    // A reply of 1 KiB does not fit: it waits.
    let o = outbox.clone();
    let reply = tokio::spawn(async move { o.send_frame(text(1024)).await });
    while outbox.inner.budget.held() < i64::try_from(BUDGET - 100 + 1024).unwrap() {
        tokio::task::yield_now().await;
    }
    // The gauge counts it as waiting; an offer that would fit is refused
    // while it waits.
    assert_eq!(high.get(), i64::try_from(BUDGET - 100 + 1024).unwrap());
    assert_eq!(outbox.offer_frame(text(1)), Offer::Full);
    // The writer takes bytes out: the reply gets in.
    assert!(reader.recv().await.is_some());
    tokio::time::timeout(Duration::from_secs(30), reply)
        .await
        .expect("the reply got room")
        .unwrap();
    assert_eq!(reader.rx.len(), 1);
    assert!(!outbox.slow().is_cancelled());
}

#[tokio::test]
async fn a_queue_over_budget_for_the_patience_makes_the_client_slow() {
    let (outbox, _reader, _) = outbox(Duration::from_millis(50));
    assert_eq!(outbox.offer_frame(text(BUDGET)), Offer::Queued);
    // Nobody reads: the waiting reply gives up, and the client is slow.
    tokio::time::timeout(Duration::from_secs(30), outbox.send_frame(text(1)))
        .await
        .expect("the reply gave up");
    assert!(outbox.slow().is_cancelled());
    assert_eq!(outbox.inner.budget.held(), i64::try_from(BUDGET).unwrap());
}

#[tokio::test]
async fn an_offer_dropped_for_bytes_makes_the_client_slow_if_no_room_comes() {
    let (outbox, _reader, _) = outbox(Duration::from_millis(50));
    assert_eq!(outbox.offer_frame(text(BUDGET)), Offer::Queued);
    assert_eq!(outbox.offer_frame(text(1)), Offer::Full);
    tokio::time::timeout(Duration::from_secs(30), outbox.slow().cancelled())
        .await
        .expect("the client became slow");
}
