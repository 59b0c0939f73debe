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
use crate::dialect::jsonrpc::JsonRpcClient;
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
    reader.inner.taken(out.size());
    match out.checked() {
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
    let codec = OutCodec::new(ClientCodec::JsonRpc(JsonRpcClient::WS), &metrics);
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
                        let fits = outbox.inner.budget().fits(size);
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
                let queued = usize::try_from(outbox.inner.budget().queued()).unwrap();
                prop_assert!(queued <= BUDGET.max(largest), "queued {queued} B");
                // So do the bytes of the replies waiting for room.
                let budget = outbox.inner.budget();
                let waits = usize::try_from(budget.held() - budget.queued()).unwrap();
                prop_assert!(waits <= BUDGET.max(largest), "waiting {waits} B");
                // What is counted is what is queued plus what waits: never
                // more than (capacity + waiting replies) frames.
                let held = outbox.inner.budget().held();
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
            prop_assert_eq!(outbox.inner.budget().held(), 0, "all released");
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
    assert!(outbox.inner.watching());
    // ...and ends as soon as there is room again.
    assert!(reader.recv().await.is_some());
    while outbox.inner.watching() {
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
/// For text frames and for Sideband (binary) frames.
#[tokio::test]
async fn queued_replies_share_the_frame_buffer_and_a_waiting_one_holds_none() {
    use crate::dialect::sideband::client::{Options, SidebandClient};
    use crate::dialect::Inbound;
    use crate::envelope::{Outcome, Payload, WireId};
    let cbor = Options {
        cbor: true,
        ..Options::default()
    };
    let sideband = SidebandClient::new(cbor);
    let hello = bytes::Bytes::from(SidebandClient::new(cbor).hello());
    assert_eq!(sideband.decode(&hello), Inbound::Nothing);
    assert!(!sideband.negotiating(), "CBOR negotiated");
    let codecs = [
        ClientCodec::JsonRpc(JsonRpcClient::WS),
        ClientCodec::Sideband(Box::new(sideband)),
    ];
    for codec in codecs {
        let binary = codec.reads_binary();
        let gauges = Gauges {
            messages: prometheus::IntGauge::new("m", "m").unwrap(),
            bytes: prometheus::IntGauge::new("b", "b").unwrap(),
        };
        let codec = OutCodec::new(codec, &Metrics::new().unwrap());
        let (outbox, mut reader) =
            Outbox::channel(CAPACITY, BUDGET, codec, Duration::from_secs(60), gauges);
        let reply = |n: u64| Message::Response {
            id: match n {
                99 => WireId::Cid([99; 16]),
                n => WireId::Cid([u8::try_from(n).unwrap(); 16]),
            },
            result: Outcome::Value(Payload::json("[1,2,3]").unwrap()),
        };
        for n in 0..CAPACITY as u64 {
            assert!(outbox.settle(&reply(n), ()));
        }
        // The queue is full: this one waits for room, in a task.
        assert!(outbox.settle(&reply(99), ()));
        let mut frames: Vec<Vec<u8>> = Vec::new();
        let mut at: Vec<*const u8> = Vec::new();
        for _ in 0..=CAPACITY {
            match reader.recv().await.unwrap() {
                Outgoing::Text(t) => {
                    at.push(t.as_ptr());
                    frames.push(t.as_bytes().to_vec());
                }
                Outgoing::Rendered(b) => {
                    at.push(b.as_ptr());
                    frames.push(b.to_vec());
                }
                Outgoing::Binary(b) => {
                    at.push(b.as_ptr());
                    frames.push(b.to_vec());
                }
                other => panic!("a frame, got {other:?}"),
            }
        }
        for n in 1..CAPACITY {
            let after = at[n - 1].wrapping_add(frames[n - 1].len());
            assert_eq!(at[n], after, "frame {n} follows frame {}", n - 1);
        }
        // The buffer is alive (the outbox holds it): nothing else lies in it.
        let buffer = at[0]..at[0].wrapping_add(arena::CHUNK);
        assert!(
            !buffer.contains(&at[CAPACITY]),
            "the waiting reply was copied out"
        );
        // Each frame carries its result: `[1,2,3]` as JSON text, or as
        // CBOR (an array of three: 0x83 0x01 0x02 0x03).
        let result: &[u8] = if binary { &[0x83, 1, 2, 3] } else { b"[1,2,3]" };
        for (n, f) in frames.iter().enumerate() {
            assert!(
                f.windows(result.len()).any(|w| w == result),
                "frame {n}: {f:?}"
            );
        }
    }
}

/// The frame-buffer bound (`arena`) with a client that never reads: the
/// queue fills with replies of 1 to 4 KiB while nothing is taken out, and
/// the buffers its frames lie in are at most the queued bytes over
/// `CHUNK - SMALL`, plus one: frames follow each other in a buffer, and a
/// fresh buffer is taken only when the next frame does not fit.
#[tokio::test]
async fn a_never_reading_client_holds_few_frame_buffers() {
    use crate::envelope::{Outcome, Payload, WireId};
    const MANY: usize = 200;
    let gauges = Gauges {
        messages: prometheus::IntGauge::new("m", "m").unwrap(),
        bytes: prometheus::IntGauge::new("b", "b").unwrap(),
    };
    let codec = OutCodec::new(
        ClientCodec::JsonRpc(JsonRpcClient::WS),
        &Metrics::new().unwrap(),
    );
    let (outbox, mut reader) =
        Outbox::channel(MANY, 1 << 20, codec, Duration::from_secs(60), gauges);
    for n in 0..MANY {
        let pad = "p".repeat(1000 + (n * 733) % 2900);
        let reply = Message::Response {
            id: WireId::number(n as u64),
            result: Outcome::Value(Payload::json(&format!("\"{pad}\"")).unwrap()),
        };
        assert!(outbox.settle(&reply, ()));
    }
    // Nothing was read while they were queued; now look where they lie.
    let mut frames = Vec::new();
    for _ in 0..MANY {
        match reader.recv().await.unwrap() {
            Outgoing::Rendered(t) => frames.push(t),
            other => panic!("a rendered text frame, got {other:?}"),
        }
    }
    assert!(frames.iter().all(|f| f.len() <= arena::SMALL));
    let bytes: usize = frames.iter().map(|f| f.len()).sum();
    let buffers = 1 + frames
        .windows(2)
        .filter(|p| p[1].as_ptr() != p[0].as_ptr().wrapping_add(p[0].len()))
        .count();
    let bound = bytes.div_ceil(arena::CHUNK - arena::SMALL) + 1;
    assert!(
        buffers <= bound,
        "{buffers} buffers for {bytes} bytes (bound {bound})"
    );
    assert!(buffers > 1, "{bytes} bytes cannot fit one buffer");
}

/// A reply split off the connection's arena is queued as its bytes,
/// unchecked: they are the rendered text, UTF-8, non-ASCII included.
#[tokio::test]
async fn a_rendered_reply_is_queued_as_its_utf8_text() {
    use crate::envelope::{Outcome, Payload, WireId};
    let (outbox, mut reader, _) = outbox(Duration::from_secs(5));
    let reply = Message::Response {
        id: WireId::number(1),
        result: Outcome::Value(Payload::json("\"é→😀\"").unwrap()),
    };
    assert!(outbox.settle(&reply, ()));
    let Outgoing::Rendered(bytes) = reader.recv().await.unwrap() else {
        panic!("a rendered frame");
    };
    let text = std::str::from_utf8(&bytes).expect("UTF-8");
    assert!(text.contains("é→😀"), "{text}");
}
