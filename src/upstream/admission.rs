//! Admission of calls to one upstream: a slot under the upstream-wide
//! pending cap (`max_pending`), a live link with a free in-flight slot
//! (`max_in_flight_per_connection`), and, when there is no room, a wait
//! in the upstream's one bounded queue (`max_queued`, `queue_timeout_ms`).
//!
//! Calls settled in place wait as entries of that queue ([`parking`]),
//! with no task, channel or timer of their own. The task path (batches,
//! notifications sent as requests, per-client links) waits on the pending
//! semaphore itself; it counts against the same `max_queued`. Whoever
//! frees a slot ([`Held`] dropped) places the next parked calls.
//!
//! [`parking`]: super::parking

use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

use super::link::Link;
use super::parking::Queue;
use super::UpstreamShared;
use crate::error::{ErrorKind, GatewayError, Side};

/// The room of one upstream: its pending cap, its links, and the calls
/// waiting for room.
#[derive(Debug)]
pub(crate) struct Admission {
    pub(super) shared: Arc<UpstreamShared>,
    /// One entry per pool slot: the live link, if any.
    pub(super) links: Vec<watch::Receiver<Option<Arc<Link>>>>,
    /// Bumped whenever any slot changes, so callers can wait for a link.
    pub(super) changed: watch::Receiver<u64>,
    /// Upstream-wide cap on calls in flight (`max_pending`).
    pub(super) pending: Arc<Semaphore>,
    /// Calls waiting for room, parked or in a task (bounded by
    /// `max_queued`).
    pub(super) queued: AtomicUsize,
    /// The parked calls, in arrival order (see `parking`).
    pub(super) parked: Mutex<Queue>,
    /// How many calls are parked (read without the lock on every call).
    pub(super) parked_len: AtomicUsize,
    /// Set while one thread places parked calls (one at a time keeps them
    /// in arrival order).
    pub(super) pumping: AtomicBool,
    /// Set by whoever freed room while another thread was placing.
    pub(super) again: AtomicBool,
    /// Wakes the queue's timer: an earlier expiry, or a first call.
    pub(super) wake: Notify,
}

/// Slots a call holds (pending, link in-flight). Dropping them places
/// the next parked calls, if any, in the room they leave.
#[derive(Debug)]
pub(crate) struct Held {
    pending: Option<OwnedSemaphorePermit>,
    depth: Option<OwnedSemaphorePermit>,
    admission: Arc<Admission>,
}

/// What a call written to a link holds until it settles (in place or in a
/// task): its admission slots, and its place in the upstream's
/// `upstream_in_flight` gauge; a reply also records
/// `upstream_request_duration`.
///
/// The metrics are reached through the admission the slots already hold,
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

/// Why a call found no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoRoom {
    /// `max_pending` calls are in flight, or every link is at its cap.
    Full,
    /// No live link.
    NoLink,
}

// === impl Admission ===

impl Admission {
    /// The room of an upstream whose pool slots are `links`.
    pub(super) fn new(
        shared: Arc<UpstreamShared>,
        links: Vec<watch::Receiver<Option<Arc<Link>>>>,
        changed: watch::Receiver<u64>,
    ) -> Arc<Self> {
        let pending = Arc::new(Semaphore::new(shared.cfg.max_pending.get()));
        Arc::new(Admission {
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
    pub(super) fn best_link(&self) -> Option<Arc<Link>> {
        self.links
            .iter()
            .filter_map(|s| s.borrow().as_ref().filter(|l| l.usable()).cloned())
            .min_by_key(|l| l.in_flight())
    }

    /// Live links right now.
    pub(super) fn connected(&self) -> usize {
        self.links
            .iter()
            .filter(|s| s.borrow().as_ref().is_some_and(|l| l.usable()))
            .count()
    }

    /// Takes a pending slot and the least-loaded live link's in-flight
    /// slot, if both are free right now.
    pub(super) fn try_room(self: &Arc<Self>) -> Result<(Arc<Link>, Held), NoRoom> {
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
        let held = Held {
            pending: Some(pending),
            depth: Some(depth),
            admission: self.clone(),
        };
        Ok((link, held))
    }

    /// Takes `n` slots under the pending cap, waiting (a task) in the
    /// bounded queue when the cap is reached.
    pub(super) async fn admit_many(self: &Arc<Self>, n: u32) -> Result<Held, GatewayError> {
        let held = |permit| Held {
            pending: Some(permit),
            depth: None,
            admission: self.clone(),
        };
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
    pub(super) fn enqueue(&self) -> bool {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.shared.cfg.max_queued {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// The least-loaded live link, waiting up to the connect timeout for one.
    pub(super) async fn pick_link(&self) -> Result<Arc<Link>, GatewayError> {
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
    pub(super) async fn link_slots(
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
        Ok(Held {
            pending: None,
            depth: Some(depth),
            admission: self.clone(),
        })
    }

    /// Room was freed: places parked calls, unless none waits.
    fn freed(self: &Arc<Self>) {
        // Pairs with the fence in `park`: either this thread sees the
        // parked call, or the parking thread sees the room freed here.
        fence(Ordering::SeqCst);
        if self.parked_len.load(Ordering::Relaxed) > 0 {
            self.pump();
        }
    }
}

// === impl Held ===

impl Held {
    /// The upstream the slots belong to.
    fn upstream(&self) -> &UpstreamShared {
        &self.admission.shared
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.pending.take());
        drop(self.depth.take());
        self.admission.freed();
    }
}

// === impl Slots ===

impl Slots {
    /// Marks a call in flight on the upstream of `held`, from now.
    pub(super) fn start(held: Held) -> Self {
        held.upstream().calls.0.inc();
        Slots {
            started: std::time::Instant::now(),
            counted: true,
            held,
        }
    }

    /// The call settled: no longer in flight. With `record_duration` (an
    /// outcome of a written request that is not a timeout) it also records
    /// the upstream-only duration.
    pub(super) fn settled(&mut self, record_duration: bool) {
        let calls = &self.held.upstream().calls;
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
            self.held.upstream().calls.0.dec();
        }
    }
}

/// The queue is full: refused at once.
pub(super) fn queue_full() -> GatewayError {
    // The upstream's capacity ran out, not the client's.
    GatewayError::with_detail(
        ErrorKind::ResourceExhausted,
        "upstream pending limit reached",
    )
    .on(Side::Upstream)
}

/// A call waited `patience` for room in vain.
pub(super) fn queue_timeout(patience: std::time::Duration) -> GatewayError {
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
pub(super) fn not_connected(name: &str) -> GatewayError {
    GatewayError::with_detail(
        ErrorKind::Unavailable,
        format!("upstream {name} is not connected"),
    )
}
