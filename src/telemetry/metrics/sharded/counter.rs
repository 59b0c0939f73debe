//! Sharded counters and gauges: one `u64` cell per shard, in blocks that
//! hold the cells of 16 series side by side.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{shard, Line, CELLS, SHARDS};

/// A monotonic counter (see the [module docs](super)).
#[derive(Debug, Clone)]
pub struct Counter {
    cell: CellRef,
}

/// A gauge that moves up and down by deltas; the value is the sum of the
/// shards' deltas. There is no `set`: a sharded value has no single cell
/// to overwrite.
#[derive(Debug, Clone)]
pub struct Gauge {
    cell: CellRef,
}

/// One series' column in a block.
#[derive(Debug, Clone)]
struct CellRef {
    block: Arc<Block>,
    /// The series' cell in each line, below [`CELLS`].
    slot: usize,
}

/// The cells of up to [`CELLS`] series: one line per shard.
#[derive(Debug)]
struct Block {
    lines: [Line; SHARDS],
}

/// Hands out cells to a family's new series, a block at a time.
#[derive(Debug, Default)]
pub(super) struct Slab {
    block: Option<Arc<Block>>,
    used: usize,
}

// === impl Counter ===

impl Counter {
    /// A counter of its own (not part of a family).
    pub fn new() -> Self {
        Counter {
            cell: Slab::default().next(),
        }
    }

    pub(super) fn from_slab(slab: &mut Slab) -> Self {
        Counter { cell: slab.next() }
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.cell.add(1);
    }

    /// Adds `n`.
    #[inline]
    pub fn inc_by(&self, n: u64) {
        self.cell.add(n);
    }

    /// The total over every shard.
    pub fn get(&self) -> u64 {
        self.cell.sum()
    }

    /// Shards holding a non-zero cell of this counter.
    #[cfg(test)]
    pub(super) fn shards_used(&self) -> usize {
        let cells = self.cell.block.lines.iter().map(|l| &l.0[self.cell.slot]);
        cells.filter(|c| c.load(Ordering::Relaxed) != 0).count()
    }
}

impl Default for Counter {
    fn default() -> Self {
        Counter::new()
    }
}

// === impl Gauge ===

impl Gauge {
    /// A gauge of its own (not part of a family).
    pub fn new() -> Self {
        Gauge {
            cell: Slab::default().next(),
        }
    }

    pub(super) fn from_slab(slab: &mut Slab) -> Self {
        Gauge { cell: slab.next() }
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.cell.add(1);
    }

    /// Subtracts one.
    #[inline]
    pub fn dec(&self) {
        self.cell.add(u64::MAX);
    }

    /// Adds `n` (which may be negative).
    #[inline]
    pub fn add(&self, n: i64) {
        // Two's complement: adding the bits of -n wraps to a subtraction,
        // and the wrapped sum of the shards is the signed total.
        self.cell.add(n.cast_unsigned());
    }

    /// Subtracts `n`.
    #[inline]
    pub fn sub(&self, n: i64) {
        self.add(n.wrapping_neg());
    }

    /// The value: the sum of every shard's deltas.
    pub fn get(&self) -> i64 {
        self.cell.sum().cast_signed()
    }
}

impl Default for Gauge {
    fn default() -> Self {
        Gauge::new()
    }
}

// === impl CellRef ===

impl CellRef {
    #[inline]
    fn add(&self, n: u64) {
        self.block.lines[shard()].0[self.slot].fetch_add(n, Ordering::Relaxed);
    }

    /// The wrapping sum of the shards: exact for a counter below 2^64 and
    /// for a gauge whose value fits an `i64`.
    fn sum(&self) -> u64 {
        self.block.lines.iter().fold(0u64, |sum, line| {
            sum.wrapping_add(line.0[self.slot].load(Ordering::Relaxed))
        })
    }
}

// === impl Slab ===

impl Slab {
    /// A fresh cell: the next column of the current block, or the first
    /// of a new one.
    fn next(&mut self) -> CellRef {
        let block = match &self.block {
            Some(b) if self.used < CELLS => b.clone(),
            _ => {
                let b = Arc::new(Block {
                    lines: std::array::from_fn(|_| Line::new()),
                });
                self.block = Some(b.clone());
                self.used = 0;
                b
            }
        };
        let slot = self.used;
        self.used += 1;
        CellRef { block, slot }
    }
}
