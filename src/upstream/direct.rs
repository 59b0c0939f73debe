//! Calls settled in place: the fast path for pooled (shared-mode) calls.
//!
//! When an upstream has room right now (a pending slot, a live link with a
//! free in-flight slot), a request needs no task of its own: it is
//! registered with a [`Completion`] that the link's reader (or its deadline
//! sweeper, or its failure) runs when the call settles, and which renders
//! the reply straight into the client's outbox. Replies that arrive
//! together then leave together, in one write. When there is no room, the
//! caller takes the waiting path ([`Upstream::call_until`]) instead.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::link::{Completion, Link, Waiter};
use super::Upstream;
use crate::envelope::Payload;
use crate::error::GatewayError;
use crate::telemetry::metrics::UpstreamCall;

/// Longest sleep of a link's deadline sweeper while calls are pending, so a
/// call with an earlier deadline than the ones seen is late by at most this.
const SWEEP_AT_LEAST_EVERY: Duration = Duration::from_millis(50);

/// What a call settled in place holds until it settles: its admission
/// slots and its upstream metrics guard.
#[derive(Debug)]
pub(crate) struct Slots {
    _pending: OwnedSemaphorePermit,
    _depth: OwnedSemaphorePermit,
    /// Marks the call in flight on the upstream; records its duration when
    /// the reply arrives.
    pub(crate) call: UpstreamCall,
}

/// Room on an upstream for one call, taken without waiting.
#[derive(Debug)]
pub(crate) struct Room {
    link: Arc<Link>,
    slots: Slots,
}

// === impl Upstream ===

impl Upstream {
    /// Takes room for one call if there is some right now: a pending slot
    /// and the least-loaded live link with a free in-flight slot.
    /// `now` is when the call starts (for its upstream duration).
    pub(crate) fn try_room(&self, now: std::time::Instant) -> Option<Room> {
        let pending = self.pending.clone().try_acquire_owned().ok()?;
        let link = self
            .slots
            .iter()
            .filter_map(|s| s.borrow().as_ref().filter(|l| l.usable()).cloned())
            .min_by_key(|l| l.in_flight())?;
        let depth = link.depth.clone().try_acquire_owned().ok()?;
        let call = link.shared.start_call_at(now);
        Some(Room {
            link,
            slots: Slots {
                _pending: pending,
                _depth: depth,
                call,
            },
        })
    }
}

// === impl Room ===

impl Room {
    /// The slots to hand to the completion (released when it settles).
    pub(crate) fn take_slots(self) -> (Placed, Slots) {
        (Placed { link: self.link }, self.slots)
    }
}

/// A link chosen for a call, before the request is written.
#[derive(Debug)]
pub(crate) struct Placed {
    link: Arc<Link>,
}

// === impl Placed ===

impl Placed {
    /// Writes the request; `completion` gets the outcome. On failure the
    /// completion is returned with the error so it can answer at once.
    pub(crate) fn send(
        self,
        method: &str,
        params: Option<&Payload>,
        completion: Box<dyn Completion>,
    ) -> Result<(Arc<Link>, u64), (GatewayError, Option<Waiter>)> {
        let gid = self
            .link
            .send_request(method, params, Waiter::Direct(completion))?;
        Ok((self.link, gid))
    }
}

/// Times out a link's in-place calls at their deadlines until the link
/// closes. Sleeps while none is pending.
pub(super) async fn sweep(link: Arc<Link>) {
    loop {
        let next = link.expire_due(Instant::now());
        let wake = match next {
            Some(at) => at.min(Instant::now() + SWEEP_AT_LEAST_EVERY),
            None => {
                tokio::select! {
                    () = link.direct_added.notified() => continue,
                    () = link.closed.cancelled() => return,
                }
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = link.closed.cancelled() => return,
        }
    }
}
