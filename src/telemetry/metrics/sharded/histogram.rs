//! Sharded histograms: per shard, one count per bucket (non-cumulative)
//! and an exact integer sum.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus::proto;

use super::{shard, Line, CELLS, SHARDS};

/// Cells at the start of each shard that hold the sum (low and high
/// words); the bucket counts follow.
const SUM_CELLS: usize = 2;

/// What a histogram's observations are recorded in and exported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Recorded in whole nanoseconds ([`Histogram::observe_duration`]),
    /// exported in seconds.
    Seconds,
    /// Recorded and exported as an integer count: bytes, items.
    Bytes,
}

/// One series of a histogram family (see the [module docs](super)).
#[derive(Debug, Clone)]
pub struct Histogram {
    core: Arc<Core>,
}

/// Buckets a [`LocalHistogram`] holds: families with more than this many
/// (bounds and the one above them) are observed straight into the series.
pub const LOCAL_BUCKETS: usize = 16;

/// Observations of one histogram series that one task (a connection's
/// writer) makes and keeps to itself, without atomics, until it
/// [`publish`](Self::publish)es them into the series: at the end of each
/// batch of its work, and when it is dropped. A scrape sees them from the
/// publish on, all at once. Fixed size: [`LOCAL_BUCKETS`] counts and a
/// sum (an observation that would overflow the sum is published first).
#[derive(Debug)]
pub struct LocalHistogram {
    series: Histogram,
    local: Local,
}

/// A local histogram's counts since its last publish.
#[derive(Debug)]
struct Local {
    /// By bucket, as the series' cells (non-cumulative).
    counts: [u64; LOCAL_BUCKETS],
    /// Their sum, in recorded units.
    sum: u64,
    /// Something was observed since the last publish.
    pending: bool,
}

/// The folded state of a histogram at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Observations per bucket, not cumulative; the last one counts those
    /// above the highest bound.
    pub counts: Vec<u64>,
    /// The sum of the observations, in recorded units (nanoseconds or
    /// bytes).
    pub sum: u128,
}

/// A family's bucket bounds, shared by its series.
#[derive(Debug)]
pub(super) struct Buckets {
    /// Upper bounds as exported (seconds or bytes), ascending.
    bounds: Vec<f64>,
    /// The same bounds in recorded units; an observation `v` falls in the
    /// first bucket whose limit is `>= v`, as in Prometheus (`le`).
    limits: Vec<u64>,
    /// Where the search for `v`'s bucket starts, by `v`'s bit length
    /// (0 to 64): the buckets below are those whose limit is below every
    /// value of that length. [`Buckets::bucket`] steps on from there past
    /// the few limits of that length: one or two for bounds a factor of
    /// two or more apart, instead of a binary search over all of them.
    start: [u16; 65],
    /// Recorded units per exported unit.
    scale: f64,
    /// Cells per shard, whole lines: the sum's low and high words, then
    /// the buckets and the one above the highest bound.
    stride: usize,
}

#[derive(Debug)]
struct Core {
    buckets: Arc<Buckets>,
    lines: Box<[Line]>,
}

// === impl Unit ===

impl Unit {
    /// Recorded units per exported unit.
    fn scale(self) -> f64 {
        match self {
            Unit::Seconds => 1e9,
            Unit::Bytes => 1.0,
        }
    }
}

// === impl Histogram ===

impl Histogram {
    pub(super) fn with_buckets(buckets: &Arc<Buckets>) -> Self {
        let lines = (0..SHARDS * buckets.stride / CELLS)
            .map(|_| Line::new())
            .collect();
        Histogram {
            core: Arc::new(Core {
                buckets: buckets.clone(),
                lines,
            }),
        }
    }

    /// Records `v`, in recorded units: bytes, or nanoseconds (prefer
    /// [`observe_duration`](Self::observe_duration) for those).
    #[inline]
    pub fn observe(&self, v: u64) {
        let core = &*self.core;
        let b = &*core.buckets;
        // The shard's first line holds the sum (cells 0 and 1) and the
        // first buckets; its lines are found once, the bucket's cell from
        // them.
        let shard = core.shard(shard(), b);
        let cell = SUM_CELLS + b.bucket(v);
        if let Some(line) = shard.get(cell / CELLS) {
            line.0[cell % CELLS].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(first) = shard.first() {
            add_sum(first, v);
        }
    }

    /// Adds what `local` observed since it was last published, and
    /// empties it.
    fn publish(&self, local: &mut Local) {
        let core = &*self.core;
        let shard = core.shard(shard(), &core.buckets);
        for (i, count) in local.counts.iter_mut().enumerate() {
            if *count != 0 {
                let cell = SUM_CELLS + i;
                if let Some(line) = shard.get(cell / CELLS) {
                    line.0[cell % CELLS].fetch_add(*count, Ordering::Relaxed);
                }
                *count = 0;
            }
        }
        let sum = std::mem::take(&mut local.sum);
        if let Some(first) = shard.first() {
            add_sum(first, sum);
        }
    }

    /// A local count of this series' observations, for one task (see
    /// [`LocalHistogram`]).
    pub fn local(&self) -> LocalHistogram {
        LocalHistogram {
            series: self.clone(),
            local: Local {
                counts: [0; LOCAL_BUCKETS],
                sum: 0,
                pending: false,
            },
        }
    }

    /// Records a duration, in nanoseconds (for a [`Unit::Seconds`] family).
    #[inline]
    pub fn observe_duration(&self, d: Duration) {
        self.observe(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Every shard folded together.
    pub fn snapshot(&self) -> Snapshot {
        let b = &self.core.buckets;
        let mut counts = vec![0u64; b.limits.len() + 1];
        let mut sum = 0u128;
        for s in 0..SHARDS {
            let base = s * b.stride;
            for (i, count) in counts.iter_mut().enumerate() {
                *count = count.wrapping_add(self.load(base + SUM_CELLS + i));
            }
            let low = u128::from(self.load(base));
            let high = u128::from(self.load(base + 1));
            sum = sum.wrapping_add(high << 64 | low);
        }
        Snapshot { counts, sum }
    }

    /// Observations recorded so far.
    pub fn get_sample_count(&self) -> u64 {
        self.snapshot().count()
    }

    /// Their sum, in exported units (seconds or bytes).
    pub fn get_sample_sum(&self) -> f64 {
        self.snapshot().exported_sum(&self.core.buckets)
    }

    /// The exported form: cumulative buckets, count and sum in exported
    /// units, as `prometheus::Histogram` builds it.
    pub(super) fn proto(&self) -> proto::Histogram {
        let b = &self.core.buckets;
        let snap = self.snapshot();
        let mut cumulative = 0u64;
        let buckets = b
            .bounds
            .iter()
            .zip(&snap.counts)
            .map(|(&bound, &count)| {
                cumulative += count;
                let mut bucket = proto::Bucket::default();
                bucket.set_upper_bound(bound);
                bucket.set_cumulative_count(cumulative);
                bucket
            })
            .collect();
        let mut h = proto::Histogram::default();
        h.set_bucket(buckets);
        h.set_sample_count(snap.count());
        h.set_sample_sum(snap.exported_sum(b));
        h
    }

    fn cell(&self, i: usize) -> &AtomicU64 {
        &self.core.lines[i / CELLS].0[i % CELLS]
    }

    fn load(&self, i: usize) -> u64 {
        self.cell(i).load(Ordering::Relaxed)
    }
}

// === impl Core ===

impl Core {
    /// The lines of shard `i` (`b` is this series' buckets).
    #[inline]
    fn shard(&self, i: usize, b: &Buckets) -> &[Line] {
        let per = b.stride / CELLS;
        self.lines.get(i * per..(i + 1) * per).unwrap_or(&[])
    }
}

/// Adds `v` to the sum held in cells 0 (low word) and 1 (high word) of a
/// shard's first line.
#[inline]
fn add_sum(first: &Line, v: u64) {
    let before = first.0[0].fetch_add(v, Ordering::Relaxed);
    if before.checked_add(v).is_none() {
        // The low word wrapped: carry into the high one. A fold that
        // runs between the two adds reads 2^64 too little, once per
        // 2^64 recorded units (584 years of summed durations).
        first.0[1].fetch_add(1, Ordering::Relaxed);
    }
}

// === impl LocalHistogram ===

impl LocalHistogram {
    /// Records `v` locally (see [`Histogram::observe`]).
    #[inline]
    pub fn observe(&mut self, v: u64) {
        let bucket = self.series.core.buckets.bucket(v);
        let local = &mut self.local;
        match (local.counts.get_mut(bucket), local.sum.checked_add(v)) {
            (Some(count), Some(sum)) => {
                *count += 1;
                local.sum = sum;
                local.pending = true;
            }
            // Too many buckets to hold, or a sum about to overflow: into
            // the series, after what is held.
            _ => {
                self.publish();
                self.series.observe(v);
            }
        }
    }

    /// Adds what was observed since the last publish to the series.
    #[inline]
    pub fn publish(&mut self) {
        if std::mem::take(&mut self.local.pending) {
            self.series.publish(&mut self.local);
        }
    }
}

impl Drop for LocalHistogram {
    fn drop(&mut self) {
        self.publish();
    }
}

// === impl Snapshot ===

impl Snapshot {
    /// Observations, every bucket together: the `+Inf` bucket and
    /// `_count`.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    // Exported sums are floats like any Prometheus sample: exact below
    // 2^53 units, rounded above.
    #[allow(clippy::cast_precision_loss)]
    fn exported_sum(&self, b: &Buckets) -> f64 {
        self.sum as f64 / b.scale
    }
}

// === impl Buckets ===

impl Buckets {
    /// The buckets of a family recorded in `unit`, with upper `bounds` in
    /// exported units. Each bound must be a whole number of recorded
    /// units (a nanosecond, a byte), and they must ascend.
    pub(super) fn new(unit: Unit, bounds: &[f64]) -> Result<Self, prometheus::Error> {
        let scale = unit.scale();
        let mut limits = Vec::with_capacity(bounds.len());
        for &bound in bounds {
            let units = bound * scale;
            let whole = units.round();
            let ok = bound.is_finite()
                && bound >= 0.0
                && whole < 1.8e19
                && (units - whole).abs() <= 1e-6 * whole.max(1.0);
            if !ok {
                let msg = format!("bucket bound {bound} is not a whole number of {unit:?} units");
                return Err(prometheus::Error::Msg(msg));
            }
            // Checked just above: a whole, non-negative number below 2^64.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let limit = whole as u64;
            if limits.last().is_some_and(|&last| last >= limit) {
                let msg = format!("bucket bounds must ascend: {bounds:?}");
                return Err(prometheus::Error::Msg(msg));
            }
            limits.push(limit);
        }
        if limits.len() >= usize::from(u16::MAX) {
            let msg = format!("{} bucket bounds are too many", limits.len());
            return Err(prometheus::Error::Msg(msg));
        }
        // Below `u16::MAX`, checked just above.
        #[allow(clippy::cast_possible_truncation)]
        let start = std::array::from_fn(|bits| {
            // The smallest value `bits` long: 0, then 2^(bits - 1).
            let lowest = match bits {
                0 => 0,
                _ => 1u64 << (bits - 1),
            };
            limits.partition_point(|&limit| limit < lowest) as u16
        });
        let cells = bounds.len() + 3;
        Ok(Buckets {
            bounds: bounds.to_vec(),
            start,
            limits,
            scale,
            stride: cells.div_ceil(CELLS) * CELLS,
        })
    }

    /// The limits in recorded units, for tests.
    #[cfg(test)]
    pub(super) fn limits(&self) -> &[u64] {
        &self.limits
    }

    /// The bucket of `v`: the first whose limit is `>= v`, or the one past
    /// the highest bound. The same as a binary search of `limits`
    /// (`partition_point`), from the start its bit length gives.
    #[inline]
    pub(super) fn bucket(&self, v: u64) -> usize {
        let bits = (u64::BITS - v.leading_zeros()) as usize;
        let mut i = usize::from(self.start[bits]);
        while self.limits.get(i).is_some_and(|&limit| limit < v) {
            i += 1;
        }
        i
    }
}
