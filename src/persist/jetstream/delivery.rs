//! One open subscription of the JetStream backend: the task that pulls its
//! durable consumer into the `deliveries` channel, and the deliveries it
//! holds for acknowledgement.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::consumer::pull::Stream as Pull;
use async_nats::jetstream::message::Acker;
use async_nats::jetstream::{AckKind, Message};
use futures_util::StreamExt;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use super::acks::AckState;
use crate::envelope::Payload;
use crate::persist::{Meters, Stored};

/// The header that marks a CBOR payload; JSON payloads carry none.
pub(super) const ENCODING_HEADER: &str = "Switchyard-Encoding";

/// What one open subscription has been sent and may acknowledge.
pub(super) struct Held {
    /// How to acknowledge each sent, unacknowledged message, by stream
    /// sequence. JetStream sends at most `max_ack_pending` (the window)
    /// unacknowledged, so this holds at most `window` entries; a message
    /// evicted while held is dropped from here when the map passes
    /// `window` (lowest first).
    ackers: BTreeMap<u64, Acker>,
    /// At most this many ackers, and this many out-of-order
    /// acknowledgements.
    window: usize,
    /// The subscription's first sequence: below it, nothing was its own.
    start: u64,
    /// Acknowledged sequences above the consumer's ack floor: what a
    /// resume, which recreates the consumer from that floor + 1, must not
    /// send again. Kept in the id bucket ([`super::acks`]). Past `window`
    /// entries the lowest is forgotten (it comes again after a resume: at
    /// least once).
    acked: BTreeSet<u64>,
    /// The highest sequence ever sent to this subscription (in this
    /// opening or, before a resume, by the old consumer).
    seen: u64,
    /// The next stream sequence expected on a first delivery: a first
    /// delivery above it means the ones between were evicted unsent.
    next: u64,
    /// Messages ≤ this were sent before this opening: sending one again
    /// is a redelivery.
    sent_before: u64,
}

// `Acker` has no `Debug`: show the sequences held.
impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("ackers", &self.ackers.keys().collect::<Vec<_>>())
            .field("start", &self.start)
            .field("acked", &self.acked)
            .field("seen", &self.seen)
            .field("next", &self.next)
            .field("sent_before", &self.sent_before)
            .finish()
    }
}

/// What acknowledging one sequence not held takes (one held, sent in
/// this opening and unacknowledged, takes a JetStream ack).
pub(super) enum NotHeld {
    /// Sent before this opening and not yet again: recorded, so that it
    /// is acknowledged, not sent, when it comes.
    Owed,
    /// Acknowledged already (or evicted unsent: JetStream keeps no record
    /// to tell): a no-op.
    Again,
    /// Never delivered to this subscription.
    Never,
}

impl Held {
    /// `start` is the subscription's first sequence, `floor` its
    /// consumer's ack floor (the consumer delivers from `floor + 1`),
    /// `seen` the highest sequence sent before this opening and `acked`
    /// what was acknowledged above the floor.
    pub(super) fn new(
        window: usize,
        start: u64,
        floor: u64,
        seen: u64,
        acked: impl IntoIterator<Item = u64>,
    ) -> Held {
        let mut held = Held {
            ackers: BTreeMap::new(),
            window,
            start,
            acked: acked.into_iter().filter(|s| *s > floor).collect(),
            seen,
            next: floor + 1,
            sent_before: seen,
        };
        held.trim();
        held
    }

    /// Takes the acker of `seq`, or says what acknowledging it takes.
    pub(super) fn take(&mut self, seq: u64) -> Result<Acker, NotHeld> {
        if let Some(acker) = self.ackers.remove(&seq) {
            return Ok(acker);
        }
        if seq == 0 || seq < self.start || seq > self.seen {
            return Err(NotHeld::Never);
        }
        if seq >= self.next && seq <= self.sent_before && !self.acked.contains(&seq) {
            return Err(NotHeld::Owed);
        }
        Err(NotHeld::Again)
    }

    /// Puts back an acker whose acknowledgement failed, so a retry can use
    /// it (unless a newer delivery replaced it meanwhile).
    pub(super) fn put_back(&mut self, seq: u64, acker: Acker) {
        self.ackers.entry(seq).or_insert(acker);
    }

    /// Records that `seq` was acknowledged; returns whether it lies above
    /// the consumer's ack floor (so the state must be saved for a resume).
    pub(super) fn acked(&mut self, seq: u64) -> bool {
        self.acked.insert(seq);
        self.trim();
        self.acked.contains(&seq)
    }

    /// The state to save.
    pub(super) fn state(&self) -> AckState {
        AckState {
            start: self.start,
            acked: self.acked.iter().copied().collect(),
        }
    }

    /// Drops the acknowledgements the consumer's ack floor covers: below
    /// the lowest sequence it still waits for (held unacknowledged, or not
    /// yet delivered in this opening), JetStream has every one
    /// acknowledged. Then keeps at most `window`.
    fn trim(&mut self) {
        let waiting = self
            .ackers
            .keys()
            .next()
            .map_or(self.next, |s| (*s).min(self.next));
        self.acked = self.acked.split_off(&waiting);
        while self.acked.len() > self.window {
            self.acked.pop_first();
        }
    }

    /// Records a delivery; returns how many sequences were skipped before
    /// it (evicted before the subscription got them), and what to do with
    /// it: send it (`Ok`: whether it is a redelivery), or, acknowledged
    /// already before a resume, acknowledge it on this consumer and not
    /// send it (`Err`: its acker).
    fn record(&mut self, seq: u64, delivered: i64, acker: Acker) -> (u64, Result<bool, Acker>) {
        let mut skipped = 0;
        if delivered <= 1 && seq >= self.next {
            skipped = seq - self.next;
            self.next = seq + 1;
        }
        self.seen = self.seen.max(seq);
        if self.acked.contains(&seq) {
            return (skipped, Err(acker));
        }
        self.ackers.insert(seq, acker);
        while self.ackers.len() > self.window {
            self.ackers.pop_first();
        }
        (skipped, Ok(delivered > 1 || seq <= self.sent_before))
    }
}

/// Turns a JetStream message into what the subscriber gets.
fn stored(topic: &str, msg: &Message) -> Result<(u64, i64, Stored), String> {
    let info = msg.info().map_err(|e| e.to_string())?;
    let nanos = info.published.unix_timestamp_nanos();
    let stored_at = u64::try_from(nanos)
        .map(|n| SystemTime::UNIX_EPOCH + Duration::from_nanos(n))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let cbor = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(ENCODING_HEADER))
        .is_some_and(|v| v.as_str() == "cbor");
    let data = if cbor {
        // A copy: a delivery may wait in its subscription's window, and
        // must not keep the NATS client's read buffer alive meanwhile.
        Payload::Cbor(bytes::Bytes::copy_from_slice(&msg.payload))
    } else {
        let text = String::from_utf8(msg.payload.to_vec()).map_err(|e| e.to_string())?;
        Payload::Json(
            RawValue::from_string(text)
                .map_err(|e| e.to_string())?
                .into(),
        )
    };
    let seq = info.stream_sequence;
    let stored = Stored {
        topic: topic.to_owned(),
        seq,
        stored_at,
        data,
    };
    Ok((seq, info.delivered, stored))
}

/// Pulls `messages` into `tx` until the receiver is dropped (detach: the
/// durable consumer stays) or the consumer is deleted (unsubscribe, or a
/// resume elsewhere that recreated it).
pub(super) async fn pump(
    topic: String,
    mut messages: Pull,
    tx: mpsc::Sender<Stored>,
    held: Arc<Mutex<Held>>,
    meters: Meters,
) {
    loop {
        let next = tokio::select! {
            () = tx.closed() => return,
            next = messages.next() => next,
        };
        let msg = match next {
            None => return,
            Some(Ok(msg)) => msg,
            Some(Err(e)) => {
                // Missed heartbeats and failed pulls (NATS away) are
                // retried by the stream itself; it ends on a deleted
                // consumer.
                tracing::debug!(target: "switchyard::persist", %topic, error = %e, "jetstream pull");
                continue;
            }
        };
        let (seq, delivered, stored) = match stored(&topic, &msg) {
            Ok(parts) => parts,
            Err(e) => {
                // Not written by switchyard: never sent, and never again.
                tracing::warn!(target: "switchyard::persist", %topic, error = %e, "undecodable jetstream message");
                // A lost term only means it comes again, and is termed again.
                let _ = msg.ack_with(AckKind::Term).await;
                continue;
            }
        };
        let (_, acker) = msg.split();
        let (skipped, delivery) = held.lock().record(seq, delivered, acker);
        // Messages evicted before this subscription got them.
        if skipped > 0 {
            meters.evicted_unacked.inc_by(skipped);
        }
        match delivery {
            // Sent again after the ack timeout or after a resume.
            Ok(true) => meters.redelivered.inc(),
            Ok(false) => {}
            Err(acker) => {
                // Acknowledged before the resume that recreated the
                // consumer. A lost ack only means it comes again, and is
                // acknowledged again.
                if let Err(e) = acker.double_ack().await {
                    tracing::debug!(target: "switchyard::persist", %topic, seq, error = %e, "jetstream ack of an acknowledged message");
                }
                continue;
            }
        }
        if tx.send(stored).await.is_err() {
            return;
        }
    }
}
