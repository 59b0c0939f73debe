//! A cap on calls in flight (a client's `max_in_flight`, an upstream's
//! `max_pending`, a link's `max_in_flight_per_connection`): taken and given
//! back by calls settled in place without a lock, waited on by tasks.
//!
//! tokio's [`Semaphore`] counts the room and queues the tasks that wait
//! for it. Its `try_acquire` takes no lock, but every release takes the
//! lock of its list of waiters, even when the list is empty: once per cap
//! per call. Room given back goes instead to a count of free room already
//! taken out of the semaphore (`spare`), which the next call takes first,
//! with one atomic operation either way. Only while a task waits for room
//! (the connection's reader at the client's cap, a batch or a call on the
//! task path at an upstream's; a call settled in place never waits, it
//! parks in its upstream's queue and is placed by whoever frees room) does
//! room given back go on to the semaphore at once, and the next calls take
//! from the semaphore only: the waiting task is served as the semaphore
//! alone would serve it.
//!
//! The cap is exact: room leaves the semaphore (its permits forgotten)
//! before it is held or spare, and leaves `spare` only to a holder or back
//! to the semaphore, so the semaphore's free permits, the spare room and
//! the room held always add up to the cap.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{AcquireError, Semaphore};

/// A cap on calls out (see the module doc).
#[derive(Debug)]
pub(crate) struct Cap {
    /// The room free for anyone, and the tasks waiting for room.
    sem: Semaphore,
    /// Free room taken out of `sem`: the next call in place takes it.
    spare: AtomicUsize,
    /// Tasks waiting for room (or about to).
    waiting: AtomicUsize,
    /// The cap.
    max: usize,
}

impl Cap {
    /// A cap of `max` calls, all free.
    pub(crate) fn new(max: usize) -> Self {
        Cap {
            sem: Semaphore::new(max),
            spare: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            max,
        }
    }

    /// One call's room now, if there is any, without waiting or a lock:
    /// spare room first, unless a task waits (room goes to it first).
    pub(crate) fn try_take(&self) -> bool {
        if self.waiting.load(Ordering::SeqCst) == 0 && self.take_spare(1) {
            return true;
        }
        self.sem.try_acquire().map(|p| p.forget()).is_ok()
    }

    /// `n` calls' room now, if there is that much, without waiting.
    pub(crate) fn try_take_many(&self, n: u32) -> bool {
        if self.waiting.load(Ordering::SeqCst) == 0 && self.take_spare(n as usize) {
            return true;
        }
        // Room split between the two counts is brought together first.
        self.return_spare();
        self.sem.try_acquire_many(n).map(|p| p.forget()).is_ok()
    }

    /// `n` calls' room, waiting for it (a task) in the semaphore's queue.
    /// Cancel safe: dropped while it waits, it takes nothing.
    pub(crate) async fn take_many(&self, n: u32) -> Result<(), AcquireError> {
        let _waiting = Waiting::new(&self.waiting);
        // After counting itself (Dekker's pairing with `give_back`): room
        // given back before that is handed on here, room given back after
        // it by the one who gave it.
        self.return_spare();
        self.sem.acquire_many(n).await?.forget();
        Ok(())
    }

    /// Gives `n` calls' room back.
    pub(crate) fn give_back(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.spare.fetch_add(n, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.return_spare();
        }
    }

    /// [`try_take_many`](Self::try_take_many), the room held as a
    /// [`Taken`] that gives it back when dropped.
    pub(crate) fn try_hold(self: &Arc<Self>, n: u32) -> Option<Taken> {
        self.try_take_many(n).then(|| Taken::new(self.clone(), n))
    }

    /// [`take_many`](Self::take_many), the room held as a [`Taken`].
    pub(crate) async fn hold(self: &Arc<Self>, n: u32) -> Result<Taken, AcquireError> {
        self.take_many(n).await?;
        Ok(Taken::new(self.clone(), n))
    }

    /// Room held now (read without a lock: exact while nothing moves).
    pub(crate) fn held(&self) -> usize {
        let free = self.sem.available_permits() + self.spare.load(Ordering::Acquire);
        self.max.saturating_sub(free)
    }

    /// Takes `n` of the spare room, if that much is spare.
    fn take_spare(&self, n: usize) -> bool {
        let mut spare = self.spare.load(Ordering::Acquire);
        while spare >= n {
            match self.spare.compare_exchange_weak(
                spare,
                spare - n,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => spare = now,
            }
        }
        false
    }

    /// Hands the spare room back to the semaphore (which wakes a waiting
    /// task it is enough for).
    fn return_spare(&self) {
        let n = self.spare.swap(0, Ordering::SeqCst);
        if n > 0 {
            self.sem.add_permits(n);
        }
    }
}

/// Room taken under a [`Cap`] (`n` calls'), given back when dropped.
#[derive(Debug)]
pub(crate) struct Taken {
    cap: Arc<Cap>,
    n: u32,
}

impl Taken {
    /// Room for `n` calls, taken under `cap` already.
    pub(crate) fn new(cap: Arc<Cap>, n: u32) -> Self {
        Taken { cap, n }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.cap.give_back(self.n as usize);
    }
}

/// A task counted in [`Cap::waiting`] until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests;
