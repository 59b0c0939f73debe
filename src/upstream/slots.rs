//! What a call holds while it is out: its admission slots ([`Held`]: one
//! under the upstream's pending cap, one of its link's in-flight slots)
//! and its place in the upstream's in-flight gauge ([`Slots`]). Dropping
//! them tells the upstream's [`Room`] (its admission), which places the
//! next parked calls in the room they leave.
//!
//! A trait, not the admission itself: a call's slots live in its link's
//! correlator, below the admission that picks links.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use crate::telemetry::metrics::sharded::{Gauge, Histogram};

/// Where the room a call's slots leave goes (an upstream's admission).
pub(crate) trait Room: Send + Sync + std::fmt::Debug {
    /// Slots were given back: place what waits for room, if anything does.
    fn freed(&self);
    /// `upstream_in_flight` and `upstream_request_duration` of the upstream.
    fn calls(&self) -> &(Gauge, Histogram);
}

/// Slots a call holds (pending, link in-flight). Dropping them places
/// the next parked calls, if any, in the room they leave.
#[derive(Debug)]
pub(crate) struct Held {
    pending: Option<OwnedSemaphorePermit>,
    depth: Option<OwnedSemaphorePermit>,
    /// Told when the slots are dropped; reaches the upstream's metrics.
    room: Arc<dyn Room>,
}

/// What a call written to a link holds until it settles (in place or in a
/// task): its admission slots, and its place in the upstream's
/// `upstream_in_flight` gauge; a reply also records
/// `upstream_request_duration`.
///
/// The metrics are reached through the room the slots already hold,
/// rather than through handles of their own: cloning those handles would
/// write two reference counts that every worker thread shares, per call.
#[derive(Debug)]
pub(crate) struct Slots {
    /// When the call was written (for `upstream_request_duration`).
    started: std::time::Instant,
    /// Still counted in `upstream_in_flight`.
    counted: bool,
    /// Its pending and link slots; the room goes to the next parked call.
    held: Held,
}

// === impl Held ===

impl Held {
    /// Slots under the pending cap and/or on a link, in `room`.
    pub(crate) fn new(
        pending: Option<OwnedSemaphorePermit>,
        depth: Option<OwnedSemaphorePermit>,
        room: Arc<dyn Room>,
    ) -> Self {
        Held {
            pending,
            depth,
            room,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.pending.take());
        drop(self.depth.take());
        self.room.freed();
    }
}

// === impl Slots ===

impl Slots {
    /// Marks a call in flight on the upstream of `held`, from now.
    pub(crate) fn start(held: Held) -> Self {
        held.room.calls().0.inc();
        Slots {
            started: std::time::Instant::now(),
            counted: true,
            held,
        }
    }

    /// The call settled: no longer in flight. With `record_duration` (an
    /// outcome of a written request that is not a timeout) it also records
    /// the upstream-only duration.
    pub(crate) fn settled(&mut self, record_duration: bool) {
        let calls = self.held.room.calls();
        if record_duration {
            calls.1.observe_duration(self.started.elapsed());
        }
        if std::mem::take(&mut self.counted) {
            calls.0.dec();
        }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // Abandoned unsettled (the client left, the link closed).
        if self.counted {
            self.held.room.calls().0.dec();
        }
    }
}
