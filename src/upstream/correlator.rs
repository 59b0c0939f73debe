//! A call out on a link: its gateway id, who waits for its outcome, and
//! the room it holds until it settles.
//!
//! [`Correlator`] is one link's table of calls out, by gateway id. A plain
//! synchronous data structure (`&mut self`, no locks, no I/O): the link
//! wraps it in a mutex with short critical sections. Gateway ids are
//! integers from 1, below 2^53 (so they survive a float64 round trip
//! through daemons such as hld), never the client's id. The pending
//! waiters sit in a ring of slots found by the id's low bits (no hashing
//! per call); an id whose slot still holds a call is skipped when ids are
//! issued, so ids go up by one, but for the slots of calls still pending.
//! Every id that leaves the pending table is remembered in a bounded FIFO,
//! so that a
//! reply arriving for it later is classified as *stale* (timed out or
//! abandoned) or *duplicate* (already answered) instead of *unknown*.
//!
//! The table's entries are the waiters (`Waiter`): who receives a call's
//! outcome. Either a task awaiting a oneshot, or the client of a call
//! settled in place (`Settle`), to which whoever settles the call (the
//! link's reader, its deadline sweeper, or its failure) hands the outcome.
//! That client is a `Caller`: it keeps the call's own state, so that
//! handing a call over costs no allocation, and is told where the call
//! went by a `Receipt`, which takes the call back from its link
//! (`TakeBack`) should the client leave first. A `Submission` is one such
//! call as the router hands it to the upstream.
//!
//! A call also holds room while it is out: its admission slots (`Held`:
//! one under the upstream's pending cap, one of its link's in-flight
//! slots) and its place in the upstream's in-flight gauge (`Slots`).
//! Dropping them tells the upstream's `Room` (its admission), which places
//! the next parked calls in the room they leave. `Room` is a trait, not
//! the admission itself: the calls a link holds sit below the admission
//! that picks links, and nothing here imports it.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::envelope::{Message, Method, Payload};
use crate::error::{ErrorKind, GatewayError};
use crate::limits::cap::Taken;
use crate::telemetry::metrics::sharded::{Gauge, Histogram};

// === the table: gateway ids ===

/// Largest gateway id issued (ids stay below 2^53), and how a reply's id
/// token is read back: the dialect's rule (ids are written by the codec).
pub use crate::dialect::link::{parse_gateway_id, MAX_GATEWAY_ID};

/// How many settled and abandoned ids are remembered for classification.
const REMEMBERED_IDS: usize = 1024;

/// What became of a reply's id.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolution<T> {
    /// The id was pending: here is its waiter.
    Pending(T),
    /// The id was abandoned (timed out, or its client went away).
    Stale,
    /// The id was already answered.
    Duplicate,
    /// switchyard never issued this id (or forgot it long ago).
    Unknown,
}

/// The connection's reply order broke (ordered mode): it must be closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("reply out of order: expected id {expected:?}, got {got:?}")]
pub struct OutOfSync {
    /// The oldest id in flight, if any.
    pub expected: Option<u64>,
    /// The id the reply carried (`None` for `id:null`).
    pub got: Option<u64>,
}

/// Pending table of one upstream connection.
#[derive(Debug)]
pub struct Correlator<T> {
    /// Next id to issue.
    next_id: u64,
    /// Waiters by gateway id.
    pending: Ring<T>,
    /// Ids in the order they were written, when replies must come in order
    /// (hld). Abandoned ids stay here until their late reply arrives.
    order: Option<VecDeque<u64>>,
    /// Recently abandoned ids (stale replies), bounded.
    abandoned: Remembered,
    /// Recently answered ids (duplicate replies), bounded.
    settled: Remembered,
    /// Set once the connection is gone: no new entries.
    closed: bool,
}

/// Pending waiters by id: slot `id % len` holds the waiter of `id`, if it
/// is pending. At most half the slots are used (the ring doubles before),
/// so a free slot for a new id comes soon; `len` is a power of two, at
/// least [`RING_MIN`] and at most four times the most calls pending at
/// once. It never shrinks (as a hash table would not).
#[derive(Debug)]
struct Ring<T> {
    slots: Vec<Option<(u64, T)>>,
    used: usize,
}

/// Slots of a ring when its first call comes.
const RING_MIN: usize = 16;

/// The last [`REMEMBERED_IDS`] ids, oldest first. Remembering one is a
/// push (no hashing, on every call); looking one up scans them, which only
/// a reply that matches no pending call does.
#[derive(Debug, Default)]
struct Remembered {
    fifo: VecDeque<u64>,
}

// === impl Correlator ===

impl<T> Correlator<T> {
    /// An empty table; `ordered` checks that replies come in write order.
    pub fn new(ordered: bool) -> Self {
        Correlator {
            next_id: 1,
            pending: Ring::new(),
            order: ordered.then(VecDeque::new),
            abandoned: Remembered::default(),
            settled: Remembered::default(),
            closed: false,
        }
    }

    /// Registers a waiter and returns its fresh gateway id, or gives the
    /// waiter back when the connection is closed.
    pub fn insert(&mut self, waiter: T) -> Result<u64, T> {
        if self.closed {
            return Err(waiter);
        }
        self.pending.make_room();
        let mut id = self.next_id;
        // Skip ids whose slot holds a call still pending (an id itself
        // still pending after a wrap-around, 2^53 requests later, is one).
        while !self.pending.is_free(id) {
            id = next(id);
        }
        self.next_id = next(id);
        self.pending.put(id, waiter);
        if let Some(order) = &mut self.order {
            order.push_back(id);
        }
        Ok(id)
    }

    /// Takes back an id that was never written (e.g. the line was too long).
    pub fn cancel(&mut self, id: u64) -> Option<T> {
        if let Some(order) = &mut self.order {
            if order.back() == Some(&id) {
                order.pop_back();
            } else {
                order.retain(|&x| x != id);
            }
        }
        self.pending.remove(&id)
    }

    /// Gives up on an id (timeout, client gone). A later reply is stale.
    pub fn abandon(&mut self, id: u64) -> Option<T> {
        let waiter = self.pending.remove(&id)?;
        self.abandoned.remember(id);
        Some(waiter)
    }

    /// Abandons every pending id whose waiter matches `due` (deadlines
    /// passed) and returns them with their waiters. Later replies are stale.
    pub fn abandon_where(&mut self, mut due: impl FnMut(&T) -> bool) -> Vec<(u64, T)> {
        let ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, w)| due(w))
            .map(|(id, _)| id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.abandon(id).map(|w| (id, w)))
            .collect()
    }

    /// The waiters currently pending, in no particular order.
    pub fn pending_values(&self) -> impl Iterator<Item = &T> {
        self.pending.iter().map(|(_, w)| w)
    }

    /// Settles a reply by id (unordered connections).
    pub fn resolve(&mut self, id: u64) -> Resolution<T> {
        if let Some(waiter) = self.pending.remove(&id) {
            self.settled.remember(id);
            return Resolution::Pending(waiter);
        }
        self.classify(id)
    }

    /// Settles a reply on an ordered connection: it must answer the oldest
    /// id written. `None` (an `id:null` error) is attributed to that id.
    pub fn resolve_ordered(&mut self, id: Option<u64>) -> Result<Resolution<T>, OutOfSync> {
        let Some(order) = &mut self.order else {
            return Ok(id.map_or(Resolution::Unknown, |id| self.resolve(id)));
        };
        let expected = order.front().copied();
        match (expected, id) {
            (Some(front), Some(got)) if front != got => Err(OutOfSync { expected, got: id }),
            (None, _) => Err(OutOfSync { expected, got: id }),
            (Some(front), _) => {
                order.pop_front();
                Ok(self.resolve(front))
            }
        }
    }

    /// Closes the table and hands back every waiter (to fail them).
    pub fn close(&mut self) -> Vec<T> {
        self.closed = true;
        if let Some(order) = &mut self.order {
            order.clear();
        }
        self.pending.drain()
    }

    /// Waiters currently pending.
    pub fn len(&self) -> usize {
        self.pending.used
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.used == 0
    }

    /// Ids written and not yet answered, abandoned ones included (ordered
    /// connections only; 0 otherwise).
    pub fn unanswered(&self) -> usize {
        self.order.as_ref().map_or(0, VecDeque::len)
    }

    /// True once [`close`](Self::close) ran.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    fn classify(&self, id: u64) -> Resolution<T> {
        if self.abandoned.contains(id) {
            Resolution::Stale
        } else if self.settled.contains(id) {
            Resolution::Duplicate
        } else {
            Resolution::Unknown
        }
    }
}

fn next(id: u64) -> u64 {
    if id >= MAX_GATEWAY_ID {
        1
    } else {
        id + 1
    }
}

// === impl Ring ===

impl<T> Ring<T> {
    fn new() -> Self {
        Ring {
            slots: Vec::new(),
            used: 0,
        }
    }

    /// The slot of `id` (the ring has slots).
    fn slot(&self, id: u64) -> usize {
        // The mask is below the ring's length: a `usize`.
        (id & (self.slots.len() as u64 - 1)) as usize
    }

    /// Doubles the ring, if need be, so that one more call leaves at most
    /// half its slots used. Ids distinct modulo the old length are distinct
    /// modulo the new one: every call finds its slot free.
    fn make_room(&mut self) {
        if (self.used + 1) * 2 <= self.slots.len() {
            return;
        }
        let len = (self.slots.len() * 2).max(RING_MIN);
        let old = std::mem::replace(&mut self.slots, Vec::with_capacity(len));
        self.slots.resize_with(len, || None);
        for (id, waiter) in old.into_iter().flatten() {
            let at = self.slot(id);
            if let Some(slot) = self.slots.get_mut(at) {
                *slot = Some((id, waiter));
            }
        }
    }

    /// True when `id`'s slot is free (after [`Self::make_room`]).
    fn is_free(&self, id: u64) -> bool {
        self.slots.get(self.slot(id)).is_some_and(Option::is_none)
    }

    /// Puts `waiter` in `id`'s slot, free (see [`Self::is_free`]).
    fn put(&mut self, id: u64, waiter: T) {
        let at = self.slot(id);
        if let Some(slot) = self.slots.get_mut(at) {
            *slot = Some((id, waiter));
            self.used += 1;
        }
    }

    /// Takes out the waiter of `id`, if it is pending.
    fn remove(&mut self, id: &u64) -> Option<T> {
        if self.slots.is_empty() {
            return None;
        }
        let at = self.slot(*id);
        let slot = self.slots.get_mut(at)?;
        if !matches!(slot, Some((of, _)) if of == id) {
            return None;
        }
        self.used -= 1;
        slot.take().map(|(_, waiter)| waiter)
    }

    /// The pending ids and their waiters, in no particular order.
    fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.slots.iter().flatten().map(|(id, w)| (*id, w))
    }

    /// Takes every waiter out.
    fn drain(&mut self) -> Vec<T> {
        self.used = 0;
        self.slots
            .iter_mut()
            .filter_map(|slot| slot.take().map(|(_, w)| w))
            .collect()
    }
}

// === impl Remembered ===

impl Remembered {
    /// Remembers `id`, forgetting the oldest beyond [`REMEMBERED_IDS`]. An
    /// id leaves the pending table once, so it is remembered once (until
    /// the ids wrap around).
    fn remember(&mut self, id: u64) {
        if self.fifo.len() == REMEMBERED_IDS {
            self.fifo.pop_front();
        }
        self.fifo.push_back(id);
    }

    /// True when `id` is one of the ids remembered.
    fn contains(&self, id: u64) -> bool {
        let (a, b) = self.fifo.as_slices();
        a.contains(&id) || b.contains(&id)
    }
}

// === its entries: the waiters ===

/// What a waiting call receives.
pub(crate) type ReplyResult = Result<Message, GatewayError>;

/// Who gets a call's outcome: a task awaiting it, or a [`Settle`] that
/// delivers it straight to its client (no task per request).
#[derive(Debug)]
pub(crate) enum Waiter {
    /// A task awaits the outcome on the other end of this channel.
    Task(oneshot::Sender<ReplyResult>),
    /// Delivered in place by whoever settles the call (the link's reader,
    /// its deadline sweeper, or its failure), with the upstream's slots
    /// the call holds until then.
    Direct(Settle, Slots),
}

/// A call settled in place, without a task waiting for it: its client,
/// the client's name for it, and its deadline. Whoever holds it settles
/// the call, once.
#[derive(Debug)]
pub(crate) struct Settle {
    /// The client, which renders the outcome.
    pub(crate) caller: Arc<dyn Caller>,
    /// The client's name for the call.
    pub(crate) token: u64,
    /// When the call times out.
    pub(crate) deadline: tokio::time::Instant,
}

/// The client whose calls are settled in place: told where each call was
/// written (so that it can abandon them when it leaves), and asked whether
/// it is still there before a parked call of its is written.
pub(crate) trait Caller: Send + Sync + std::fmt::Debug {
    /// True once the client left: its parked calls are dropped unsent.
    fn gone(&self) -> bool;
    /// Set once the client's shutdown grace period is over: the answer to
    /// its calls still parked (they are never written then).
    fn closing(&self) -> Option<GatewayError>;
    /// Its call `token`, parked first, was written: `receipt` takes it
    /// back ([`Receipt::abandon`]) should the client leave before its
    /// reply. (A call written at once gives its receipt back from
    /// `Upstream::submit` instead.)
    fn written(&self, token: u64, receipt: Receipt);
    /// Delivers call `token`'s outcome, settled `at` (the end of its
    /// request's duration). Returns false when nobody wanted it any more
    /// (the client left, or its calls were answered already).
    fn complete(&self, token: u64, reply: ReplyResult, at: Settled) -> bool;
}

/// When a call settled in place settled: the clock read that ends its
/// request's duration, and the upstream's duration measured from that
/// read, if it was (a call written at once starts both at one instant,
/// so one subtraction gives both).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settled {
    /// When it settled.
    pub(crate) now: std::time::Instant,
    /// When it was written, and how long before `now`.
    written: Option<(std::time::Instant, std::time::Duration)>,
}

// === impl Settled ===

impl Settled {
    /// Settled at `now`.
    pub(crate) fn at(now: std::time::Instant) -> Self {
        Settled { now, written: None }
    }

    /// How long before it settled `start` was: the upstream's duration
    /// when it started then, with no subtraction of its own.
    pub(crate) fn since(&self, start: std::time::Instant) -> std::time::Duration {
        match self.written {
            Some((written, elapsed)) if written == start => elapsed,
            _ => self.now.saturating_duration_since(start),
        }
    }
}

/// One request to settle in place: what to send, who gets the outcome,
/// and the client it belongs to. Its fields are the router's to fill: it
/// builds one per call.
#[derive(Debug)]
pub(crate) struct Submission {
    /// The method, as sent upstream.
    pub(crate) method: Method,
    /// Its params, as the client sent them.
    pub(crate) params: Option<Payload>,
    /// Its client, which gets the outcome and is told where the call was
    /// written, and the call's deadline.
    pub(crate) done: Settle,
    /// When it was placed (the client's request started then): a call
    /// written at once counts its upstream duration from here, with no
    /// clock read of its own (the write follows within the same call).
    pub(crate) placed: std::time::Instant,
}

/// Where a call settled in place was written: all its client needs to
/// take it back, without knowing the link. Dropping it does nothing.
#[derive(Debug)]
pub(crate) struct Receipt {
    on: Arc<dyn TakeBack>,
    gid: u64,
}

/// What a call was written on (a link): takes a call back by gateway id.
pub(crate) trait TakeBack: Send + Sync + std::fmt::Debug {
    /// Gives up on call `gid`: nobody waits for it any more.
    fn take_back(&self, gid: u64);
}

// === impl Receipt ===

impl Receipt {
    /// Call `gid`, written on `on`.
    pub(super) fn new(on: Arc<dyn TakeBack>, gid: u64) -> Self {
        Receipt { on, gid }
    }

    /// Takes the call back: it is answered by nobody, and a late reply is
    /// counted as stale.
    pub(crate) fn abandon(self) {
        self.on.take_back(self.gid);
    }
}

// === impl Settle ===

impl Settle {
    /// Delivers the outcome. Returns false when nobody wanted it any more.
    pub(crate) fn complete(self, reply: ReplyResult) -> bool {
        self.complete_at(reply, Settled::at(std::time::Instant::now()))
    }

    /// [`Self::complete`] with the clock read already.
    fn complete_at(self, reply: ReplyResult, at: Settled) -> bool {
        self.caller.complete(self.token, reply, at)
    }
}

impl From<oneshot::Sender<ReplyResult>> for Waiter {
    fn from(tx: oneshot::Sender<ReplyResult>) -> Self {
        Waiter::Task(tx)
    }
}

// === impl Waiter ===

impl Waiter {
    /// Hands over the outcome. Returns false when the waiter is gone.
    pub(crate) fn complete(self, reply: ReplyResult) -> bool {
        // Timed-out calls have no upstream duration.
        let timed_out = matches!(&reply, Err(e) if e.kind == ErrorKind::Timeout);
        self.hand_over(reply, !timed_out)
    }

    /// Hands over the error of a call whose request was never written:
    /// the upstream never saw it, so it has no upstream duration. Returns
    /// false when the waiter is gone.
    pub(crate) fn unsent(self, error: GatewayError) -> bool {
        self.hand_over(Err(error), false)
    }

    fn hand_over(self, reply: ReplyResult, record_duration: bool) -> bool {
        match self {
            Waiter::Task(tx) => tx.send(reply).is_ok(),
            Waiter::Direct(c, mut slots) => {
                // One clock read ends both the upstream's and the
                // request's durations.
                let now = std::time::Instant::now();
                let at = slots.settled_at(record_duration, now);
                let delivered = c.complete_at(reply, at);
                // The room it leaves goes to the next parked call.
                drop(slots);
                delivered
            }
        }
    }

    /// The deadline of a call settled in place (tasks keep their own).
    pub(crate) fn deadline(&self) -> Option<tokio::time::Instant> {
        match self {
            Waiter::Task(_) => None,
            Waiter::Direct(c, _) => Some(c.deadline),
        }
    }
}

// === the room it holds: Held, Slots ===

/// Where the room a call's slots leave goes (an upstream's admission).
pub(crate) trait Room: Send + Sync + std::fmt::Debug {
    /// Slots were given back (`pending` of them under the upstream's
    /// pending cap, which the room keeps): place what waits for room, if
    /// anything does.
    fn freed(&self, pending: u32);
    /// `upstream_in_flight` and `upstream_request_duration` of the upstream.
    fn calls(&self) -> &(Gauge, Histogram);
}

/// Slots a call holds (pending, link in-flight). Dropping them places
/// the next parked calls, if any, in the room they leave.
#[derive(Debug)]
pub(crate) struct Held {
    /// Slots under the pending cap of `room`.
    pending: u32,
    /// Slots under a link's in-flight cap.
    depth: Option<Taken>,
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
    /// `pending` slots under the pending cap of `room`, and `depth` slots
    /// under a link's in-flight cap, taken already.
    pub(crate) fn new(pending: u32, depth: Option<Taken>, room: Arc<dyn Room>) -> Self {
        Held {
            pending,
            depth,
            room,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Both caps' room back before the next parked calls are placed.
        drop(self.depth.take());
        self.room.freed(self.pending);
    }
}

// === impl Slots ===

impl Slots {
    /// Marks a call in flight on the upstream of `held`, from now.
    pub(crate) fn start(held: Held) -> Self {
        Slots::start_at(held, std::time::Instant::now())
    }

    /// [`Self::start`] with the clock read already: `now`.
    pub(crate) fn start_at(held: Held, now: std::time::Instant) -> Self {
        held.room.calls().0.inc();
        Slots {
            started: now,
            counted: true,
            held,
        }
    }

    /// The call settled, at `now`: no longer in flight. With
    /// `record_duration` (an outcome of a written request that is not a
    /// timeout) it also records the upstream-only duration.
    pub(crate) fn settled(&mut self, record_duration: bool, now: std::time::Instant) {
        self.settled_at(record_duration, now);
    }

    /// [`Self::settled`], saying when: the upstream's duration goes with
    /// it, for a request's duration that started at the same instant.
    fn settled_at(&mut self, record_duration: bool, now: std::time::Instant) -> Settled {
        let calls = self.held.room.calls();
        let elapsed = now.saturating_duration_since(self.started);
        if record_duration {
            calls.1.observe_duration(elapsed);
        }
        if std::mem::take(&mut self.counted) {
            calls.0.dec();
        }
        Settled {
            now,
            written: Some((self.started, elapsed)),
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

#[cfg(test)]
mod tests;
