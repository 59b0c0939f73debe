//! The fanout scenario: N JSON-RPC WebSocket subscribers of one pub/sub
//! feed, the reference daemon's `Subscribe` stream at 1,000 events/s of
//! about 256 B, which switchyard opens once and fans out.
//!
//! The subscribers are dealt round-robin over the target's instances (one,
//! or several on a NATS backbone: the scaleout scenario); on each instance
//! half take the exact topic, half the wildcard `daemon.>`. The warm-up
//! starts once every subscriber has its first event (on a backbone, the
//! instance's NATS subscription is made after `rpc.subscribe` is
//! answered), or after [`FIRST_EVENT_TIMEOUT`].
//! Each reads its socket in a task of its own and checks every event: the
//! topic, and the daemon's `seq`, which must grow by exactly one (a jump is
//! lost events, a step back or a repeat is out of order). The delivery
//! latency is taken as [`feed`] describes.
//!
//! After the window, every subscriber still open reads on until it has the
//! highest `seq` any subscriber saw by the end of the window (or the grace
//! period ends: what is missing then is lost too). A subscriber the gateway
//! closed (as a slow consumer) is counted apart and its gaps are not loss:
//! the zero-loss target is for subscribers that keep up. One whose first
//! event is later than the window's first is counted `late`: with zero
//! lost and zero late, every subscriber got every event of the window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::bail;
use futures_util::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use tokio::sync::{mpsc, watch};
use tokio::time::{timeout_at, Instant};

use super::conn::{Buffers, Endpoint, Rx, Tx};
use super::cpu::{self, CpuUse};
use super::drive::{self, new_histogram, Timing};
use super::feed::{self, TOPIC};
use super::wire::{Out, Wire};

/// The wildcard pattern half the subscribers use.
const WILDCARD: &str = "daemon.>";
/// Connections opened (and subscribed) at once.
const CONNECT_CONCURRENCY: usize = 64;
/// How long all subscriptions may take to be confirmed.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long every confirmed subscriber may wait for its first event before
/// the warm-up starts anyway (a failure guard, not a pause).
const FIRST_EVENT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a fanout run is aimed at.
#[derive(Debug)]
pub(crate) struct Aim<'a> {
    /// Each instance's endpoint, with its process; subscriber `i` goes to
    /// instance `i % len`.
    pub(crate) instances: &'a [(Endpoint, Option<u32>)],
    /// The daemon behind them.
    pub(crate) daemon: Option<u32>,
    /// The backbone's nats-server, if any.
    pub(crate) backbone: Option<u32>,
}

/// One instance's share of a fanout run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct InstanceUse {
    /// Its confirmed subscribers.
    pub(crate) subscribers: usize,
    /// Events its subscribers received in the window.
    pub(crate) delivered: u64,
    /// Its CPU seconds in the window.
    pub(crate) cpu_s: Option<f64>,
}

/// How a fanout run's work was spread: per instance, and the backbone.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Spread {
    /// One per instance, in order.
    pub(crate) instances: Vec<InstanceUse>,
    /// The nats-server's CPU seconds in the window.
    pub(crate) backbone_cpu_s: Option<f64>,
}

/// What a fanout run measured.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Fanout {
    /// Subscribers asked for.
    pub(crate) requested: usize,
    /// Subscribers whose `rpc.subscribe` was confirmed.
    pub(crate) subscribed: usize,
    /// Events the feed published per second in the window (from the range
    /// of `seq` received in it).
    pub(crate) published_per_s: f64,
    /// Events received in the window, over every subscriber.
    pub(crate) delivered: u64,
    /// `delivered` per second.
    pub(crate) delivered_per_s: f64,
    /// Delivery latency in µs of events received in the window: p50, p90,
    /// p99, p99.9, max.
    pub(crate) latency_us: [f64; 5],
    /// Events received in all (warm-up and grace included).
    pub(crate) received: u64,
    /// Events missing for subscribers that stayed open.
    pub(crate) lost: u64,
    /// Events repeated or out of order, or on a wrong topic.
    pub(crate) out_of_order: u64,
    /// Subscribers whose connection ended before the run did (closed by
    /// the gateway, e.g. as slow consumers).
    pub(crate) closed: u64,
    /// Failed connections or subscriptions, error replies, unreadable
    /// frames.
    pub(crate) errors: u64,
    /// Subscribers still open whose first event came after the first one
    /// published in the window: they missed the window's start.
    pub(crate) late: u64,
}

/// One subscriber's observations.
struct Sub {
    hist: Histogram<u32>,
    last: Option<u64>,
    /// The first `seq` received.
    first: Option<u64>,
    /// Lowest and highest `seq` received inside the window.
    window_seqs: Option<(u64, u64)>,
    received: u64,
    in_window: u64,
    lost: u64,
    out_of_order: u64,
    errors: u64,
    ended: bool,
    /// Its `rpc.subscribe` was confirmed.
    confirmed: bool,
}

/// Subscribes `n` clients over the instances of `aim`, measures for
/// `duration` after a warm-up, and reads the CPU of every process in the
/// window (the first instance's as the server's).
pub(crate) async fn run(
    aim: &Aim<'_>,
    n: usize,
    duration: Duration,
) -> anyhow::Result<(Fanout, CpuUse, Spread)> {
    let k = aim.instances.len();
    if k == 0 {
        bail!("a fanout run needs an instance");
    }
    let (subscribed_tx, mut subscribed_rx) = mpsc::channel::<bool>(n.max(1));
    let (first_tx, mut first_rx) = mpsc::channel::<()>(n.max(1));
    let (timing_tx, timing_rx) = watch::channel(None::<Timing>);
    let (target_tx, target_rx) = watch::channel(0u64);
    let highest = Arc::new(AtomicU64::new(0));
    let connected: Vec<_> = stream::iter(0..n)
        .map(|i| {
            aim.instances[i % k]
                .0
                .connect(Wire::JsonRpc, Buffers::Default)
        })
        .buffered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    let mut out = Fanout {
        requested: n,
        ..Fanout::default()
    };
    let mut spread = Spread {
        instances: vec![InstanceUse::default(); k],
        backbone_cpu_s: None,
    };
    let mut tasks = Vec::with_capacity(n);
    for (i, conn) in connected.into_iter().enumerate() {
        let Ok((tx, rx)) = conn else {
            out.errors += 1;
            continue;
        };
        // Half of each instance's subscribers on either pattern.
        let pattern = if (i / k).is_multiple_of(2) {
            TOPIC
        } else {
            WILDCARD
        };
        let task = tokio::spawn(subscriber(
            tx,
            rx,
            pattern,
            Signals {
                subscribed: subscribed_tx.clone(),
                first: first_tx.clone(),
            },
            timing_rx.clone(),
            target_rx.clone(),
            highest.clone(),
        ));
        tasks.push((i % k, task));
    }
    drop((subscribed_tx, first_tx));
    // Refusals are counted by the subscribers themselves, as errors.
    let (deadline, mut refused) = (Instant::now() + SUBSCRIBE_TIMEOUT, 0);
    while out.subscribed + refused < tasks.len() {
        match timeout_at(deadline, subscribed_rx.recv()).await {
            Ok(Some(true)) => out.subscribed += 1,
            Ok(Some(false)) => refused += 1,
            Ok(None) | Err(_) => break,
        }
    }
    if out.subscribed == 0 {
        bail!("no subscription was confirmed ({} errors)", out.errors);
    }
    // One signal per subscriber that has its first event; one that never
    // gets any is counted as an error by itself.
    let (deadline, mut primed) = (Instant::now() + FIRST_EVENT_TIMEOUT, 0);
    while primed < out.subscribed {
        match timeout_at(deadline, first_rx.recv()).await {
            Ok(Some(())) => primed += 1,
            Ok(None) | Err(_) => break,
        }
    }
    let timing = cpu::timing(duration);
    let _ = timing_tx.send(Some(timing));
    let pids = [aim.instances[0].1, aim.daemon];
    let sampler = tokio::spawn(cpu::sample_cpu(pids, timing));
    let others: Vec<Option<u32>> = aim.instances[1..]
        .iter()
        .map(|(_, pid)| *pid)
        .chain([aim.backbone])
        .collect();
    let others_sampler = tokio::spawn(cpu::sample_cpu_of(others, timing));
    tokio::time::sleep_until(timing.end).await;
    let _ = target_tx.send(highest.load(Ordering::Relaxed));
    // A failed sampler only costs the CPU columns.
    let mut cpu = sampler.await.unwrap_or_default();
    let others = others_sampler.await.unwrap_or_default();
    cpu.exclude_from_other(others.iter().flatten().sum());
    let secs = |d: Option<&Option<Duration>>| d.copied().flatten().map(|d| d.as_secs_f64());
    spread.instances[0].cpu_s = cpu.server_secs();
    for (i, one) in spread.instances.iter_mut().enumerate().skip(1) {
        one.cpu_s = secs(others.get(i - 1));
    }
    spread.backbone_cpu_s = secs(others.get(k - 1)).filter(|_| aim.backbone.is_some());
    let mut hist = new_histogram();
    let mut range: Option<(u64, u64)> = None;
    let mut firsts = Vec::with_capacity(tasks.len());
    // Connections of finished subscribers stay open until every one is
    // done (see `hold`).
    let (release_tx, release_rx) = watch::channel(false);
    let mut held = Vec::with_capacity(tasks.len());
    for (instance, task) in tasks {
        let Ok((sub, tx, rx)) = task.await else {
            out.errors += 1;
            continue;
        };
        held.push(tokio::spawn(hold(tx, rx, release_rx.clone())));
        let share = &mut spread.instances[instance];
        share.delivered += sub.in_window;
        share.subscribers += usize::from(sub.confirmed);
        // Both histograms share the same bounds, so adding cannot fail.
        let _ = hist.add(&sub.hist);
        out.received += sub.received;
        out.delivered += sub.in_window;
        out.out_of_order += sub.out_of_order;
        out.errors += sub.errors;
        if sub.ended {
            out.closed += 1;
        } else {
            out.lost += sub.lost;
            firsts.extend(sub.first);
        }
        if let Some(seqs) = sub.window_seqs {
            range = feed::widen(range, seqs);
        }
    }
    let window = (timing.end - timing.start).as_secs_f64();
    out.delivered_per_s = out.delivered as f64 / window;
    out.published_per_s = range.map_or(0.0, |(lo, hi)| (hi - lo + 1) as f64 / window);
    if let Some((lo, _)) = range {
        out.late = firsts.iter().filter(|&&first| first > lo).count() as u64;
    }
    out.latency_us = drive::latency_us(&hist);
    let _ = release_tx.send(true);
    for task in held {
        // A failed holder only closed its connection early.
        let _ = task.await;
    }
    Ok((out, cpu, spread))
}

/// What a subscriber tells the run as it goes.
struct Signals {
    /// Whether its `rpc.subscribe` was confirmed.
    subscribed: mpsc::Sender<bool>,
    /// Sent once, with its first event.
    first: mpsc::Sender<()>,
}

/// One subscriber: subscribes, reports the confirmation, then reads events
/// until it has the target `seq`, its connection ends, or the grace period
/// after the window is over.
async fn subscriber(
    mut tx: Tx,
    mut rx: Rx,
    pattern: &'static str,
    signals: Signals,
    timing: watch::Receiver<Option<Timing>>,
    target: watch::Receiver<u64>,
    highest: Arc<AtomicU64>,
) -> (Sub, Tx, Rx) {
    let mut sub = Sub::new();
    let request = format!(
        r#"{{"jsonrpc":"2.0","method":"rpc.subscribe","params":{{"topic":"{pattern}"}},"id":1}}"#
    );
    let sent = async {
        tx.feed(Out::Text(request)).await?;
        tx.flush().await
    };
    let Signals { subscribed, first } = signals;
    if sent.await.is_err() {
        let _ = subscribed.send(false).await;
        sub.errors += 1;
        return (sub, tx, rx);
    }
    // `Some(confirmed)` once the answer to `rpc.subscribe` was reported.
    let mut reported: Option<bool> = None;
    // Until the window is known, wait at most the subscribe timeout.
    let mut deadline =
        Instant::now() + SUBSCRIBE_TIMEOUT + FIRST_EVENT_TIMEOUT + Duration::from_secs(60);
    loop {
        if let Some(t) = *timing.borrow() {
            deadline = t.end + t.grace;
        }
        let msg = match timeout_at(deadline, rx.recv()).await {
            Err(_) => {
                let want = *target.borrow();
                match sub.last {
                    Some(last) => sub.lost += want.saturating_sub(last),
                    // Subscribed, open, and not a single event.
                    None => sub.errors += 1,
                }
                break;
            }
            Ok(None | Some(Err(_))) => {
                sub.ended = true;
                break;
            }
            Ok(Some(Ok(msg))) => msg,
        };
        let now = (Instant::now(), SystemTime::now());
        let Some(text) = msg.text() else {
            sub.errors += 1;
            continue;
        };
        if reported.is_none() && text.contains(r#""id":1"#) {
            let confirmed = text.contains(r#""result":{"subscribed":true}"#);
            reported = Some(confirmed);
            sub.confirmed = confirmed;
            let _ = subscribed.send(confirmed).await;
            if !confirmed {
                sub.errors += 1;
                break;
            }
            continue;
        }
        let Some(seq) = event(text) else {
            sub.errors += 1;
            continue;
        };
        if sub.last.is_none() {
            let _ = first.send(()).await;
        }
        sub.record(seq, text, now, timing.borrow().as_ref());
        highest.fetch_max(seq, Ordering::Relaxed);
        let want = *target.borrow();
        if want > 0 && seq >= want {
            break;
        }
    }
    if reported.is_none() {
        let _ = subscribed.send(false).await;
        sub.errors += 1;
    }
    (sub, tx, rx)
}

/// Keeps a finished subscriber's connection open, reading and discarding,
/// until `release`: a subscriber that leaves ends its instance's interest
/// in its pattern, and on a NATS backbone the events in flight on that
/// pattern's subscription may then be missed by the subscribers of an
/// overlapping one still counting theirs. The run measures steady state,
/// not that churn.
async fn hold(_tx: Tx, mut rx: Rx, mut release: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = release.wait_for(|r| *r) => return,
            msg = rx.recv() => {
                if !matches!(msg, Some(Ok(_))) {
                    return;
                }
            }
        }
    }
}

/// The `seq` of an event notification on [`TOPIC`], found without parsing
/// the frame.
fn event(text: &str) -> Option<u64> {
    if !text.contains(r#""method":"rpc.notification""#) || !text.contains(TOPIC_MEMBER) {
        return None;
    }
    feed::number(text, r#""seq":"#)
}

const TOPIC_MEMBER: &str = r#""topic":"daemon.events""#;

// === impl Sub ===

impl Sub {
    /// Nothing observed yet.
    fn new() -> Self {
        Sub {
            hist: new_histogram(),
            last: None,
            first: None,
            window_seqs: None,
            received: 0,
            in_window: 0,
            lost: 0,
            out_of_order: 0,
            errors: 0,
            ended: false,
            confirmed: false,
        }
    }

    fn record(
        &mut self,
        seq: u64,
        text: &str,
        (now, wall): (Instant, SystemTime),
        timing: Option<&Timing>,
    ) {
        self.received += 1;
        match self.last {
            Some(last) if seq == last + 1 => {}
            Some(last) if seq > last => self.lost += seq - last - 1,
            Some(_) => {
                self.out_of_order += 1;
                return;
            }
            None => self.first = Some(seq),
        }
        self.last = Some(seq);
        if !timing.is_some_and(|t| now >= t.start && now < t.end) {
            return;
        }
        self.in_window += 1;
        self.window_seqs = feed::widen(self.window_seqs, (seq, seq));
        if !feed::record_latency(&mut self.hist, text, wall) {
            self.errors += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: &str = r#"{"jsonrpc":"2.0","method":"rpc.notification","params":{"topic":"daemon.events","data":{"event":{"type":"new_approval","timestamp":"2026-11-25T16:00:00.123456789Z","data":{"seq":42,"pad":"xx"}}}}}"#;

    #[test]
    fn events_are_read_without_parsing() {
        assert_eq!(event(FRAME), Some(42));
        assert_eq!(event(&FRAME.replace("daemon.events", "other.topic")), None);
    }

    #[test]
    fn gaps_are_lost_and_steps_back_out_of_order() {
        let mut sub = Sub::new();
        let now = (Instant::now(), SystemTime::now());
        for seq in [5, 6, 9, 9, 10] {
            sub.record(seq, FRAME, now, None);
        }
        assert_eq!((sub.received, sub.lost, sub.out_of_order), (5, 2, 1));
        assert_eq!(sub.last, Some(10));
    }
}
