//! Soak and chaos: `loadgen --soak DURATION [--chaos]`.
//!
//! One switchyard with four listeners (JSON-RPC WebSocket, holon-rpc,
//! Sideband, NDJSON on a Unix socket), all routed to one reference NDJSON
//! daemon, carries paced mixed traffic from clients of all four dialects
//! (Sideband with JSON and with CBOR envelopes) for DURATION. With
//! `--chaos` the daemon is killed and restarted every 20 s (5 s with
//! `--smoke`), some clients stop reading for seconds at a time, some
//! reconnect in loops, some drop connections with requests in flight, and
//! some inject garbage and oversize messages (see `client` and `chaos`).
//!
//! The report counts requests, replies, error replies by kind, cut (pending
//! on a connection the gateway closed or a chaos client dropped), lost (no
//! reply and no connection loss) and misrouted (a reply with an id or nonce
//! of no pending request), and samples switchyard's RSS every second: flat
//! means max/min <= 1.3 after the warm-up. It passes when misrouted and lost
//! are 0 and the RSS is flat (not judged with `--smoke`). Everything is
//! loopback and bounded: clients pace their requests and cap them in flight.

mod chaos;
mod client;
mod report;
mod stats;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use switchyard::dialect::sideband::Encoding;
use switchyard::dialect::Dialect;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use self::client::{Behavior, Spec};
use self::stats::{Row, Shared, MAX_RSS_SAMPLES};
use super::conn::Endpoint;
use super::procs::{self, ChildGuard};
use super::target::gateway_config::{self, ListenerSpec, Upstream};
use super::target::launch;
use super::target::{probe_echo, StartOpts};
use super::wire::Wire;

/// The daemon is killed this often with `--chaos`.
const KILL_EVERY: Duration = Duration::from_secs(20);
/// The same with `--smoke`, so that a short run sees several restarts.
const SMOKE_KILL_EVERY: Duration = Duration::from_secs(5);
/// Extra time, after the clients' own grace, before unfinished clients are
/// given up on.
const JOIN_MARGIN: Duration = Duration::from_secs(15);

/// What the command line asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// How long traffic runs.
    pub(crate) duration: Duration,
    /// Chaos on.
    pub(crate) chaos: bool,
    /// Which chaos ingredients (all unless `--chaos-only` names some).
    pub(crate) parts: Parts,
    /// Smaller client counts and rates; RSS not judged.
    pub(crate) smoke: bool,
}

/// One chaos ingredient, for `--chaos-only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Part {
    /// The daemon killed and restarted.
    Restart,
    /// Clients that stop reading for seconds.
    Stall,
    /// Clients that reconnect in loops.
    Loop,
    /// Clients that drop connections with requests in flight.
    Drop,
    /// Clients that inject garbage and oversize messages.
    Garbage,
}

/// The chaos ingredients a run uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parts([bool; 5]);

impl Parts {
    /// `only`, or every ingredient when `only` is empty.
    pub(crate) fn of(only: &[Part]) -> Self {
        let mut on = [only.is_empty(); 5];
        for p in only {
            if let Some(slot) = on.get_mut(*p as usize) {
                *slot = true;
            }
        }
        Parts(on)
    }

    /// Whether `part` is on.
    pub(crate) fn has(self, part: Part) -> bool {
        self.0.get(part as usize).copied().unwrap_or(false)
    }

    /// The ingredients on, comma-separated.
    pub(crate) fn names(self) -> String {
        use clap::ValueEnum as _;
        Part::value_variants()
            .iter()
            .filter(|p| self.has(**p))
            .filter_map(|p| p.to_possible_value())
            .map(|v| v.get_name().to_owned())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// One client kind: how many per dialect, its rate, window, longest stall.
struct Mix {
    behavior: Behavior,
    per_wire: usize,
    rate: f64,
    window: usize,
    max_stall: Duration,
}

/// The dialects clients speak: label, listener index, wire.
const WIRES: [(&str, usize, Wire); 5] = [
    ("jsonrpc-ws", 0, Wire::JsonRpc),
    ("holon-rpc", 1, Wire::Holon),
    ("sideband json", 2, Wire::Sideband(Encoding::Json)),
    ("sideband cbor", 2, Wire::Sideband(Encoding::Cbor)),
    ("ndjson", 3, Wire::JsonRpc),
];

/// Runs the soak and prints its report; `Ok(true)` when it passed.
pub(crate) async fn run(s: Settings, start: &StartOpts, config_line: &str) -> anyhow::Result<bool> {
    let dir = tempfile::Builder::new()
        .prefix("loadgen-soak-")
        .tempdir()
        .context("creating a temp dir")?;
    let (daemon, socket) = launch::ndjson_daemon(start, dir.path()).await?;
    let mut listeners = Vec::new();
    let mut endpoints = Vec::new();
    for (name, dialect) in [
        ("jsonrpc", Dialect::JsonRpc),
        ("holon", Dialect::Holon),
        ("sideband", Dialect::Sideband),
        ("ndjson", Dialect::Ndjson),
    ] {
        let (spec, endpoint) = gateway_config::listener_spec(name, dialect, dir.path())?;
        let sideband_cbor = (dialect == Dialect::Sideband).then_some(true);
        listeners.push(ListenerSpec {
            sideband_cbor,
            ..spec
        });
        endpoints.push(endpoint);
    }
    let upstream = Upstream::Ndjson(socket);
    let mut gateway = launch::start_switchyard(start, &listeners, &upstream, dir.path())?;
    for (_, at, wire) in WIRES {
        let endpoint = endpoints.get(at).context("listener index")?;
        probe_echo(endpoint, wire, std::slice::from_mut(&mut gateway)).await?;
    }
    crate::emit(&report::heading(s, config_line));

    let shared = Arc::new(Shared::default());
    let stop = CancellationToken::new();
    let (rows, tasks) = spawn_clients(s, &endpoints, &shared, &stop)?;
    let restarts = AtomicU64::new(0);
    let every = if s.smoke {
        SMOKE_KILL_EVERY
    } else {
        KILL_EVERY
    };
    let chaos = async {
        if !s.chaos || !s.parts.has(Part::Restart) {
            stop.cancelled().await;
            return Ok(daemon);
        }
        let r = chaos::restart_daemon(daemon, start, dir.path(), every, &restarts, &stop).await;
        if r.is_err() {
            stop.cancel();
        }
        r
    };
    let began = Instant::now();
    let monitor = monitor(gateway, began + s.duration, s, &rows, &stop);
    let (daemon, (samples, gateway, died)) = tokio::join!(chaos, monitor);
    stop.cancel();
    let chaos_failure = daemon.as_ref().err().map(|e| format!("{e:#}"));

    let deadline = tokio::time::Instant::now() + client::GRACE + JOIN_MARGIN;
    let mut unfinished = 0usize;
    for task in tasks {
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            unfinished += 1;
        }
    }
    let outcome = report::Outcome {
        settings: s,
        elapsed: began.elapsed(),
        rows: &rows,
        shared: &shared,
        restarts: restarts.load(Ordering::Relaxed),
        samples: &samples,
        died,
        chaos_failure,
        unfinished,
    };
    let passed = report::print(&outcome);
    // The daemon and the gateway are killed here, the temp dir removed.
    drop((gateway, daemon));
    Ok(passed)
}

/// The client kinds and their numbers per dialect.
fn mixes(s: Settings) -> Vec<Mix> {
    let pick = |smoke: f64, full: f64| if s.smoke { smoke } else { full };
    let mix = |behavior, rate, window, stall_s| Mix {
        behavior,
        per_wire: 1,
        rate,
        window,
        max_stall: Duration::from_secs(stall_s),
    };
    let mut out = vec![Mix {
        per_wire: if s.smoke { 1 } else { 2 },
        ..mix(Behavior::Steady, pick(50.0, 100.0), 16, 0)
    }];
    if s.chaos {
        let chaotic = [
            (
                Part::Stall,
                mix(
                    Behavior::Stall,
                    pick(20.0, 50.0),
                    if s.smoke { 64 } else { 256 },
                    if s.smoke { 3 } else { 10 },
                ),
            ),
            (Part::Loop, mix(Behavior::Loop, pick(20.0, 50.0), 4, 0)),
            (Part::Drop, mix(Behavior::Drop, pick(20.0, 50.0), 8, 0)),
            (Part::Garbage, mix(Behavior::Garbage, 20.0, 4, 0)),
        ];
        out.extend(
            chaotic
                .into_iter()
                .filter(|(p, _)| s.parts.has(*p))
                .map(|(_, m)| m),
        );
    }
    out
}

/// The clients' rows, and their tasks.
type Clients = (Vec<Arc<Row>>, Vec<tokio::task::JoinHandle<()>>);

/// Starts every client; returns the rows and the tasks.
fn spawn_clients(
    s: Settings,
    endpoints: &[Endpoint],
    shared: &Arc<Shared>,
    stop: &CancellationToken,
) -> anyhow::Result<Clients> {
    let mut rows = Vec::new();
    let mut tasks = Vec::new();
    for (label, at, wire) in WIRES {
        let endpoint = endpoints.get(at).context("listener index")?;
        for m in mixes(s) {
            let name = format!("{label} {}", format!("{:?}", m.behavior).to_lowercase());
            let row = Arc::new(Row::new(name, shared.clone()));
            for _ in 0..m.per_wire {
                let spec = Spec {
                    endpoint: endpoint.clone(),
                    wire,
                    behavior: m.behavior,
                    rate: m.rate,
                    window: m.window,
                    max_stall: m.max_stall,
                    row: row.clone(),
                };
                tasks.push(tokio::spawn(client::run(spec, stop.clone())));
            }
            rows.push(row);
        }
    }
    Ok((rows, tasks))
}

/// Samples switchyard's RSS every second until `end` (or `stop`), checks
/// that it is still running, prints progress now and then. Returns the
/// samples (seconds since start, KiB), the gateway, and why it died if it
/// did. Cancels `stop` at the end.
async fn monitor(
    mut gateway: ChildGuard,
    end: Instant,
    s: Settings,
    rows: &[Arc<Row>],
    stop: &CancellationToken,
) -> (Vec<(f64, u64)>, ChildGuard, Option<String>) {
    let began = Instant::now();
    let pid = gateway.id();
    let progress_every = if s.smoke { 5 } else { 60 };
    let mut samples = Vec::new();
    let mut died = None;
    let mut tick = began;
    let mut n = 0u64;
    while tick < end && !stop.is_cancelled() {
        tick += Duration::from_secs(1);
        tokio::select! {
            () = stop.cancelled() => break,
            () = sleep_until(tick.min(end)) => {}
        }
        if let Err(e) = gateway.check_alive() {
            died = Some(format!("{e:#}"));
            break;
        }
        if let Some(kib) = procs::vm_kib(pid, "VmRSS") {
            if samples.len() < MAX_RSS_SAMPLES {
                samples.push((began.elapsed().as_secs_f64(), kib));
            }
        }
        n += 1;
        if n.is_multiple_of(progress_every) {
            crate::emit(&report::progress(began.elapsed(), rows, samples.last()));
        }
    }
    stop.cancel();
    (samples, gateway, died)
}
