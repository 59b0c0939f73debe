//! Admission of calls to one upstream: a slot under the upstream-wide
//! pending cap (`max_pending`), a live link with a free in-flight slot
//! (`max_in_flight_per_connection`), and, when there is no room, a wait
//! in the upstream's one bounded queue (`max_queued`, `queue_timeout_ms`).
//!
//! Calls settled in place are written at once when there is room, else
//! wait as entries of that queue ([`Queue`]), with no task, channel or
//! timer of their own (`parking`: the in-place path). The task path
//! (batches, notifications sent as requests, per-client links) waits on
//! the pending semaphore itself; it counts against the same `max_queued`.
//! Whoever frees a slot ([`Held`] dropped) places the next parked calls.

use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::Instant;

use super::link::Link;
use super::shared::UpstreamShared;
use super::slots::{Held, Room};
use super::waiter::Submission;
use crate::error::{ErrorKind, GatewayError, Side};
use crate::telemetry::metrics::sharded::{Gauge, Histogram};

use lot::Lot;

mod lot;
mod parking;

/// The room of one upstream: its pending cap, its links, and the calls
/// waiting for room.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Itself, for the slots it hands out (they place parked calls when
    /// dropped).
    me: Weak<Admission>,
    shared: Arc<UpstreamShared>,
    /// One entry per pool slot: the live link, if any.
    links: Vec<watch::Receiver<Option<Arc<Link>>>>,
    /// Bumped whenever any slot changes, so callers can wait for a link.
    changed: watch::Receiver<u64>,
    /// Upstream-wide cap on calls in flight (`max_pending`).
    pending: Arc<Semaphore>,
    /// Calls waiting for room, parked or in a task (bounded by
    /// `max_queued`).
    queued: AtomicUsize,
    /// The parked calls, in arrival order (see `parking`).
    parked: Mutex<Queue>,
    /// How many calls are parked (read without the lock on every call).
    parked_len: AtomicUsize,
    /// Set while one thread places parked calls (one at a time keeps them
    /// in arrival order).
    pumping: AtomicBool,
    /// Set by whoever freed room while another thread was placing.
    again: AtomicBool,
    /// Wakes the queue's timer: an earlier expiry, or a first call.
    wake: Notify,
}

/// The parked calls of one upstream, and whether it can take them.
#[derive(Debug)]
struct Queue {
    /// The calls, in arrival and in expiry order.
    lot: Lot<Submission>,
    /// Since when no link has been up (`None` while one is).
    down_since: Option<Instant>,
    /// Set when the timer stopped (the upstream is closed): nothing parks.
    closed: bool,
}

// === impl Queue ===

impl Queue {
    /// An empty queue of an upstream with no link up yet.
    fn new() -> Self {
        Queue {
            lot: Lot::new(),
            down_since: Some(Instant::now()),
            closed: false,
        }
    }

    /// When the front call gives up for want of a link: no link has been
    /// up for `patience` since it came (or since the links went down, if
    /// later).
    fn front_unconnected(&mut self, patience: std::time::Duration) -> Option<Instant> {
        let since = self.down_since?;
        let enqueued = self.lot.front_enqueued()?;
        Some(enqueued.max(since) + patience)
    }
}

/// Why a call found no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoRoom {
    /// `max_pending` calls are in flight, or every link is at its cap.
    Full,
    /// No live link.
    NoLink,
}

// === impl Admission ===

impl Admission {
    /// The room of an upstream whose pool slots are `links`.
    pub(crate) fn new(
        shared: Arc<UpstreamShared>,
        links: Vec<watch::Receiver<Option<Arc<Link>>>>,
        changed: watch::Receiver<u64>,
    ) -> Arc<Self> {
        let pending = Arc::new(Semaphore::new(shared.cfg.max_pending.get()));
        Arc::new_cyclic(|me| Admission {
            me: me.clone(),
            shared,
            links,
            changed,
            pending,
            queued: AtomicUsize::new(0),
            parked: Mutex::new(Queue::new()),
            parked_len: AtomicUsize::new(0),
            pumping: AtomicBool::new(false),
            again: AtomicBool::new(false),
            wake: Notify::new(),
        })
    }

    /// The least-loaded live link, if any.
    fn best_link(&self) -> Option<Arc<Link>> {
        self.links
            .iter()
            .filter_map(|s| s.borrow().as_ref().filter(|l| l.usable()).cloned())
            .min_by_key(|l| l.in_flight())
    }

    /// Live links right now.
    pub(crate) fn connected(&self) -> usize {
        self.links
            .iter()
            .filter(|s| s.borrow().as_ref().is_some_and(|l| l.usable()))
            .count()
    }

    /// Takes a pending slot and the least-loaded live link's in-flight
    /// slot, if both are free right now.
    fn try_room(self: &Arc<Self>) -> Result<(Arc<Link>, Held), NoRoom> {
        // A slot taken here and given back at once needs no wake-up: the
        // caller parks its call and places parked calls next (or is the
        // one placing them).
        let Ok(pending) = self.pending.clone().try_acquire_owned() else {
            return Err(NoRoom::Full);
        };
        let link = self.best_link().ok_or(NoRoom::NoLink)?;
        let depth = link
            .depth()
            .clone()
            .try_acquire_owned()
            .map_err(|_| NoRoom::Full)?;
        let held = Held::new(Some(pending), Some(depth), self.clone());
        Ok((link, held))
    }

    /// Takes `n` slots under the pending cap, waiting (a task) in the
    /// bounded queue when the cap is reached.
    pub(crate) async fn admit_many(self: &Arc<Self>, n: u32) -> Result<Held, GatewayError> {
        let held = |permit| Held::new(Some(permit), None, self.clone());
        // Parked calls came first: only join them when none waits.
        if self.parked_len.load(Ordering::Acquire) == 0 {
            if let Ok(permit) = self.pending.clone().try_acquire_many_owned(n) {
                return Ok(held(permit));
            }
        }
        if !self.enqueue() {
            return Err(queue_full());
        }
        let patience = self.shared.cfg.queue_timeout;
        let permit =
            tokio::time::timeout(patience, self.pending.clone().acquire_many_owned(n)).await;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        match permit {
            Ok(Ok(permit)) => Ok(held(permit)),
            Ok(Err(_)) => Err(queue_full()),
            Err(_) => Err(queue_timeout(patience)),
        }
    }

    /// Counts one more waiting call; false when `max_queued` wait already.
    fn enqueue(&self) -> bool {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.shared.cfg.max_queued {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// The least-loaded live link, waiting up to the connect timeout for one.
    pub(crate) async fn pick_link(&self) -> Result<Arc<Link>, GatewayError> {
        let deadline = tokio::time::Instant::now() + self.shared.cfg.connect_timeout;
        let mut changed = self.changed.clone();
        loop {
            if let Some(link) = self.best_link() {
                return Ok(link);
            }
            let wait = tokio::time::timeout_at(deadline, changed.changed()).await;
            if !matches!(wait, Ok(Ok(()))) {
                return Err(not_connected(&self.shared.cfg.name));
            }
        }
    }

    /// `n` in-flight slots on `link` (a task waits for them).
    pub(crate) async fn link_slots(
        self: &Arc<Self>,
        link: &Link,
        n: u32,
    ) -> Result<Held, GatewayError> {
        let depth = link
            .depth()
            .clone()
            .acquire_many_owned(n)
            .await
            .map_err(|_| GatewayError::new(ErrorKind::Unavailable))?;
        Ok(Held::new(None, Some(depth), self.clone()))
    }
}

impl Room for Admission {
    /// Places parked calls in the room freed, unless none waits.
    fn freed(&self) {
        // Pairs with the fence in `park`: either this thread sees the
        // parked call, or the parking thread sees the room freed here.
        fence(Ordering::SeqCst);
        if self.parked_len.load(Ordering::Relaxed) > 0 {
            // Gone only while the admission itself is dropped.
            if let Some(me) = self.me.upgrade() {
                me.pump();
            }
        }
    }

    fn calls(&self) -> &(Gauge, Histogram) {
        &self.shared.calls
    }
}

/// The queue is full: refused at once.
fn queue_full() -> GatewayError {
    // The upstream's capacity ran out, not the client's.
    GatewayError::with_detail(
        ErrorKind::ResourceExhausted,
        "upstream pending limit reached",
    )
    .on(Side::Upstream)
}

/// A call waited `patience` for room in vain.
fn queue_timeout(patience: std::time::Duration) -> GatewayError {
    GatewayError::with_detail(
        ErrorKind::ResourceExhausted,
        format!(
            "no upstream capacity within the queue timeout ({} ms)",
            patience.as_millis()
        ),
    )
    .on(Side::Upstream)
}

/// No live link within the connect timeout.
fn not_connected(name: &str) -> GatewayError {
    GatewayError::with_detail(
        ErrorKind::Unavailable,
        format!("upstream {name} is not connected"),
    )
}
