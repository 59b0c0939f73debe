//! One open subscription of the JetStream backend: the task that pulls its
//! durable consumer into the `deliveries` channel, and the deliveries it
//! holds for acknowledgement.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::consumer::pull::Stream as Pull;
use async_nats::jetstream::message::Acker;
use async_nats::jetstream::{AckKind, Message};
use futures_util::StreamExt;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::envelope::Payload;
use crate::persist::{Acked, Meters, Stored};

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
    /// At most this many ackers.
    window: usize,
    /// Every message ≤ this was acknowledged, or (before a resume) sent:
    /// acknowledging one is a no-op `Yes`.
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
            .field("seen", &self.seen)
            .field("next", &self.next)
            .field("sent_before", &self.sent_before)
            .finish()
    }
}

impl Held {
    /// `seen` covers what was sent or acknowledged before this opening;
    /// `start` is the consumer's first sequence.
    pub(super) fn new(window: usize, seen: u64, start: u64) -> Held {
        Held {
            ackers: BTreeMap::new(),
            window,
            seen,
            next: start,
            sent_before: seen,
        }
    }

    /// Takes the acker of `seq`, or says why there is none.
    pub(super) fn take(&mut self, seq: u64) -> Result<Acker, Acked> {
        match self.ackers.remove(&seq) {
            Some(acker) => Ok(acker),
            None if seq == 0 => Err(Acked::NeverDelivered),
            None if seq <= self.seen => Err(Acked::Yes),
            None => Err(Acked::NeverDelivered),
        }
    }

    /// Puts back an acker whose acknowledgement failed, so a retry can use
    /// it (unless a newer delivery replaced it meanwhile).
    pub(super) fn put_back(&mut self, seq: u64, acker: Acker) {
        self.ackers.entry(seq).or_insert(acker);
    }

    /// Records a delivery; returns how many sequences were skipped before
    /// it (evicted before the subscription got them), and whether it is a
    /// redelivery.
    fn record(&mut self, seq: u64, delivered: i64, acker: Acker) -> (u64, bool) {
        let mut skipped = 0;
        if delivered <= 1 && seq >= self.next {
            skipped = seq - self.next;
            self.next = seq + 1;
        }
        self.seen = self.seen.max(seq);
        self.ackers.insert(seq, acker);
        while self.ackers.len() > self.window {
            self.ackers.pop_first();
        }
        (skipped, delivered > 1 || seq <= self.sent_before)
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
        let (skipped, again) = held.lock().record(seq, delivered, acker);
        // Messages evicted before this subscription got them; messages
        // sent again after the ack timeout or after a resume.
        if skipped > 0 {
            meters.evicted_unacked.inc_by(skipped);
        }
        if again {
            meters.redelivered.inc();
        }
        if tx.send(stored).await.is_err() {
            return;
        }
    }
}
