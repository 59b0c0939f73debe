//! Micro benchmarks of the gateway-id table (`upstream::correlator`).
//!
//! - `correlator/steady-10k`: a table holding 10,000 pending entries, where
//!   each iteration inserts one and settles the oldest (resolve, ordered
//!   resolve as on hld connections, or abandon), so the size stays constant.
//! - `correlator/burst-10k`: insert 10,000 into an empty table, then resolve
//!   all of them.
//!
//! The waiter is a pointer-sized stand-in for the real `oneshot::Sender`, so
//! channel allocation is not part of what is measured.

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use switchyard::upstream::correlator::{Correlator, Resolution};

/// Entries pending in the steady-state table, and the burst size.
const ENTRIES: usize = 10_000;

/// A pointer-sized waiter.
type Waiter = u64;

/// A table of `ENTRIES` pending waiters plus their ids, oldest first.
struct Steady {
    table: Correlator<Waiter>,
    ids: VecDeque<u64>,
}

/// How the steady-state bench settles the oldest entry.
#[derive(Clone, Copy)]
enum Settle {
    Resolve,
    ResolveOrdered,
    Abandon,
}

criterion_group! {
    name = benches;
    config = config();
    targets = steady, burst
}
criterion_main!(benches);

/// Short runs: small samples, a few seconds per bench.
fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .nresamples(10_000)
        .configure_from_args()
}

/// Insert one + settle one on a table holding 10k.
fn steady(c: &mut Criterion) {
    let mut g = c.benchmark_group("correlator/steady-10k");
    g.throughput(Throughput::Elements(1));
    for (id, settle) in [
        ("insert+resolve", Settle::Resolve),
        ("insert+resolve-ordered", Settle::ResolveOrdered),
        ("insert+abandon", Settle::Abandon),
    ] {
        let mut s = Steady::new(matches!(settle, Settle::ResolveOrdered));
        g.bench_function(id, |b| b.iter(|| s.step(settle)));
    }
    g.finish();
}

/// Insert 10k into an empty table, then resolve all 10k.
fn burst(c: &mut Criterion) {
    let mut g = c.benchmark_group("correlator/burst-10k");
    g.throughput(Throughput::Elements(ENTRIES as u64));
    let mut ids = Vec::with_capacity(ENTRIES);
    g.bench_function("insert-then-resolve", |b| {
        b.iter(|| {
            let mut table = Correlator::<Waiter>::new(false);
            ids.clear();
            for w in 0..ENTRIES as u64 {
                ids.push(insert(&mut table, w));
            }
            for &id in &ids {
                black_box(table.resolve(id));
            }
            table
        })
    });
    g.finish();
}

/// Inserts into a table that is never closed.
fn insert(table: &mut Correlator<Waiter>, waiter: Waiter) -> u64 {
    match table.insert(black_box(waiter)) {
        Ok(id) => id,
        Err(_) => unreachable!("the bench never closes the table; qed"),
    }
}

// === impl Steady ===

impl Steady {
    fn new(ordered: bool) -> Self {
        let mut table = Correlator::new(ordered);
        let ids = (0..ENTRIES as u64).map(|w| insert(&mut table, w)).collect();
        Steady { table, ids }
    }

    /// Inserts one entry and settles the oldest.
    fn step(&mut self, settle: Settle) {
        let id = insert(&mut self.table, 7);
        self.ids.push_back(id);
        let Some(oldest) = self.ids.pop_front() else {
            unreachable!("an id was just pushed; qed");
        };
        let settled = match settle {
            Settle::Resolve => self.table.resolve(oldest),
            Settle::ResolveOrdered => match self.table.resolve_ordered(Some(oldest)) {
                Ok(r) => r,
                Err(e) => unreachable!("ids are settled in write order; qed ({e})"),
            },
            Settle::Abandon => self
                .table
                .abandon(oldest)
                .map_or(Resolution::Unknown, Resolution::Pending),
        };
        black_box(settled);
    }
}
