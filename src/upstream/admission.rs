//! Admission of calls to one upstream: a slot under the upstream-wide
//! pending cap (`max_pending`), a live link with a free in-flight slot
//! (`max_in_flight_per_connection`), and, when there is no room, a wait
//! in the upstream's one bounded queue (`max_queued`, `queue_timeout_ms`).
//!
//! Calls settled in place are written at once when there is room, else
//! wait as entries of that queue ([`Queue`]), with no task, channel or
//! timer of their own (the in-place path, below). The task path
//! (batches, notifications sent as requests, per-client links) waits on
//! the pending cap itself; it counts against the same `max_queued`.
//! Whoever frees a slot ([`Held`] dropped) places the next parked calls.
//!
//! ## The in-place path
//!
//! Calls settled in place: the path of every request to a pooled
//! (shared-mode, non-streaming) upstream, and its waiting path: one
//! bounded FIFO of parked calls per pooled upstream, and one timer for
//! all of them.
//!
//! A request needs no task of its own: it is registered with a
//! [`Settle`] that the link's reader (or its deadline sweeper, or its
//! failure) hands the outcome to when the call settles: its client
//! renders the reply straight into its outbox. Replies that arrive
//! together then leave together, in one write.
//!
//! A call that finds no room (no pending slot, no live link, or every
//! link at its in-flight cap) is parked here, in arrival order, with no
//! task, channel or timer of its own. Whoever frees room (a call's
//! [`Held`] slots dropped, a link coming up) writes the next parked calls,
//! one placer at a time so that they go out in the order they came. One
//! task per upstream ([`Admission::run_queue`]) answers the calls that
//! waited too long:
//!
//! - `resource_exhausted` (side: upstream) after `queue_timeout_ms`;
//! - `timeout` at the request's deadline, if that comes first;
//! - `unavailable` once no link has been up for `connect_timeout_ms`
//!   while it waited (as the task path answers when nothing connects).
//!
//! Bounds: at most `max_queued` calls wait (parked here or in a task),
//! beyond it a call is refused at once with `resource_exhausted`; each
//! parked call also holds one of its client's in-flight slots
//! (`max_in_flight`). A call whose client left is dropped unsent when it
//! comes up (to be written, or to expire); a shutdown's grace period over,
//! a session withdraws its parked calls and answers them `unavailable`.
//! The queue itself (`lot`) allocates nothing per call once grown: its
//! slab and its two orders keep room for 64 calls when it runs empty, and
//! hold at most `2n + 64` keys each for `n` calls parked.

use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::correlator::{Caller, Held, Receipt, Room, Settle, Slots, Submission, Waiter};
use super::link::Link;
use super::shared::UpstreamShared;
use crate::error::{ErrorKind, GatewayError, Side};
use crate::limits::cap::Cap;
use crate::telemetry::metrics::sharded::{Gauge, Histogram};

use lot::{Lot, Parked};

mod lot;

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
    pending: Cap,
    /// Calls waiting for room, parked or in a task (bounded by
    /// `max_queued`).
    queued: AtomicUsize,
    /// The parked calls, in arrival order (see the in-place path above).
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
        let pending = Cap::new(shared.cfg.max_pending.get());
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

    /// The least-loaded live link, if any (the first of them on a tie).
    /// Only a link less loaded than those before it is cloned: on every
    /// call, each clone writes a count that every worker thread shares.
    fn best_link(&self) -> Option<Arc<Link>> {
        let mut best: Option<(Arc<Link>, usize)> = None;
        for slot in &self.links {
            let slot = slot.borrow();
            let Some(link) = slot.as_ref().filter(|l| l.usable()) else {
                continue;
            };
            let load = link.in_flight();
            if best.as_ref().is_none_or(|(_, least)| load < *least) {
                best = Some((link.clone(), load));
            }
        }
        best.map(|(link, _)| link)
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
        if !self.pending.try_take() {
            return Err(NoRoom::Full);
        }
        let Some(link) = self.best_link() else {
            self.pending.give_back(1);
            return Err(NoRoom::NoLink);
        };
        let Some(depth) = link.depth().try_hold(1) else {
            self.pending.give_back(1);
            return Err(NoRoom::Full);
        };
        let held = Held::new(1, Some(depth), self.clone());
        Ok((link, held))
    }

    /// Takes `n` slots under the pending cap, waiting (a task) in the
    /// bounded queue when the cap is reached.
    pub(crate) async fn admit_many(self: &Arc<Self>, n: u32) -> Result<Held, GatewayError> {
        let held = || Held::new(n, None, self.clone());
        // Parked calls came first: only join them when none waits.
        if self.parked_len.load(Ordering::Acquire) == 0 && self.pending.try_take_many(n) {
            return Ok(held());
        }
        if !self.enqueue() {
            return Err(queue_full());
        }
        let patience = self.shared.cfg.queue_timeout;
        let taken = tokio::time::timeout(patience, self.pending.take_many(n)).await;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        match taken {
            Ok(Ok(())) => Ok(held()),
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
            .hold(n)
            .await
            .map_err(|_| GatewayError::new(ErrorKind::Unavailable))?;
        Ok(Held::new(0, Some(depth), self.clone()))
    }
}

impl Room for Admission {
    /// Takes `pending` slots back and places parked calls in the room
    /// freed, unless none waits.
    fn freed(&self, pending: u32) {
        self.pending.give_back(pending as usize);
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

// === impl Admission: the in-place path ===

impl Admission {
    /// Writes `call` on a link with room now, or parks it until there is
    /// room (behind the calls parked before it), or refuses it when the
    /// queue is full. Returns the receipt of a call written now: its
    /// caller records it itself ([`Caller::written`] is for calls written
    /// later), so the call's client is not shared once more to be told.
    pub(crate) fn submit(self: &Arc<Self>, call: Submission) -> Option<Receipt> {
        // Parked calls came first: a new one only jumps in when none waits.
        let why = if self.parked_len.load(std::sync::atomic::Ordering::Acquire) == 0 {
            match self.try_room() {
                Ok((link, held)) => {
                    let placed = call.placed;
                    return self.place(link, held, call, placed);
                }
                Err(why) => why,
            }
        } else {
            NoRoom::Full
        };
        self.park(call, why);
        None
    }

    /// Writes `call` on `link`, in the room `held`, at `now` (when its
    /// upstream duration starts). Returns where it was written, if it was.
    fn place(
        &self,
        link: Arc<Link>,
        held: Held,
        call: Submission,
        now: std::time::Instant,
    ) -> Option<Receipt> {
        let Submission {
            method,
            params,
            done,
            placed: _,
        } = call;
        // Held inline (about 64 bytes in the correlator's entry) rather than
        // boxed: one allocation per call fewer.
        let slots = Slots::start_at(held, now);
        match link.send_request(&method, params.as_ref(), Waiter::Direct(done, slots)) {
            Ok(gid) => Some(Receipt::new(link, gid)),
            Err((e, Some(waiter))) => {
                waiter.unsent(e);
                None
            }
            Err((e, None)) => {
                // Abandoned (its client left, or the link failed) between
                // its registration and the failed write: whoever abandoned
                // it has settled it already.
                tracing::debug!(upstream = %self.shared.cfg.name, error = %e, "in-place call abandoned before it was written");
                None
            }
        }
    }

    /// Parks `call` (it found no room because of `why`), unless
    /// `max_queued` calls wait already: then it is refused at once.
    fn park(self: &Arc<Self>, call: Submission, why: NoRoom) {
        if !self.enqueue() {
            let err = match why {
                NoRoom::Full => queue_full(),
                NoRoom::NoLink => not_connected(&self.shared.cfg.name),
            };
            call.done.complete(Err(err));
            return;
        }
        let now = Instant::now();
        let patience = now + self.shared.cfg.queue_timeout;
        let deadline = call.done.deadline;
        let by_deadline = deadline < patience;
        let expires = if by_deadline { deadline } else { patience };
        let mut q = self.parked.lock();
        if q.closed {
            drop(q);
            self.queued.fetch_sub(1, Ordering::AcqRel);
            call.done
                .complete(Err(not_connected(&self.shared.cfg.name)));
            return;
        }
        let wake = q.lot.push(call, now, expires, by_deadline);
        self.parked_len.fetch_add(1, Ordering::Release);
        drop(q);
        if wake {
            self.wake.notify_one();
        }
        // Pairs with the fence in `freed`: room freed meanwhile is seen.
        fence(Ordering::SeqCst);
        self.pump();
    }

    /// Writes parked calls while there is room. One thread at a time: a
    /// thread that frees room while another places leaves it a note.
    pub(super) fn pump(self: &Arc<Self>) {
        self.again.store(true, Ordering::SeqCst);
        while !self.pumping.swap(true, Ordering::SeqCst) {
            while self.again.swap(false, Ordering::SeqCst) {
                self.place_parked();
            }
            self.pumping.store(false, Ordering::SeqCst);
            if !self.again.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    /// Writes parked calls, oldest first, until there is no room or none
    /// is left. Calls of clients that left are dropped unsent.
    fn place_parked(self: &Arc<Self>) {
        while self.parked_len.load(Ordering::Acquire) > 0 {
            let Ok((link, held)) = self.try_room() else {
                return;
            };
            loop {
                let Some(p) = self.pop_front() else {
                    return;
                };
                if p.call.done.caller.gone() {
                    continue;
                }
                if let Some(err) = p.call.done.caller.closing() {
                    p.call.done.complete(Err(err));
                    continue;
                }
                // One clock read: the deadline's check and the write's start.
                let now = Instant::now();
                if p.call.done.deadline <= now {
                    p.call
                        .done
                        .complete(Err(GatewayError::new(ErrorKind::Timeout)));
                    continue;
                }
                let (caller, token) = (p.call.done.caller.clone(), p.call.done.token);
                if let Some(receipt) = self.place(link, held, p.call, now.into_std()) {
                    caller.written(token, receipt);
                }
                break;
            }
        }
    }

    /// Takes the oldest parked call out.
    fn pop_front(&self) -> Option<Parked<Submission>> {
        let mut q = self.parked.lock();
        let p = q.lot.pop_front()?;
        self.parked_len.fetch_sub(1, Ordering::Release);
        drop(q);
        self.queued.fetch_sub(1, Ordering::AcqRel);
        Some(p)
    }

    /// Answers the parked calls that waited too long; returns when the
    /// next one is due.
    fn expire_due(&self, now: Instant) -> Option<Instant> {
        let patience = self.shared.cfg.connect_timeout;
        let mut due = Vec::new();
        let mut q = self.parked.lock();
        while let Some(p) = q.lot.pop_expired(now) {
            let err = if p.by_deadline {
                GatewayError::new(ErrorKind::Timeout)
            } else {
                queue_timeout(self.shared.cfg.queue_timeout)
            };
            due.push((p.call, err));
        }
        while q.front_unconnected(patience).is_some_and(|at| at <= now) {
            if let Some(p) = q.lot.pop_front() {
                due.push((p.call, not_connected(&self.shared.cfg.name)));
            }
        }
        let next = match (q.lot.next_expiry(), q.front_unconnected(patience)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.parked_len.fetch_sub(due.len(), Ordering::Release);
        drop(q);
        self.queued.fetch_sub(due.len(), Ordering::AcqRel);
        for (call, err) in due {
            if !call.done.caller.gone() {
                call.done.complete(Err(err));
            }
        }
        next
    }

    /// Takes out every parked call of `caller` (its shutdown grace period
    /// is over: it answers them itself).
    pub(crate) fn withdraw(&self, caller: &Arc<dyn Caller>) -> Vec<Settle> {
        let me = Arc::as_ptr(caller).cast::<()>();
        let mut q = self.parked.lock();
        let out: Vec<_> = q
            .lot
            .take_where(|call| std::ptr::eq(Arc::as_ptr(&call.done.caller).cast::<()>(), me))
            .into_iter()
            .map(|call| call.done)
            .collect();
        self.parked_len.fetch_sub(out.len(), Ordering::Release);
        drop(q);
        self.queued.fetch_sub(out.len(), Ordering::AcqRel);
        out
    }

    /// The pool's links changed: note whether any is up, and place parked
    /// calls on a new one.
    fn links_changed(self: &Arc<Self>) {
        let up = self.connected() > 0;
        {
            let mut q = self.parked.lock();
            match (up, q.down_since) {
                (true, _) => q.down_since = None,
                (false, None) => q.down_since = Some(Instant::now()),
                (false, Some(_)) => {}
            }
        }
        if up {
            self.pump();
        }
    }

    /// The queue's one timer, and its link watcher, until `shutdown`; then
    /// every call still parked is answered `unavailable`.
    pub(crate) async fn run_queue(self: Arc<Self>, shutdown: CancellationToken) {
        let admission = self;
        let mut changed = admission.changed.clone();
        admission.links_changed();
        loop {
            let next = admission.expire_due(Instant::now());
            let due = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                seen = changed.changed() => {
                    if seen.is_err() {
                        break;
                    }
                    admission.links_changed();
                }
                () = admission.wake.notified() => {}
                () = due => {}
            }
        }
        let left: Vec<Submission> = {
            let mut q = admission.parked.lock();
            q.closed = true;
            let left = q.lot.drain();
            admission.parked_len.store(0, Ordering::Release);
            left
        };
        admission.queued.fetch_sub(left.len(), Ordering::AcqRel);
        for call in left {
            if !call.done.caller.gone() {
                call.done
                    .complete(Err(not_connected(&admission.shared.cfg.name)));
            }
        }
    }
}
