//! One soak client: connects, sends paced echo requests, checks every reply,
//! and (in chaos mode) misbehaves on purpose; reconnects until the soak ends.
//!
//! Ids keep counting across reconnections, so a reply that reaches the wrong
//! connection or a later one hits an id that is not pending (or has another
//! nonce): it is counted as misrouted. Every request ends in exactly one of
//! these: a verified reply, an error reply for its id, "cut" (its connection
//! was closed by the gateway, or dropped on purpose by a chaos client), or
//! "lost" (nothing at all within [`GRACE`] on an open connection).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tokio_util::sync::CancellationToken;

use super::super::conn::{Buffers, Endpoint, Rx, Tx};
use super::super::received::Received;
use super::super::wire::{Out, Reply, Requests, Wire};
use super::chaos;
use super::stats::Row;

/// How long a connection that stopped sending waits for its pending
/// replies before counting them lost: switchyard's default
/// `request_timeout_ms` (30 s) answers every request by then, plus a margin.
pub(crate) const GRACE: Duration = Duration::from_secs(40);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed connection attempt.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// How a client behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behavior {
    /// Paced requests on one long connection.
    Steady,
    /// Like steady, but stops reading for seconds at a time (chaos).
    Stall,
    /// Short connections: send for a moment, wait for every reply, close,
    /// reconnect (chaos).
    Loop,
    /// Short connections dropped with requests in flight (chaos): those
    /// count as cut.
    Drop,
    /// Steady traffic with a garbage or oversize message now and then
    /// (chaos).
    Garbage,
}

/// What one client does.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// Where it connects.
    pub(crate) endpoint: Endpoint,
    /// What it speaks.
    pub(crate) wire: Wire,
    /// How it behaves.
    pub(crate) behavior: Behavior,
    /// Requests per second.
    pub(crate) rate: f64,
    /// Requests in flight at most.
    pub(crate) window: usize,
    /// Longest stall (for [`Behavior::Stall`]).
    pub(crate) max_stall: Duration,
    /// Where its counts go.
    pub(crate) row: Arc<Row>,
}

/// Per-connection state.
struct Conn {
    /// Pending ids and their nonces; at most `window` entries.
    pending: HashMap<u64, u64>,
    /// Reading paused until then.
    stalled_until: Option<Instant>,
    /// When the next stall starts.
    next_stall: Instant,
    /// When the next request is due.
    next_send: Instant,
    /// Requests sent on this connection, to pick sizes and garbage turns.
    sent_here: u64,
}

/// What a client counts across its connections.
#[derive(Debug, Default)]
struct Counters {
    /// The last request id used.
    id: u64,
    /// Garbage messages sent (picks the next kind of garbage).
    garbage: u64,
}

/// How a connection ended.
enum End {
    /// It stopped sending (soak over, or its lifetime ran out).
    Stopped,
    /// The gateway closed it, or a read or write failed.
    Closed,
}

/// Runs the client until `stop`, then drains (at most [`GRACE`]).
pub(crate) async fn run(spec: Spec, stop: CancellationToken) {
    let sizes = [64, 512, 8192];
    let Ok(requests) = sizes
        .iter()
        .map(|&n| Requests::new(spec.wire, n))
        .collect::<anyhow::Result<Vec<_>>>()
    else {
        spec.row.kind("cannot build requests");
        return;
    };
    let mut counters = Counters::default();
    while !stop.is_cancelled() {
        let connected = timeout(
            CONNECT_TIMEOUT,
            spec.endpoint.connect(spec.wire, Buffers::Small),
        )
        .await;
        let Ok(Ok((tx, rx))) = connected else {
            spec.row.kind("connect failed");
            tokio::select! {
                () = stop.cancelled() => {}
                () = sleep(RECONNECT_PAUSE) => {}
            }
            continue;
        };
        spec.row.add(&spec.row.connections, 1);
        let lifetime = match spec.behavior {
            Behavior::Loop => Some(rand_between(200, 2000)),
            Behavior::Drop => Some(rand_between(100, 1000)),
            _ => None,
        };
        let until = lifetime.map(|l| Instant::now() + l);
        connection(&spec, &requests, tx, rx, &mut counters, until, &stop).await;
    }
}

/// One connection, from the first request to its end.
async fn connection(
    spec: &Spec,
    requests: &[Requests],
    mut tx: Tx,
    mut rx: Rx,
    counters: &mut Counters,
    until: Option<Instant>,
    stop: &CancellationToken,
) {
    let now = Instant::now();
    let mut c = Conn {
        pending: HashMap::with_capacity(spec.window),
        stalled_until: None,
        next_stall: now + rand_between(2000, 6000),
        next_send: now,
        sent_here: 0,
    };
    let gap = Duration::from_secs_f64(1.0 / spec.rate.max(0.1));
    let far = now + Duration::from_secs(365 * 24 * 3600);
    let end = loop {
        if stop.is_cancelled() || until.is_some_and(|u| Instant::now() >= u) {
            break End::Stopped;
        }
        let stalling = spec.behavior == Behavior::Stall;
        let room = c.pending.len() < spec.window;
        tokio::select! {
            biased;
            () = stop.cancelled() => {}
            () = sleep_until(until.unwrap_or(far)) => {}
            () = sleep_until(c.stalled_until.unwrap_or(far)), if c.stalled_until.is_some() => {
                c.stalled_until = None;
                c.next_stall = Instant::now() + rand_between(2000, 6000);
            }
            () = sleep_until(c.next_stall), if stalling && c.stalled_until.is_none() => {
                let most = u64::try_from(spec.max_stall.as_millis()).unwrap_or(u64::MAX);
                c.stalled_until = Some(Instant::now() + rand_between(1000, most.max(1001)));
            }
            msg = rx.recv(), if c.stalled_until.is_none() => match msg {
                Some(Ok(msg)) => settle(spec, &mut c, &msg),
                Some(Err(_)) | None => break End::Closed,
            },
            () = sleep_until(c.next_send), if room => {
                // Behind schedule (a stall, a full window): no burst to catch up.
                c.next_send = (c.next_send + gap).max(Instant::now());
                if send(spec, requests, &mut c, &mut tx, counters).await.is_err() {
                    break End::Closed;
                }
            }
        }
    };
    if let End::Closed = end {
        spec.row.kind(&closed(spec));
        cut(spec, &mut c);
        return;
    }
    if spec.behavior == Behavior::Drop {
        // Dropped with its requests in flight, on purpose.
        cut(spec, &mut c);
        return;
    }
    drain(spec, &mut c, &mut rx).await;
}

/// Sends one request (or, for a garbage client now and then, garbage).
async fn send(
    spec: &Spec,
    requests: &[Requests],
    c: &mut Conn,
    tx: &mut Tx,
    counters: &mut Counters,
) -> std::io::Result<()> {
    c.sent_here += 1;
    if spec.behavior == Behavior::Garbage && c.sent_here.is_multiple_of(chaos::GARBAGE_EVERY) {
        let (kind, out) = chaos::garbage(spec.wire, counters.garbage);
        counters.garbage += 1;
        spec.row.kind(kind);
        spec.row.add(&spec.row.garbage, 1);
        tx.feed(out).await?;
        return tx.flush().await;
    }
    counters.id += 1;
    let next_id = &mut counters.id;
    let nonce: u64 = rand::random();
    let pick = usize::try_from(c.sent_here).unwrap_or(0) % requests.len().max(1);
    let out: Out = match requests.get(pick) {
        Some(r) => r.make(*next_id, nonce),
        None => return Ok(()),
    };
    c.pending.insert(*next_id, nonce);
    spec.row.add(&spec.row.requests, 1);
    tx.feed(out).await?;
    tx.flush().await
}

/// Checks one message against the pending table.
fn settle(spec: &Spec, c: &mut Conn, msg: &Received) {
    let row = &spec.row;
    match spec.wire.parse(msg) {
        Reply::Echo { id, nonce } => {
            if c.pending.get(&id) == Some(&nonce) {
                c.pending.remove(&id);
                row.add(&row.replies, 1);
            } else {
                row.add(&row.misrouted, 1);
                row.sample_misrouted(msg.bytes());
            }
        }
        Reply::Mismatch => {
            row.add(&row.misrouted, 1);
            row.sample_misrouted(msg.bytes());
        }
        Reply::Error(id) => {
            let kind = chaos::error_kind(spec.wire, msg);
            if id.is_some_and(|id| c.pending.remove(&id).is_some()) {
                row.add(&row.error_replies, 1);
                row.kind(&kind);
            } else {
                row.kind(&format!("{kind}, for no pending request"));
            }
        }
        Reply::Ignore => {}
        // An error whose id is not one of ours (an answer to garbage) does
        // not parse as a reply; anything else is unreadable.
        Reply::Malformed => match chaos::error_code(spec.wire, msg) {
            Some(code) => row.kind(&format!("error reply {code}, for no pending request")),
            None => row.kind("unreadable message from the gateway"),
        },
    }
}

/// Waits for the pending replies (reading again if stalled); whatever is
/// still pending after [`GRACE`] on an open connection is lost.
async fn drain(spec: &Spec, c: &mut Conn, rx: &mut Rx) {
    let deadline = Instant::now() + GRACE;
    while !c.pending.is_empty() {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Ok(msg))) => settle(spec, c, &msg),
            Ok(Some(Err(_)) | None) => {
                spec.row.kind(&closed(spec));
                cut(spec, c);
                return;
            }
            Err(_) => {
                let n = c.pending.len() as u64;
                spec.row.add(&spec.row.lost, n);
                c.pending.clear();
                return;
            }
        }
    }
}

/// The error kind of a connection the gateway closed, by client kind.
fn closed(spec: &Spec) -> String {
    format!(
        "connection closed by the gateway ({} client)",
        format!("{:?}", spec.behavior).to_lowercase()
    )
}

/// The pending requests of a connection that ended: cut, not lost.
fn cut(spec: &Spec, c: &mut Conn) {
    spec.row.add(&spec.row.cut, c.pending.len() as u64);
    c.pending.clear();
}

/// A random duration between `lo` and `hi` milliseconds.
fn rand_between(lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rand::rng().random_range(lo..=hi.max(lo)))
}
