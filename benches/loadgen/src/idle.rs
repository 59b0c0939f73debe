//! The idle scenario: hold N WebSocket connections open to a gateway and
//! measure what each costs it in resident memory and what they all cost it
//! in CPU while nothing is sent (their clocks' ticks: pings, tidying),
//! then check that every one of them still answers.

use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use tokio::time::Instant;

use super::conn::{Buffers, Endpoint, Rx, Tx};
use super::procs;
use super::wire::{Reply, Requests, Wire};

/// Connections opened at once.
const CONNECT_CONCURRENCY: usize = 64;
/// Time for the gateway to finish setting up the last connections before
/// its memory is read.
const SETTLE: Duration = Duration::from_millis(500);
/// The shortest quiet window of a full run: two of a connection's clock
/// ticks (at most 5 s apart), which connections opened together take at
/// the same moments.
pub(crate) const QUIET_MIN: Duration = Duration::from_secs(10);
/// How long one check request may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// What the idle run measured.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Idle {
    /// Connections asked for.
    pub(crate) requested: usize,
    /// Connections that opened.
    pub(crate) open: usize,
    /// Gateway RSS before opening any, in KiB.
    pub(crate) rss_before_kib: u64,
    /// Gateway RSS with all of them open, in KiB.
    pub(crate) rss_open_kib: u64,
    /// Seconds it took to open them.
    pub(crate) connect_secs: f64,
    /// Connections checked with one request each.
    pub(crate) checked: u64,
    /// Failed connects, error replies, closed connections.
    pub(crate) errors: u64,
    /// Replies with the wrong id or nonce.
    pub(crate) mismatches: u64,
    /// Check requests without a reply.
    pub(crate) lost: u64,
    /// Gateway CPU (user + system) while every connection sat idle, in
    /// ms per second, over the run's measured time (`/proc` counts CPU in
    /// 10 ms ticks: ±10 ms over the window).
    pub(crate) cpu_ms_per_s: Option<f64>,
}

/// Opens `n` connections to `endpoint`, reads the gateway's RSS, leaves
/// them idle for `quiet` while reading its CPU, checks each.
pub(crate) async fn run(
    endpoint: &Endpoint,
    gateway_pid: u32,
    wire: Wire,
    n: usize,
    quiet: Duration,
) -> anyhow::Result<Idle> {
    let requests = Requests::new(wire, 0)?;
    let mut idle = Idle {
        requested: n,
        rss_before_kib: procs::vm_kib(gateway_pid, "VmRSS").unwrap_or(0),
        ..Idle::default()
    };
    let started = Instant::now();
    let opened: Vec<_> = stream::iter(0..n)
        .map(|_| endpoint.connect(wire, Buffers::Small))
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    idle.connect_secs = started.elapsed().as_secs_f64();
    let conns: Vec<(Tx, Rx)> = opened.into_iter().filter_map(Result::ok).collect();
    idle.open = conns.len();
    idle.errors = (n - conns.len()) as u64;
    tokio::time::sleep(SETTLE).await;
    idle.rss_open_kib = procs::vm_kib(gateway_pid, "VmRSS").unwrap_or(0);
    let cpu_before = procs::cpu_time(gateway_pid);
    let quiet_from = Instant::now();
    tokio::time::sleep(quiet).await;
    if let (Some(before), Some(after)) = (cpu_before, procs::cpu_time(gateway_pid)) {
        let used = after.saturating_sub(before).as_secs_f64();
        idle.cpu_ms_per_s = Some(used * 1000.0 / quiet_from.elapsed().as_secs_f64());
    }
    let checks: Vec<Check> = stream::iter(conns.into_iter().enumerate())
        .map(|(i, conn)| check(conn, wire, &requests, i as u64))
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    for c in checks {
        idle.checked += 1;
        match c {
            Check::Ok => {}
            Check::Error => idle.errors += 1,
            Check::Mismatch => idle.mismatches += 1,
            Check::Lost => idle.lost += 1,
        }
    }
    Ok(idle)
}

// === impl Idle ===

impl Idle {
    /// Gateway memory per open connection, in bytes.
    pub(crate) fn bytes_per_conn(&self) -> Option<f64> {
        let grown = self.rss_open_kib.saturating_sub(self.rss_before_kib) as f64 * 1024.0;
        (self.open > 0 && self.rss_open_kib > 0).then(|| grown / self.open as f64)
    }
}

/// The outcome of one check request.
enum Check {
    Ok,
    Error,
    Mismatch,
    Lost,
}

/// Sends one request on an idle connection and checks its reply.
async fn check((mut tx, mut rx): (Tx, Rx), wire: Wire, requests: &Requests, nonce: u64) -> Check {
    let sent = async {
        tx.feed(requests.make(1, nonce)).await?;
        tx.flush().await
    };
    if sent.await.is_err() {
        return Check::Error;
    }
    let deadline = Instant::now() + CHECK_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Err(_) => return Check::Lost,
            Ok(None | Some(Err(_))) => return Check::Error,
            Ok(Some(Ok(msg))) => match wire.parse(&msg) {
                Reply::Echo { id: 1, nonce: n } if n == nonce => return Check::Ok,
                Reply::Echo { .. } | Reply::Mismatch => return Check::Mismatch,
                Reply::Ignore => continue,
                Reply::Error(_) | Reply::Malformed => return Check::Error,
            },
        }
    }
}
