//! The Outbox bound under random producer and consumer speeds: whatever
//! the interleaving of offers (events), replies that wait for room, and
//! reads by the writer, the queue never holds more than its capacity, the
//! bytes it counts are exactly what is queued or waiting, the bytes queued
//! and those of the replies waiting each stay within the budget (a reply
//! refused for that makes the client slow), every queued frame is read
//! once and in order, and a full queue drops offers rather than growing.

#![allow(clippy::unwrap_used)] // in tests a panic is the failure report

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::dialect::render::Style;
use crate::dialect::Dialect;
use crate::telemetry::metrics::Metrics;

mod budget;

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
            let mut waiting: Vec<tokio::task::JoinHandle<Waited>> = Vec::new();
            let mut largest = 0usize;
            for op in ops {
                match op {
                    Op::Offer(n) => {
                        let tag = format!("o{}:", accepted.len() + read.len() + replies);
                        let text = format!("{tag}{}", "x".repeat(n));
                        largest = largest.max(text.len());
                        let size = i64::try_from(text.len()).unwrap();
                        let fits = outbox.inner.budget.fits(size);
                        match outbox.offer_frame(Outgoing::Text(text.into())) {
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
                        // A reply waits for room, unless the replies
                        // waiting hold the budget already (then it is
                        // dropped and the client is slow).
                        let o = outbox.clone();
                        waiting.push(tokio::spawn(async move {
                            o.inner.queue(Outgoing::Text(text.into())).await
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
                // So do the bytes of the replies waiting for room.
                let budget = &outbox.inner.budget;
                let waits = usize::try_from(budget.held() - budget.queued()).unwrap();
                prop_assert!(waits <= BUDGET.max(largest), "waiting {waits} B");
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
            prop_assert!(high.get() <= i64::try_from(2 * BUDGET.max(largest)).unwrap());
            // Every accepted offer was read once, in the order offered, and
            // every reply once.
            let offers: Vec<String> = read.iter().filter(|t| t.starts_with('o')).cloned().collect();
            prop_assert_eq!(offers, accepted);
            let mut got: Vec<String> = read.iter().filter(|t| t.starts_with('r')).cloned().collect();
            got.sort();
            got.dedup();
            // Every reply that was not refused for the bytes waiting; a
            // refusal made the client slow.
            let mut refused = 0;
            for w in waiting {
                match w.await.unwrap() {
                    Waited::Ready => {}
                    Waited::Over => refused += 1,
                    other => prop_assert!(false, "unexpected {other:?}"),
                }
            }
            prop_assert_eq!(refused > 0, outbox.slow().is_cancelled());
            prop_assert_eq!(got.len(), replies - refused);
            prop_assert_eq!(read.iter().filter(|t| t.starts_with('r')).count(), replies - refused);
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

/// Replies queued at once are split off one frame buffer, back to back;
/// a reply that has to wait for room is copied out of it first, so that
/// no buffer is held by a frame outside the queue (the `arena` bound).
#[tokio::test]
async fn queued_replies_share_the_frame_buffer_and_a_waiting_one_holds_none() {
    use crate::envelope::{Outcome, Payload, WireId};
    let (outbox, mut reader, _) = outbox(Duration::from_secs(60));
    let reply = |n: u64| Message::Response {
        id: WireId::number(n),
        result: Outcome::Value(Payload::json("[1,2,3]").unwrap()),
    };
    for n in 0..CAPACITY as u64 {
        assert!(outbox.settle(&reply(n), ()));
    }
    // The queue is full: this one waits for room, in a task.
    assert!(outbox.settle(&reply(99), ()));
    let mut frames = Vec::new();
    for _ in 0..=CAPACITY {
        match reader.recv().await.unwrap() {
            Outgoing::Text(t) => frames.push(t),
            other => panic!("a text frame, got {other:?}"),
        }
    }
    let base = frames[0].as_ptr();
    for (n, pair) in frames[..CAPACITY].windows(2).enumerate() {
        assert_eq!(
            pair[1].as_ptr(),
            pair[0].as_ptr().wrapping_add(pair[0].len()),
            "frame {n}"
        );
    }
    let waited = &frames[CAPACITY];
    assert_eq!(
        waited.as_str(),
        r#"{"jsonrpc":"2.0","result":[1,2,3],"id":99}"#
    );
    // The buffer is alive (the outbox holds it): nothing else lies in it.
    let buffer = base..base.wrapping_add(arena::CHUNK);
    assert!(
        !buffer.contains(&waited.as_ptr()),
        "the waiting reply was copied out"
    );
    for (n, frame) in frames[..CAPACITY].iter().enumerate() {
        assert_eq!(
            frame.as_str(),
            format!(r#"{{"jsonrpc":"2.0","result":[1,2,3],"id":{n}}}"#)
        );
    }
}
