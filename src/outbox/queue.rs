//! An outbox's queue ([`Inner`]), and how a frame gets into it: at once when there is room
//! (a message slot and the bytes), or, for a reply, waiting for room at
//! most the slow-consumer timeout. A message is rendered and queued under
//! the frame buffer's lock (`queue_now`, see `arena`). See the `outbox`
//! module doc for the policy and `budget` for the bytes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc::{
    self,
    error::{SendTimeoutError, TrySendError},
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::arena::Arena;
use super::budget::{Admitted, Budget, Waited};
use super::codec::OutCodec;
use super::outgoing::Outgoing;
use crate::dialect::client::ClientCodec;
use crate::envelope::Message;

/// What became of a message rendered and offered to the queue at once.
pub(super) enum Now {
    /// Queued.
    Queued,
    /// No room now: the frame, holding no frame buffer.
    Full(Outgoing),
    /// The client is gone.
    Closed,
    /// The dialect cannot carry it.
    Untranslatable,
}

/// Gauges an outbox keeps current (per listener). Its fields are public:
/// it is only the pair of series the session resolves for its listener and
/// hands to [`Outbox::channel`](super::Outbox::channel).
#[derive(Debug, Clone)]
pub struct Gauges {
    /// Most messages ever queued in one outbox.
    pub messages: prometheus::IntGauge,
    /// Most bytes ever queued (or waiting for room) in one outbox.
    pub bytes: prometheus::IntGauge,
}

/// An outbox's queue and everything that writes into it: shared by the
/// [`Outbox`](super::Outbox) handles and the writer's end.
#[derive(Debug)]
pub(super) struct Inner {
    tx: mpsc::Sender<Outgoing>,
    codec: OutCodec,
    /// How long the queue may stay full before the client is slow.
    patience: Duration,
    /// Fired when the queue stayed full for `patience`.
    slow: CancellationToken,
    gauges: Gauges,
    /// Bytes queued (`outbox_max_bytes`), and replies waiting for room.
    budget: Budget,
    /// A watch on a full queue is running (started by a dropped offer).
    watching: AtomicBool,
    /// Where small frames are rendered to; locked from rendering a
    /// frame to queueing it (see `arena`).
    arena: Mutex<Arena>,
}

// === impl Inner ===

impl Inner {
    /// A queue of `capacity` messages and `max_bytes` bytes rendered by
    /// `codec`, and the receiver its writer drains.
    pub(super) fn new(
        capacity: usize,
        max_bytes: usize,
        codec: OutCodec,
        patience: Duration,
        gauges: Gauges,
    ) -> (Arc<Self>, mpsc::Receiver<Outgoing>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let inner = Inner {
            tx,
            codec,
            patience,
            slow: CancellationToken::new(),
            gauges,
            budget: Budget::new(max_bytes),
            watching: AtomicBool::new(false),
            arena: Mutex::new(Arena::default()),
        };
        (Arc::new(inner), rx)
    }

    /// The client's codec.
    pub(super) fn codec(&self) -> &ClientCodec {
        self.codec.client()
    }

    /// Renders a batch reply.
    pub(super) fn encode_batch(&self, msgs: &[Message]) -> Option<Outgoing> {
        self.codec.encode_batch(msgs)
    }

    /// Fires when the queue stayed full for the slow-consumer timeout.
    pub(super) fn slow(&self) -> &CancellationToken {
        &self.slow
    }

    /// Resolves once the writer stopped reading.
    pub(super) async fn closed(&self) {
        self.tx.closed().await;
    }

    /// Queues `out` if a message slot is free now, whatever its bytes (a
    /// close or a ping holds none).
    pub(super) fn try_send(&self, out: Outgoing) -> bool {
        self.tx.try_send(out).is_ok()
    }

    /// The writer took a frame of `size` bytes out of the queue.
    pub(super) fn taken(&self, size: i64) {
        self.budget.taken(size);
    }

    /// Lets go of the frame buffer if nothing was rendered into it since
    /// the last call.
    pub(super) fn tidy(&self) {
        self.arena.lock().tidy();
    }

    /// The byte budget, for tests that check it.
    #[cfg(test)]
    pub(super) fn budget(&self) -> &Budget {
        &self.budget
    }

    /// True while a watch on a full queue runs, for tests that check it.
    #[cfg(test)]
    pub(super) fn watching(&self) -> bool {
        self.watching.load(Ordering::Acquire)
    }

    /// After a dropped offer of `size` bytes: if the queue gets no room
    /// for it (a message slot, and the bytes) within the slow-consumer
    /// timeout, the client is slow. One watch at a time.
    pub(super) fn watch_full(self: &Arc<Self>, size: i64) {
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + inner.patience;
            let room = || inner.tx.capacity() > 0 && inner.budget.fits(size);
            let waited = inner
                .budget
                .wait_for(deadline, inner.tx.closed(), room)
                .await;
            if waited == Waited::Timeout {
                inner.slow.cancel();
            }
            inner.watching.store(false, Ordering::Release);
        });
    }

    /// Renders `msg` (a small frame into the frame buffer) and queues
    /// it if `admit` and the message count let it in now. A frame given
    /// back is first copied out of the frame buffer, so that a frame
    /// waiting for room never holds one (see `arena`).
    pub(super) fn queue_now(
        &self,
        msg: &Message,
        admit: for<'a> fn(&'a Budget, i64) -> Option<(Admitted<'a>, i64)>,
    ) -> Now {
        let mut arena = self.arena.lock();
        let Some(out) = self.codec.encode(msg, Some(&mut arena)) else {
            return Now::Untranslatable;
        };
        match self.try_queue(out, admit) {
            Ok(()) => Now::Queued,
            Err(TrySendError::Full(out)) => Now::Full(Arena::detach(out)),
            Err(TrySendError::Closed(_)) => Now::Closed,
        }
    }

    /// Queues `out` now if it fits (`admit` decides for the bytes) and
    /// the count queue has room; gives it back as `Full` otherwise.
    pub(super) fn try_queue(
        &self,
        out: Outgoing,
        admit: for<'a> fn(&'a Budget, i64) -> Option<(Admitted<'a>, i64)>,
    ) -> Result<(), TrySendError<Outgoing>> {
        let Some((admitted, held)) = admit(&self.budget, out.size()) else {
            return Err(match self.tx.is_closed() {
                true => TrySendError::Closed(out),
                false => TrySendError::Full(out),
            });
        };
        self.tx.try_send(out)?;
        admitted.queued();
        self.high_bytes(held);
        self.queued();
        Ok(())
    }

    /// Queues `out`, waiting for room (bytes, then a message slot) at most
    /// the slow-consumer timeout in all; a queue that stays full that long
    /// makes the client slow, and `out` is dropped. So does a reply that
    /// the budget of replies waiting has no room for (`Over`, at once).
    pub(super) async fn queue(&self, out: Outgoing) -> Waited {
        let deadline = Instant::now() + self.patience;
        let size = out.size();
        let admitted = match self.budget.try_admit(size) {
            Some((admitted, held)) => {
                self.high_bytes(held);
                admitted
            }
            None => match self.wait_admit(size, deadline).await {
                Ok(admitted) => admitted,
                Err(waited) => return waited,
            },
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match self.tx.send_timeout(out, left).await {
            Ok(()) => {
                admitted.queued();
                self.queued();
                Waited::Ready
            }
            Err(SendTimeoutError::Timeout(_)) => {
                self.slow.cancel();
                Waited::Timeout
            }
            Err(SendTimeoutError::Closed(_)) => Waited::Closed,
        }
    }

    /// Waits until `size` bytes fit the budget (offers yield meanwhile).
    /// A reply whose bytes would take those of the replies waiting over the
    /// budget does not wait: the client is slow now, and `out` is dropped.
    async fn wait_admit(&self, size: i64, deadline: Instant) -> Result<Admitted<'_>, Waited> {
        let Some((waiting, held)) = self.budget.reply_waits(size) else {
            self.slow.cancel();
            return Err(Waited::Over);
        };
        self.high_bytes(held);
        let mut admitted = None;
        let waited = self
            .budget
            .wait_for(deadline, self.tx.closed(), || {
                admitted = self.budget.try_admit(size).map(|(a, _)| a);
                admitted.is_some()
            })
            .await;
        // Admitted: no longer waiting. (Its bytes count as both queued and
        // waiting for the few instructions in between.)
        drop(waiting);
        match (waited, admitted) {
            (Waited::Ready, Some(admitted)) => Ok(admitted),
            (Waited::Timeout, _) => {
                self.slow.cancel();
                Err(Waited::Timeout)
            }
            _ => Err(Waited::Closed),
        }
    }

    /// Raises the bytes high-water mark to `held` if above it.
    fn high_bytes(&self, held: i64) {
        if held > self.gauges.bytes.get() {
            self.gauges.bytes.set(held);
        }
    }

    /// Updates the message high-water mark after a message was queued.
    fn queued(&self) {
        let queued = self.tx.max_capacity() - self.tx.capacity();
        let queued = i64::try_from(queued).unwrap_or(i64::MAX);
        if queued > self.gauges.messages.get() {
            self.gauges.messages.set(queued);
        }
    }
}
