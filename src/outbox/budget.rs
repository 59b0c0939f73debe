//! An outbox's byte budget (`outbox_max_bytes`): how many bytes of frames
//! may be queued for one client, whatever their count.
//!
//! A frame is *admitted* when its bytes fit: the queue is empty, or what
//! is queued plus the frame is at most the budget. So the queue holds at
//! most `max(budget, largest frame)` bytes, and one frame larger than the
//! whole budget still goes out, alone (a legal maximal reply is never
//! refused for its size). The writer gives the bytes back as it takes
//! frames out ([`Budget::taken`]) and wakes whoever waits for room.
//!
//! Pushes and events that do not fit are dropped by the caller; replies
//! wait ([`Budget::wait_for`]). The bytes of the replies waiting are
//! bounded by the same rule ([`Budget::reply_waits`]): at most
//! `max(budget, largest frame)`; a reply that would take them over while
//! another waits is refused, and the caller takes the client for a slow
//! consumer. While a reply waits, offers are refused even if they would
//! fit ([`Budget::try_admit_offer`]), as a full count queue gives the
//! room it frees to waiting senders first: otherwise a steady stream of
//! small events could keep a waiting reply out until the client is taken
//! for a slow consumer. Replies are not ordered among
//! themselves: whichever fits when the writer frees bytes gets in (a reply
//! larger than what is free waits for the queue to drain enough). A
//! client that keeps its queue near the budget with small replies can
//! delay its own large one past the slow-consumer timeout, and is then
//! closed as slow: it only ever delays itself.
//!
//! Cost on the hot path: one compare-and-swap to admit, one subtraction
//! and one load when the writer takes a frame out; no lock. A reply that
//! does not fit pays one compare-and-swap more to wait (and one
//! subtraction when done). The `Notify` is touched only while someone
//! waits.

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering::SeqCst};

use tokio::sync::Notify;
use tokio::time::Instant;

/// The byte budget of one outbox.
#[derive(Debug)]
pub(super) struct Budget {
    /// `outbox_max_bytes`.
    limit: i64,
    /// Bytes admitted: queued, or about to be (a frame admitted and then
    /// refused by the count queue gives its bytes back).
    queued: AtomicI64,
    /// Bytes of replies waiting to be admitted: bounded as `queued` is
    /// (see [`Budget::reply_waits`]), and shown by the gauge.
    waiting: AtomicI64,
    /// Replies waiting to be admitted: offers yield to them.
    replies: AtomicUsize,
    /// Anyone waiting for the writer to take frames out: the writer wakes
    /// `room` only when this is above zero.
    waiters: AtomicUsize,
    room: Notify,
}

/// How a wait for room ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waited {
    /// What was waited for holds.
    Ready,
    /// The deadline passed first.
    Timeout,
    /// Not waited: the replies waiting for room hold the budget already.
    Over,
    /// The client is gone.
    Closed,
}

/// Bytes admitted for one frame, given back on drop unless the frame was
/// queued (then the writer gives them back when it takes the frame out).
/// A waiting sender whose future is dropped gives its bytes back too.
#[derive(Debug)]
pub(super) struct Admitted<'a> {
    budget: &'a Budget,
    size: i64,
}

/// Counts one waiter (and, for a reply, its bytes) while it lives.
#[derive(Debug)]
pub(super) struct Waiting<'a> {
    budget: &'a Budget,
    /// The reply's size; `None` for the full-queue watch.
    reply: Option<i64>,
}

// === impl Budget ===

impl Budget {
    /// A budget of `limit` bytes (0 is taken as 1: validation refuses 0).
    pub(super) fn new(limit: usize) -> Self {
        Budget {
            limit: i64::try_from(limit.max(1)).unwrap_or(i64::MAX),
            queued: AtomicI64::new(0),
            waiting: AtomicI64::new(0),
            replies: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            room: Notify::new(),
        }
    }

    /// Bytes queued or waiting for room right now.
    #[cfg(test)]
    pub(super) fn held(&self) -> i64 {
        self.queued.load(SeqCst) + self.waiting.load(SeqCst)
    }

    /// Bytes admitted right now.
    #[cfg(test)]
    pub(super) fn queued(&self) -> i64 {
        self.queued.load(SeqCst)
    }

    /// True when `size` bytes would be admitted now.
    pub(super) fn fits(&self, size: i64) -> bool {
        self.fits_after(self.queued.load(SeqCst), size)
    }

    fn fits_after(&self, queued: i64, size: i64) -> bool {
        // Zero-size frames (pings, closes) hold nothing.
        size == 0 || queued == 0 || queued.saturating_add(size) <= self.limit
    }

    /// Admits `size` bytes if they fit now; returns the bytes queued or
    /// waiting afterwards (for the gauge).
    pub(super) fn try_admit(&self, size: i64) -> Option<(Admitted<'_>, i64)> {
        let mut queued = self.queued.load(SeqCst);
        loop {
            if !self.fits_after(queued, size) {
                return None;
            }
            match self
                .queued
                .compare_exchange_weak(queued, queued + size, SeqCst, SeqCst)
            {
                Ok(_) => {
                    let held = queued + size + self.waiting.load(SeqCst);
                    return Some((Admitted { budget: self, size }, held));
                }
                Err(now) => queued = now,
            }
        }
    }

    /// [`try_admit`](Self::try_admit) for a push or event: refused while
    /// a reply waits for room.
    pub(super) fn try_admit_offer(&self, size: i64) -> Option<(Admitted<'_>, i64)> {
        if self.replies.load(SeqCst) > 0 {
            return None;
        }
        self.try_admit(size)
    }

    /// The writer took a frame of `size` bytes out.
    pub(super) fn taken(&self, size: i64) {
        self.give_back(size);
    }

    fn give_back(&self, size: i64) {
        if size == 0 {
            return;
        }
        // SeqCst with the waiter's increment and its check of `queued`:
        // either this sees the waiter, or the waiter sees these bytes gone.
        self.queued.fetch_sub(size, SeqCst);
        if self.waiters.load(SeqCst) > 0 {
            self.room.notify_waiters();
        }
    }

    /// Counts a reply of `size` bytes as waiting (offers yield to it) until
    /// the returned guard drops; returns the bytes now held. `None` when
    /// its bytes do not fit the budget of waiting replies (the same rule as
    /// the queue's: no other reply waits, or all of them plus this one are
    /// at most the budget): the client is slow.
    pub(super) fn reply_waits(&self, size: i64) -> Option<(Waiting<'_>, i64)> {
        let mut waiting = self.waiting.load(SeqCst);
        loop {
            if !self.fits_after(waiting, size) {
                return None;
            }
            match self
                .waiting
                .compare_exchange_weak(waiting, waiting + size, SeqCst, SeqCst)
            {
                Ok(_) => break,
                Err(now) => waiting = now,
            }
        }
        self.replies.fetch_add(1, SeqCst);
        let held = waiting + size + self.queued.load(SeqCst);
        let guard = Waiting {
            budget: self,
            reply: Some(size),
        };
        Some((guard, held))
    }

    /// Waits until `ready()` holds, re-checking it each time the writer
    /// takes a frame out, at most until `deadline`; `closed` resolves when
    /// the client is gone.
    pub(super) async fn wait_for(
        &self,
        deadline: Instant,
        closed: impl Future<Output = ()>,
        mut ready: impl FnMut() -> bool,
    ) -> Waited {
        self.waiters.fetch_add(1, SeqCst);
        let _waiting = Waiting {
            budget: self,
            reply: None,
        };
        tokio::pin!(closed);
        let timer = tokio::time::sleep_until(deadline);
        tokio::pin!(timer);
        loop {
            // Created before the check: a wake-up after the check is not
            // lost even before the future is first polled.
            let woken = self.room.notified();
            if ready() {
                return Waited::Ready;
            }
            tokio::select! {
                () = woken => {}
                () = &mut closed => return Waited::Closed,
                () = &mut timer => {
                    return if ready() { Waited::Ready } else { Waited::Timeout };
                }
            }
        }
    }
}

// === impl Admitted ===

impl Admitted<'_> {
    /// The frame is queued: the writer gives its bytes back.
    pub(super) fn queued(self) {
        std::mem::forget(self);
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.budget.give_back(self.size);
    }
}

// === impl Waiting ===

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        match self.reply {
            Some(size) => {
                self.budget.waiting.fetch_sub(size, SeqCst);
                self.budget.replies.fetch_sub(1, SeqCst);
            }
            None => {
                self.budget.waiters.fetch_sub(1, SeqCst);
            }
        }
    }
}
