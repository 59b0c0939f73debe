//! The parked calls of one upstream as a data structure (a parking lot): arrival order for
//! writing them, expiry order for the timer, removal of any one of them,
//! and no allocation per call once it has grown to its working size.
//!
//! Calls live in a slab; the arrival queue and the expiry heap hold their
//! keys (with the call's number, so that a reused slot is never mistaken
//! for the call that left it). A call taken out by one order is left in
//! the other as a stale key, skipped when met, and both are compacted
//! when stale keys outnumber live calls.
//!
//! Bound: with `n` calls parked, the arrival queue and the expiry heap
//! hold at most `2n + 64` keys each (24 and 32 bytes a key). The slab and
//! both orders keep room for [`KEPT`] calls once the lot runs empty.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use slab::Slab;
use tokio::time::Instant;

/// Calls the lot keeps room for once it runs empty: the room a larger
/// burst took is given back at its end.
pub(super) const KEPT: usize = 64;

/// Stale keys tolerated beyond twice the live calls before compacting.
const SLACK: usize = 64;

/// The parked calls of one upstream (a parking lot), `T` each.
#[derive(Debug)]
pub(crate) struct Lot<T> {
    /// Number of the next parked call.
    next: u64,
    /// The calls parked, by key.
    calls: Slab<Parked<T>>,
    /// (number, key) by arrival.
    fifo: VecDeque<(u64, usize)>,
    /// (expiry, number, key), earliest first: what the timer answers next.
    by_expiry: BinaryHeap<Reverse<(Instant, u64, usize)>>,
}

/// One parked call.
#[derive(Debug)]
pub(crate) struct Parked<T> {
    /// The call.
    pub(crate) call: T,
    /// When it was parked.
    pub(crate) enqueued: Instant,
    /// Whether it expires at the request's deadline (`timeout`) rather than
    /// at the queue timeout (`resource_exhausted`).
    pub(crate) by_deadline: bool,
    /// Its number (arrival order).
    seq: u64,
}

// === impl Lot ===

impl<T> Lot<T> {
    /// An empty lot.
    pub(crate) fn new() -> Self {
        Lot {
            next: 0,
            calls: Slab::new(),
            fifo: VecDeque::new(),
            by_expiry: BinaryHeap::new(),
        }
    }

    /// How many calls are parked (the upstream keeps its own count, read
    /// without the lock).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }

    /// Parks `call` behind the others. Returns true when it is the first
    /// call parked or expires before every other (the timer must look
    /// again).
    pub(crate) fn push(
        &mut self,
        call: T,
        enqueued: Instant,
        expires: Instant,
        by_deadline: bool,
    ) -> bool {
        let seq = self.next;
        self.next += 1;
        let wake = self.calls.is_empty()
            || self
                .by_expiry
                .peek()
                .is_none_or(|Reverse((at, _, _))| expires < *at);
        let key = self.calls.insert(Parked {
            call,
            enqueued,
            by_deadline,
            seq,
        });
        self.fifo.push_back((seq, key));
        self.by_expiry.push(Reverse((expires, seq, key)));
        wake
    }

    /// The oldest call, taken out.
    pub(crate) fn pop_front(&mut self) -> Option<Parked<T>> {
        while let Some((seq, key)) = self.fifo.pop_front() {
            if let Some(parked) = self.take(seq, key) {
                return Some(parked);
            }
        }
        None
    }

    /// When the oldest call was parked.
    pub(crate) fn front_enqueued(&mut self) -> Option<Instant> {
        while let Some(&(seq, key)) = self.fifo.front() {
            match self.calls.get(key) {
                Some(p) if p.seq == seq => return Some(p.enqueued),
                _ => drop(self.fifo.pop_front()),
            }
        }
        None
    }

    /// The call that expires first, taken out if it expires by `now`.
    pub(crate) fn pop_expired(&mut self, now: Instant) -> Option<Parked<T>> {
        while let Some(&Reverse((at, seq, key))) = self.by_expiry.peek() {
            if !self.is_live(seq, key) {
                self.by_expiry.pop();
                continue;
            }
            if at > now {
                return None;
            }
            self.by_expiry.pop();
            return self.take(seq, key);
        }
        None
    }

    /// When the next call expires.
    pub(crate) fn next_expiry(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, seq, key))) = self.by_expiry.peek() {
            if self.is_live(seq, key) {
                return Some(at);
            }
            self.by_expiry.pop();
        }
        None
    }

    /// Takes out every call `mine` picks, oldest first.
    pub(crate) fn take_where(&mut self, mine: impl Fn(&T) -> bool) -> Vec<T> {
        let mut picked: Vec<(u64, usize)> = self
            .calls
            .iter()
            .filter(|(_, p)| mine(&p.call))
            .map(|(key, p)| (p.seq, key))
            .collect();
        picked.sort_unstable();
        picked
            .into_iter()
            .filter_map(|(seq, key)| self.take(seq, key))
            .map(|p| p.call)
            .collect()
    }

    /// Takes out every call, oldest first.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.take_where(|_| true)
    }

    fn is_live(&self, seq: u64, key: usize) -> bool {
        live(&self.calls, seq, key)
    }

    /// Takes call `seq` out of the slab, if it is still there; compacts
    /// the orders when their stale keys have piled up.
    fn take(&mut self, seq: u64, key: usize) -> Option<Parked<T>> {
        if !self.is_live(seq, key) {
            return None;
        }
        let parked = self.calls.try_remove(key)?;
        let parked_now = self.calls.len();
        if parked_now == 0 {
            self.fifo.clear();
            self.by_expiry.clear();
            if self.calls.capacity() > KEPT {
                self.calls = Slab::with_capacity(KEPT);
                self.fifo.shrink_to(KEPT);
                self.by_expiry.shrink_to(KEPT);
            }
            return Some(parked);
        }
        let most = 2 * parked_now + SLACK;
        if self.fifo.len() > most {
            let calls = &self.calls;
            self.fifo.retain(|&(seq, key)| live(calls, seq, key));
        }
        if self.by_expiry.len() > most {
            let calls = &self.calls;
            self.by_expiry
                .retain(|&Reverse((_, seq, key))| live(calls, seq, key));
        }
        Some(parked)
    }

    /// Keys held by the two orders (for the bound's tests).
    #[cfg(test)]
    fn keys(&self) -> (usize, usize) {
        (self.fifo.len(), self.by_expiry.len())
    }

    /// Room kept (for the bound's tests).
    #[cfg(test)]
    fn room(&self) -> usize {
        self.calls.capacity()
    }
}

/// Whether key `key` still holds call number `seq` (a slot may have been
/// reused by a later call).
fn live<T>(calls: &Slab<Parked<T>>, seq: u64, key: usize) -> bool {
    calls.get(key).is_some_and(|p| p.seq == seq)
}

#[cfg(test)]
mod tests;
