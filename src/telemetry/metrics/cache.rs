//! Resolved handles of the per-message traffic series.
//!
//! `with_label_values` hashes the label values and takes a lock on every
//! call; the traffic series are touched several times per request, so each
//! (dialect, side, direction[, kind]) handle is resolved once, on first
//! use, and kept here. Series still appear only once touched.

use std::sync::OnceLock;

use super::sharded::{Counter, CounterVec, Histogram, HistogramVec, LocalHistogram};

use super::{Direction, Metrics};
use crate::dialect::Dialect;
use crate::envelope::Kind;
use crate::error::Side;

const DIALECTS: usize = crate::dialect::COUNT;
const SIDES: usize = 3;
const DIRECTIONS: usize = 2;
const KINDS: usize = 4;
const FRAME_SLOTS: usize = DIALECTS * SIDES * DIRECTIONS;
const MESSAGE_SLOTS: usize = FRAME_SLOTS * KINDS;

/// Handles resolved so far.
#[derive(Debug)]
pub(super) struct Traffic {
    messages: [OnceLock<Counter>; MESSAGE_SLOTS],
    bytes: [OnceLock<Counter>; FRAME_SLOTS],
    sizes: [OnceLock<Histogram>; FRAME_SLOTS],
}

/// The resolved `bytes` counter and `message_size` histogram of one
/// (dialect, side, direction): a writer task gets one and counts every
/// frame or line it writes, without a lookup per frame.
#[derive(Debug, Clone)]
pub struct FrameCounter {
    bytes: Counter,
    sizes: Histogram,
}

/// A [`FrameCounter`]'s counts kept by the one task that writes a
/// connection's frames (its writer) and added to the shared series by
/// [`publish`](Self::publish): the writer publishes whenever it runs out
/// of frames to write, before it flushes them to the socket, and when it
/// stops (on drop). Between two publishes a scrape does not see the
/// frames counted since the first; once the writer is idle it sees every
/// one. Fixed size: a byte count and a [`LocalHistogram`].
#[derive(Debug)]
pub struct FrameTally {
    bytes: Counter,
    /// Bytes counted since the last publish.
    pending: u64,
    sizes: LocalHistogram,
}

/// The resolved `messages` counters of one (dialect, side, direction),
/// one per kind: whoever counts every message it reads or writes (a
/// session, a client's outbox, an upstream's links) keeps one, resolved
/// once, instead of a lookup per message. Resolving it touches nothing
/// that [`Metrics::init_labels`] does not touch for a configured listener
/// or upstream.
#[derive(Debug, Clone)]
pub struct MessageCounter {
    /// By [`kind_index`].
    kinds: [Counter; KINDS],
}

// === impl FrameCounter ===

impl FrameCounter {
    /// Counts one frame or line of `bytes` (payload, without the NDJSON
    /// `\n`).
    #[inline]
    pub fn count(&self, bytes: usize) {
        self.bytes.inc_by(bytes as u64);
        self.sizes.observe(bytes as u64);
    }

    /// A tally of this counter for the one task that writes these frames.
    pub fn tally(&self) -> FrameTally {
        FrameTally {
            bytes: self.bytes.clone(),
            pending: 0,
            sizes: self.sizes.local(),
        }
    }
}

// === impl FrameTally ===

impl FrameTally {
    /// Counts one frame or line of `bytes`, like [`FrameCounter::count`],
    /// until the next publish.
    #[inline]
    pub fn count(&mut self, bytes: usize) {
        let bytes = bytes as u64;
        if self.pending.checked_add(bytes).is_none() {
            self.publish();
        }
        self.pending += bytes;
        self.sizes.observe(bytes);
    }

    /// Adds what was counted since the last publish to the shared series.
    #[inline]
    pub fn publish(&mut self) {
        let bytes = std::mem::take(&mut self.pending);
        if bytes != 0 {
            self.bytes.inc_by(bytes);
        }
        self.sizes.publish();
    }
}

impl Drop for FrameTally {
    fn drop(&mut self) {
        self.publish();
    }
}

// === impl MessageCounter ===

impl MessageCounter {
    /// Counts one message of `kind`.
    #[inline]
    pub fn count(&self, kind: Kind) {
        self.kinds[kind_index(kind)].inc();
    }
}

// === impl Metrics ===

impl Metrics {
    /// The counter of frames travelling `direction` on `side` in `dialect`.
    pub fn frame_counter(
        &self,
        dialect: Dialect,
        side: Side,
        direction: Direction,
    ) -> FrameCounter {
        let (bytes, sizes) = self.traffic.frame(
            (&self.bytes, &self.message_size),
            (dialect, side, direction),
        );
        FrameCounter {
            bytes: bytes.clone(),
            sizes: sizes.clone(),
        }
    }

    /// The counters of messages travelling `direction` on `side` in
    /// `dialect`, every kind.
    pub fn message_counter(
        &self,
        dialect: Dialect,
        side: Side,
        direction: Direction,
    ) -> MessageCounter {
        let kinds = ALL_KINDS.map(|kind| {
            self.traffic
                .message(&self.messages, (dialect, side, direction), kind)
                .clone()
        });
        MessageCounter { kinds }
    }
}

// === impl Traffic ===

impl Traffic {
    pub(super) fn new() -> Self {
        Traffic {
            messages: std::array::from_fn(|_| OnceLock::new()),
            bytes: std::array::from_fn(|_| OnceLock::new()),
            sizes: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// The `messages` counter of one label set.
    pub(super) fn message(
        &self,
        vec: &CounterVec<4>,
        (dialect, side, direction): (Dialect, Side, Direction),
        kind: Kind,
    ) -> &Counter {
        let slot = frame_slot(dialect.index(), side, direction) * KINDS + kind_index(kind);
        self.messages[slot].get_or_init(|| {
            vec.with_label_values(&[
                dialect.as_str(),
                side.as_str(),
                direction.as_str(),
                kind.as_str(),
            ])
        })
    }

    /// The `bytes` counter and `message_size` histogram of one label set.
    pub(super) fn frame(
        &self,
        (bytes, sizes): (&CounterVec<3>, &HistogramVec<3>),
        (dialect, side, direction): (Dialect, Side, Direction),
    ) -> (&Counter, &Histogram) {
        let slot = frame_slot(dialect.index(), side, direction);
        let labels = [dialect.as_str(), side.as_str(), direction.as_str()];
        (
            self.bytes[slot].get_or_init(|| bytes.with_label_values(&labels)),
            self.sizes[slot].get_or_init(|| sizes.with_label_values(&labels)),
        )
    }
}

/// The slot of a label set; `d` is the dialect's [`Dialect::index`].
fn frame_slot(d: usize, side: Side, direction: Direction) -> usize {
    let s = match side {
        Side::Client => 0,
        Side::Upstream => 1,
        Side::Internal => 2,
    };
    let r = match direction {
        Direction::In => 0,
        Direction::Out => 1,
    };
    (d * SIDES + s) * DIRECTIONS + r
}

/// Every kind, in [`kind_index`] order.
const ALL_KINDS: [Kind; KINDS] = [
    Kind::Request,
    Kind::Notification,
    Kind::Response,
    Kind::Error,
];

fn kind_index(kind: Kind) -> usize {
    match kind {
        Kind::Request => 0,
        Kind::Notification => 1,
        Kind::Response => 2,
        Kind::Error => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_set_has_its_own_slot() {
        let mut seen = std::collections::HashSet::new();
        for d in 0..DIALECTS {
            for s in [Side::Client, Side::Upstream, Side::Internal] {
                for r in [Direction::In, Direction::Out] {
                    let f = frame_slot(d, s, r);
                    assert!(f < FRAME_SLOTS);
                    for k in ALL_KINDS {
                        assert!(seen.insert(f * KINDS + kind_index(k)));
                    }
                }
            }
        }
        assert_eq!(seen.len(), MESSAGE_SLOTS);
        for (i, k) in ALL_KINDS.into_iter().enumerate() {
            assert_eq!(kind_index(k), i);
        }
    }
}
