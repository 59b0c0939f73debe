//! Counters, gauges and histograms that the data path updates without
//! sharing a cache line between threads, folded into Prometheus families
//! on every scrape.
//!
//! A plain `prometheus` counter or histogram is one set of atomics: the
//! tokio workers that count the same request series take turns owning its
//! cache line. Here every series keeps [`SHARDS`] copies of its cells. A
//! thread picks its shard once (round-robin over the threads that count
//! anything) and adds to that shard's cells with `Relaxed` atomics:
//! uncontended while there are no more counting threads than shards, and
//! still correct (atomic adds) when two threads share one.
//!
//! Reading folds the shards: [`Counter::get`], [`Histogram::snapshot`], and
//! the [`Family`] collector that the registry calls on every `/metrics`
//! scrape and every `gather()`. The fold is exact at that moment (every
//! add that completed before it is in the total); nothing is lost or
//! sampled, and nothing runs between scrapes.
//!
//! Layout and memory (`Line` = 128 bytes, so that neither a cache line
//! nor the adjacent-line prefetcher's pair of lines is shared between
//! shards):
//!
//! - counters and gauges live in blocks of 16 series: one `Line` per shard
//!   holds one `u64` cell per series (2 KiB per block, 128 bytes per
//!   series). A thread counting several series of one family touches one
//!   line.
//! - a histogram series owns, per shard, the non-cumulative bucket counts
//!   (the last one past the highest bound), and its sum as a 128-bit
//!   integer (two cells), rounded up to whole lines: 2 KiB for up to 13
//!   buckets, 4 KiB for up to 29.
//!
//! Histogram sums are integers in the family's [`Unit`] (nanoseconds or
//! bytes), so they are exact; the exported sum and bucket bounds are in
//! seconds or bytes, as a plain `prometheus` histogram prints them. The
//! count is the sum of the bucket counts, so a scrape never shows a bucket
//! above `+Inf`.
//!
//! Labelled families find a series by a hash of its label values under a
//! shared lock, and create it on first use under the exclusive one (the
//! cold path); hot paths keep the returned handle (see `cache` and the
//! router's per-route series).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

mod counter;
mod family;
mod histogram;

pub use counter::{Counter, Gauge};
pub use family::{CounterVec, Family, GaugeVec, HistogramVec};
pub use histogram::{Histogram, LocalHistogram, Snapshot, Unit, LOCAL_BUCKETS};

/// How many copies of each series' cells exist: a power of two, more than
/// the worker threads of a sidecar's runtime, so that each counting
/// thread has a shard of its own.
pub const SHARDS: usize = 16;

/// `u64` cells per [`Line`].
const CELLS: usize = 16;

/// 128 bytes of cells, aligned so that no two shards share a cache line
/// or an adjacent-line prefetch pair.
#[repr(align(128))]
#[derive(Debug)]
struct Line([AtomicU64; CELLS]);

/// The next shard handed to a thread that counts for the first time.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard, `usize::MAX` until it first counts.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

// === impl Line ===

impl Line {
    fn new() -> Self {
        Line([const { AtomicU64::new(0) }; CELLS])
    }
}

/// The calling thread's shard, assigned round-robin on its first call.
fn shard() -> usize {
    let pick = |s: &Cell<usize>| {
        let i = s.get();
        if i < SHARDS {
            return i;
        }
        let i = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) & (SHARDS - 1);
        s.set(i);
        i
    };
    // The cell has no destructor, so it is always accessible; shard 0 is
    // a correct (shared) fallback all the same.
    SHARD.try_with(pick).unwrap_or(0) & (SHARDS - 1)
}

/// Pins the calling thread to shard `i`, for tests that must reach
/// every shard.
#[cfg(test)]
fn pin_shard(i: usize) {
    SHARD.with(|s| s.set(i & (SHARDS - 1)));
}

#[cfg(test)]
mod tests;
