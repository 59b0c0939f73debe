//! How a frame gets into an outbox's queue: at once when there is room
//! (a message slot and the bytes), or, for a reply, waiting for room at
//! most the slow-consumer timeout. A message is rendered and queued under
//! the frame buffer's lock (`queue_now`, see `arena`). See the `outbox`
//! module doc for the policy and `budget` for the bytes.

use tokio::sync::mpsc::error::{SendTimeoutError, TrySendError};
use tokio::time::Instant;

use super::arena::Arena;
use super::budget::{Admitted, Budget, Waited};
use super::{Inner, Outgoing};
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

// === impl Inner ===

impl Inner {
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
