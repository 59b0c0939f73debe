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
                        // A reply waits for room, unless the replies
                        // waiting hold the budget already (then it is
                        // dropped and the client is slow).
                        let o = outbox.clone();
                        waiting.push(tokio::spawn(async move {
                            o.inner.queue(Outgoing::Text(text)).await
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

/// Waits until the budget holds `bytes` (queued plus waiting).
async fn until_held(outbox: &Outbox, bytes: usize) {
    let bytes = i64::try_from(bytes).unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        while outbox.inner.budget.held() != bytes {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the budget came to hold the bytes");
}

#[tokio::test]
async fn a_single_reply_larger_than_the_budget_may_wait() {
    let (outbox, mut reader, _) = outbox(Duration::from_secs(60));
    assert_eq!(outbox.offer_frame(text(1)), Offer::Queued);
    // Alone, a reply of twice the budget waits (as it would go into an
    // empty queue): the client is not slow for it.
    let o = outbox.clone();
    let reply = tokio::spawn(async move { o.inner.queue(text(2 * BUDGET)).await });
    until_held(&outbox, 1 + 2 * BUDGET).await;
    assert!(!outbox.slow().is_cancelled());
    // The writer takes the small frame out: the large reply gets in.
    assert!(reader.recv().await.is_some());
    let waited = tokio::time::timeout(Duration::from_secs(30), reply)
        .await
        .expect("the reply got room")
        .unwrap();
    assert_eq!(waited, Waited::Ready);
    assert_eq!(reader.rx.len(), 1);
    assert!(!outbox.slow().is_cancelled());
}

#[tokio::test]
async fn a_second_reply_over_the_waiting_budget_makes_the_client_slow_at_once() {
    // The patience is far longer than the failure guards: only the bytes
    // waiting can make the client slow here.
    let (outbox, _reader, _) = outbox(Duration::from_secs(600));
    assert_eq!(outbox.offer_frame(text(BUDGET)), Offer::Queued);
    // The first reply waits; a second that fits beside it waits too.
    let mut waiting = Vec::new();
    for n in [4 * 1024, BUDGET - 4 * 1024] {
        let o = outbox.clone();
        waiting.push(tokio::spawn(async move { o.inner.queue(text(n)).await }));
    }
    until_held(&outbox, 2 * BUDGET).await;
    assert!(!outbox.slow().is_cancelled());
    // One byte more does not wait: the client is slow now, the reply is
    // dropped (its bytes are not held), whatever path it takes.
    let waited = tokio::time::timeout(Duration::from_secs(30), outbox.inner.queue(text(1)))
        .await
        .expect("the reply did not wait");
    assert_eq!(waited, Waited::Over);
    assert!(outbox.slow().is_cancelled());
    let delivered = tokio::time::timeout(Duration::from_secs(30), outbox.deliver_frame(text(1)))
        .await
        .expect("the delivery did not wait");
    assert_eq!(delivered, Offer::Closed);
    assert_eq!(
        outbox.inner.budget.held(),
        i64::try_from(2 * BUDGET).unwrap()
    );
    for w in waiting {
        assert!(!w.is_finished(), "the replies that fit still wait");
        w.abort();
    }
}

#[tokio::test]
async fn a_settled_reply_over_the_waiting_budget_frees_its_slot() {
    let (outbox, _reader, _) = outbox(Duration::from_secs(600));
    assert_eq!(outbox.offer_frame(text(BUDGET)), Offer::Queued);
    let o = outbox.clone();
    let first = tokio::spawn(async move { o.inner.queue(text(BUDGET)).await });
    until_held(&outbox, 2 * BUDGET).await;
    // The queue is full: the reply goes to a task, which finds no room for
    // it among the replies waiting; the client is slow and the slot freed.
    let reply = Message::Notification {
        method: "m".repeat(64),
        params: None,
    };
    let (slot, freed) = tokio::sync::oneshot::channel::<()>();
    assert!(outbox.settle(&reply, slot));
    tokio::time::timeout(Duration::from_secs(30), freed)
        .await
        .expect("the slot was freed")
        .unwrap_err();
    assert!(outbox.slow().is_cancelled());
    assert_eq!(
        outbox.inner.budget.held(),
        i64::try_from(2 * BUDGET).unwrap()
    );
    first.abort();
}

#[tokio::test]
async fn a_reply_that_fits_goes_in_at_once_while_the_waiting_budget_is_full() {
    let (outbox, mut reader, high) = outbox(Duration::from_secs(600));
    assert_eq!(outbox.offer_frame(text(1024)), Offer::Queued);
    // A reply of the whole budget waits: the waiting bytes are at the
    // budget.
    let o = outbox.clone();
    let waiting = tokio::spawn(async move { o.inner.queue(text(BUDGET)).await });
    until_held(&outbox, 1024 + BUDGET).await;
    // Replies that fit the queue are queued at once, not counted as
    // waiting, and do not make the client slow.
    for _ in 0..2 {
        let waited = tokio::time::timeout(Duration::from_secs(30), outbox.inner.queue(text(1024)))
            .await
            .expect("queued at once");
        assert_eq!(waited, Waited::Ready);
    }
    assert_eq!(outbox.inner.budget.queued(), 3 * 1024);
    assert_eq!(
        outbox.inner.budget.held(),
        i64::try_from(3 * 1024 + BUDGET).unwrap()
    );
    assert_eq!(high.get(), i64::try_from(3 * 1024 + BUDGET).unwrap());
    assert!(!outbox.slow().is_cancelled());
    // The queue drains: the waiting reply gets in.
    for _ in 0..3 {
        assert!(reader.recv().await.is_some());
    }
    let waited = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the reply got room")
        .unwrap();
    assert_eq!(waited, Waited::Ready);
    assert!(!outbox.slow().is_cancelled());
}
