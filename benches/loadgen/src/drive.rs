//! The load itself: C connections, each with a writer that keeps W requests
//! in flight (closed loop) or sends on a fixed schedule (open loop), and a
//! reader that checks every reply's id and nonce.
//!
//! Everything is bounded: writers stop at the end of the window, readers at
//! the end plus a grace period, and whatever is still unanswered then is
//! counted as lost. Replies before the measured window (warm-up) count for
//! correctness but not for rates or latencies.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::time::{sleep_until, timeout_at, Instant};
use tokio_util::sync::CancellationToken;

use super::conn::{Buffers, Endpoint, Rx, Tx};
use super::wire::{Reply, Requests, Wire};

/// Requests a writer puts into one flush at most.
const MAX_BATCH: usize = 64;
/// Connections opened at once.
const CONNECT_CONCURRENCY: usize = 64;

/// The shape of one traffic run.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Load {
    /// Client connections.
    pub(crate) conns: usize,
    /// Requests in flight per connection (closed loop), or the cap on them
    /// (open loop).
    pub(crate) window: usize,
    /// Size of each request's params, in bytes.
    pub(crate) params_bytes: usize,
    /// Open loop: total requests per second, spread over the connections.
    pub(crate) rate: Option<u32>,
}

/// When a run sends and measures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Writers start (warm-up begins).
    pub(crate) begin: Instant,
    /// Measurement starts.
    pub(crate) start: Instant,
    /// Writers stop; measurement ends.
    pub(crate) end: Instant,
    /// How long readers wait for outstanding replies after `end`.
    pub(crate) grace: Duration,
}

/// What a run (or one connection) observed.
#[derive(Debug)]
pub(crate) struct Tally {
    /// Latencies in nanoseconds of requests sent in the measured window.
    pub(crate) hist: Histogram<u32>,
    /// Verified replies received inside the measured window.
    pub(crate) completed: u64,
    /// Requests sent (warm-up included).
    pub(crate) sent: u64,
    /// Verified replies (warm-up included).
    pub(crate) verified: u64,
    /// Error replies, unreadable replies and failed connections.
    pub(crate) errors: u64,
    /// Replies whose id is not pending or whose nonce is wrong.
    pub(crate) mismatches: u64,
    /// Requests without a reply when the reader stopped.
    pub(crate) lost: u64,
}

/// One request in flight.
#[derive(Debug, Clone, Copy)]
struct Sent {
    nonce: u64,
    at: Instant,
}

/// State shared by one connection's writer and reader.
#[derive(Debug)]
struct Flight {
    pending: Mutex<HashMap<u64, Sent>>,
    /// Free request slots; the reader returns one per settled request.
    slots: Semaphore,
    /// Cancelled when the writer has stopped.
    done: CancellationToken,
}

/// What one connection's writer does.
#[derive(Debug, Clone)]
struct Plan {
    wire: Wire,
    requests: Arc<Requests>,
    timing: Timing,
    /// Open loop: the gap between sends, and the first send.
    schedule: Option<(Duration, Instant)>,
}

/// Opens `n` connections for `wire`; fails if any cannot be opened.
pub(crate) async fn connect_all(
    endpoint: &Endpoint,
    wire: Wire,
    n: usize,
) -> anyhow::Result<Vec<(Tx, Rx)>> {
    stream::iter(0..n)
        .map(|_| endpoint.connect(wire, Buffers::Default))
        .buffer_unordered(CONNECT_CONCURRENCY)
        .try_collect()
        .await
        .map_err(|e| anyhow::anyhow!("opening {n} connections: {e}"))
}

/// Drives every connection through `timing` and merges their tallies.
pub(crate) async fn run(
    conns: Vec<(Tx, Rx)>,
    wire: Wire,
    requests: Requests,
    load: &Load,
    timing: Timing,
) -> Tally {
    let requests = Arc::new(requests);
    let n = conns.len().max(1) as u32;
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, (tx, rx))| {
            let schedule = load.rate.map(|rate| {
                let gap = Duration::from_secs_f64(f64::from(n) / f64::from(rate.max(1)));
                (gap, timing.begin + gap * i as u32 / n)
            });
            let plan = Plan {
                wire,
                requests: requests.clone(),
                timing,
                schedule,
            };
            tokio::spawn(drive_conn(tx, rx, plan, load.window))
        })
        .collect();
    let mut total = Tally::new();
    for task in tasks {
        match task.await {
            Ok(t) => total.merge(&t),
            // A panicked connection task: its requests are unaccounted for.
            Err(_) => total.errors += 1,
        }
    }
    total
}

/// One connection: writer and reader, then the unanswered count.
async fn drive_conn(mut tx: Tx, mut rx: Rx, plan: Plan, window: usize) -> Tally {
    let flight = Flight {
        pending: Mutex::new(HashMap::with_capacity(window)),
        slots: Semaphore::new(window),
        done: CancellationToken::new(),
    };
    let (sent, mut tally) = tokio::join!(
        write_loop(&mut tx, &flight, &plan),
        read_loop(&mut rx, &flight, &plan)
    );
    tally.sent = sent;
    tally.lost = flight.pending.lock().len() as u64;
    tally
}

/// Sends until the window ends; returns how many requests went out.
async fn write_loop(tx: &mut Tx, flight: &Flight, plan: &Plan) -> u64 {
    let end = plan.timing.end;
    let mut next_at = plan.schedule.map(|(_, first)| first);
    let mut id = 0u64;
    loop {
        if let (Some(at), Some((gap, _))) = (next_at.as_mut(), plan.schedule) {
            if *at >= end {
                break;
            }
            sleep_until(*at).await;
            *at += gap;
        }
        match timeout_at(end, flight.slots.acquire()).await {
            Ok(Ok(slot)) => slot.forget(),
            _ => break,
        }
        if Instant::now() >= end {
            break;
        }
        let mut batch = 1;
        // Closed loop: every slot already free goes into the same flush.
        while plan.schedule.is_none() && batch < MAX_BATCH {
            match flight.slots.try_acquire() {
                Ok(slot) => slot.forget(),
                Err(_) => break,
            }
            batch += 1;
        }
        if send_batch(tx, flight, plan, &mut id, batch).await.is_err() {
            break;
        }
    }
    flight.done.cancel();
    id
}

/// Registers and writes `batch` requests, then flushes them.
async fn send_batch(
    tx: &mut Tx,
    flight: &Flight,
    plan: &Plan,
    id: &mut u64,
    batch: usize,
) -> std::io::Result<()> {
    for _ in 0..batch {
        *id += 1;
        let nonce: u64 = rand::random();
        let out = plan.requests.make(*id, nonce);
        let at = Instant::now();
        flight.pending.lock().insert(*id, Sent { nonce, at });
        tx.feed(out).await?;
    }
    tx.flush().await
}

/// Reads and checks replies until the writer is done and nothing is
/// pending, or the grace period is over.
async fn read_loop(rx: &mut Rx, flight: &Flight, plan: &Plan) -> Tally {
    let mut tally = Tally::new();
    let stop_at = plan.timing.end + plan.timing.grace;
    loop {
        if flight.done.is_cancelled() && flight.pending.lock().is_empty() {
            break;
        }
        let next = tokio::select! {
            biased;
            next = rx.recv() => next,
            () = flight.done.cancelled(), if !flight.done.is_cancelled() => continue,
            () = sleep_until(stop_at) => break,
        };
        match next {
            Some(Ok(msg)) => tally.settle(plan.wire.parse(&msg), flight, &plan.timing),
            // The connection failed or ended: what is pending is lost.
            Some(Err(_)) | None => {
                tally.errors += 1;
                break;
            }
        }
    }
    tally
}

// === impl Tally ===

impl Tally {
    /// Nothing observed yet.
    pub(crate) fn new() -> Self {
        Tally {
            hist: new_histogram(),
            completed: 0,
            sent: 0,
            verified: 0,
            errors: 0,
            mismatches: 0,
            lost: 0,
        }
    }

    /// Adds another tally's counts and latencies.
    pub(crate) fn merge(&mut self, other: &Tally) {
        // Both histograms share the same bounds, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.completed += other.completed;
        self.sent += other.sent;
        self.verified += other.verified;
        self.errors += other.errors;
        self.mismatches += other.mismatches;
        self.lost += other.lost;
    }

    /// Checks one reply against the pending table.
    fn settle(&mut self, reply: Reply, flight: &Flight, timing: &Timing) {
        let now = Instant::now();
        match reply {
            Reply::Echo { id, nonce } => {
                let sent = {
                    let mut pending = flight.pending.lock();
                    match pending.get(&id) {
                        Some(s) if s.nonce == nonce => pending.remove(&id),
                        // Not ours (another client's reply) or not pending.
                        _ => None,
                    }
                };
                let Some(sent) = sent else {
                    self.mismatches += 1;
                    return;
                };
                flight.slots.add_permits(1);
                self.verified += 1;
                self.record(sent.at, now, timing);
            }
            Reply::Error(id) => {
                self.errors += 1;
                if id.is_some_and(|id| flight.pending.lock().remove(&id).is_some()) {
                    flight.slots.add_permits(1);
                }
            }
            Reply::Mismatch => self.mismatches += 1,
            Reply::Ignore => {}
            Reply::Malformed => self.errors += 1,
        }
    }

    fn record(&mut self, sent: Instant, now: Instant, timing: &Timing) {
        if sent >= timing.start && sent < timing.end {
            let nanos = u64::try_from((now - sent).as_nanos()).unwrap_or(u64::MAX);
            self.hist.saturating_record(nanos);
        }
        if now >= timing.start && now <= timing.end {
            self.completed += 1;
        }
    }
}

/// 1 µs to 60 s at three significant digits, counted in `u32` to keep the
/// per-connection histograms small.
pub(crate) fn new_histogram() -> Histogram<u32> {
    match Histogram::new_with_bounds(1_000, 60_000_000_000, 3) {
        Ok(h) => h,
        Err(e) => unreachable!("the bounds are constant and valid; qed ({e})"),
    }
}

/// The latencies in `hist` (ns) as µs: p50, p90, p99, p99.9, max.
pub(crate) fn latency_us(hist: &Histogram<u32>) -> [f64; 5] {
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    [
        us(0.5),
        us(0.9),
        us(0.99),
        us(0.999),
        hist.max() as f64 / 1000.0,
    ]
}
