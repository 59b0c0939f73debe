//! Gateway-id bookkeeping for one upstream connection.
//!
//! A plain synchronous data structure (`&mut self`, no locks, no I/O): the
//! owner wraps it in a mutex with short critical sections. Gateway ids are
//! integers from 1, below 2^53 (so they survive a float64 round trip through
//! daemons such as hld), never the client's id. Every id that leaves the
//! pending table is remembered in a bounded FIFO, so a reply that arrives for
//! it later can be classified as *stale* (timed out or abandoned) or
//! *duplicate* (already answered) instead of *unknown*.

use std::collections::VecDeque;

// Keys are gateway ids switchyard issues itself: a fast non-keyed hash is
// safe (no attacker chooses them) and is touched on every request.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

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
    pending: HashMap<u64, T>,
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

/// A bounded FIFO set of ids.
#[derive(Debug, Default)]
struct Remembered {
    set: HashSet<u64>,
    fifo: VecDeque<u64>,
}

// === impl Correlator ===

impl<T> Correlator<T> {
    /// An empty table; `ordered` checks that replies come in write order.
    pub fn new(ordered: bool) -> Self {
        Correlator {
            next_id: 1,
            pending: HashMap::default(),
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
        let mut id = self.next_id;
        // Skip ids still pending after a wrap-around (2^53 requests later).
        while self.pending.contains_key(&id) {
            id = next(id);
        }
        self.next_id = next(id);
        self.pending.insert(id, waiter);
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
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.abandon(id).map(|w| (id, w)))
            .collect()
    }

    /// The waiters currently pending, in no particular order.
    pub fn pending_values(&self) -> impl Iterator<Item = &T> {
        self.pending.values()
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
        self.pending.drain().map(|(_, w)| w).collect()
    }

    /// Waiters currently pending.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
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
        if self.abandoned.set.contains(&id) {
            Resolution::Stale
        } else if self.settled.set.contains(&id) {
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

// === impl Remembered ===

impl Remembered {
    fn remember(&mut self, id: u64) {
        if self.set.insert(id) {
            self.fifo.push_back(id);
            if self.fifo.len() > REMEMBERED_IDS {
                if let Some(old) = self.fifo.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
