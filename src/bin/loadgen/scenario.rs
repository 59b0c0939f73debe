//! The scenarios, what each runs against which target, and one run from
//! target start to teardown.

use std::time::Duration;

use anyhow::bail;
use tokio::time::Instant;

use super::drive::{self, Load, Tally, Timing};
use super::idle::{self, Idle};
use super::procs;
use super::target::{self, Role, StartOpts, TargetSpec};

/// Every scenario, in run order.
pub(crate) const NAMES: [&str; 6] = [
    "latency",
    "throughput",
    "large",
    "fixed-rate",
    "idle",
    "fan-in",
];

/// How long readers wait for outstanding replies after a run's window.
const GRACE: Duration = Duration::from_secs(3);
/// Cap on requests in flight per connection in the open-loop scenario.
const OPEN_LOOP_CAP: usize = 1024;

/// Settings from the command line that shape the scenarios.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Measured time per run (after warm-up).
    pub(crate) duration: Duration,
    /// Tiny loads for the smoke test.
    pub(crate) smoke: bool,
    /// switchyard's upstream pool size (fan-in always uses 1).
    pub(crate) pool_size: usize,
    /// Connections held open in the idle scenario.
    pub(crate) idle_conns: usize,
}

/// What a run does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    /// Requests, closed or open loop.
    Traffic(Load),
    /// Connections held open, then one request each.
    Idle(usize),
}

/// One target under one load.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    /// Row label.
    pub(crate) label: String,
    /// What is measured.
    pub(crate) target: TargetSpec,
    /// What it is given.
    pub(crate) shape: Shape,
    /// switchyard's upstream pool size for this run.
    pub(crate) pool_size: usize,
}

/// A named list of runs, reported as one table.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    /// Name, as given to `--scenario`.
    pub(crate) name: &'static str,
    /// One line on what it shows.
    pub(crate) about: &'static str,
    /// Its runs, in table order.
    pub(crate) runs: Vec<Run>,
}

/// The result of one run.
#[derive(Debug, serde::Serialize)]
pub(crate) struct RunResult {
    /// Row label.
    pub(crate) label: String,
    /// Floor or gateway.
    pub(crate) role: Role,
    /// The traffic shape (none for idle).
    pub(crate) load: Option<Load>,
    /// Why the run could not be completed.
    pub(crate) failure: Option<String>,
    /// Measured window, seconds.
    pub(crate) window_secs: f64,
    /// Verified replies per second in the window.
    pub(crate) rps: f64,
    /// Latency percentiles in µs: p50, p90, p99, p99.9, max.
    pub(crate) latency_us: [f64; 5],
    /// Requests sent (warm-up included).
    pub(crate) sent: u64,
    /// Verified replies (warm-up included).
    pub(crate) verified: u64,
    /// Error replies, unreadable replies, failed connections.
    pub(crate) errors: u64,
    /// Replies for the wrong request.
    pub(crate) mismatches: u64,
    /// Requests never answered.
    pub(crate) lost: u64,
    /// CPU seconds of the measured server process in the window.
    pub(crate) server_cpu_s: Option<f64>,
    /// CPU seconds of the daemon behind a gateway in the window.
    pub(crate) daemon_cpu_s: Option<f64>,
    /// CPU seconds of the load generator itself in the window.
    pub(crate) loadgen_cpu_s: Option<f64>,
    /// Peak RSS (VmHWM) of the measured server process, KiB.
    pub(crate) server_peak_rss_kib: Option<u64>,
    /// Idle-scenario measurements.
    pub(crate) idle: Option<Idle>,
}

/// A scenario's results.
#[derive(Debug, serde::Serialize)]
pub(crate) struct ScenarioResult {
    /// Scenario name.
    pub(crate) name: &'static str,
    /// What it shows.
    pub(crate) about: &'static str,
    /// One per run.
    pub(crate) runs: Vec<RunResult>,
}

/// CPU time of the processes involved, at one instant.
#[derive(Debug, Clone, Copy)]
struct CpuSnap {
    server: Option<Duration>,
    daemon: Option<Duration>,
    loadgen: Option<Duration>,
}

/// The scenarios named in `names` (`all` for every one), in run order.
pub(crate) fn plan(names: &[String], opts: &Options) -> anyhow::Result<Vec<Scenario>> {
    for n in names {
        if n != "all" && !NAMES.contains(&n.as_str()) {
            bail!(
                "unknown scenario {n:?}; expected all or one of {}",
                NAMES.join(", ")
            );
        }
    }
    let all = names.is_empty() || names.iter().any(|n| n == "all");
    Ok(NAMES
        .iter()
        .filter(|n| all || names.iter().any(|m| m == *n))
        .map(|n| scenario(n, opts))
        .collect())
}

fn scenario(name: &'static str, o: &Options) -> Scenario {
    let s = o.smoke;
    let closed = |conns, window, params_bytes| Load {
        conns,
        window,
        params_bytes,
        rate: None,
    };
    let (about, runs) = match name {
        "latency" => (
            "1 connection, 1 request in flight, 64 B params",
            floors_and_gateways(Shape::Traffic(closed(1, 1, 64)), o),
        ),
        "throughput" => (
            "16 connections x 32 in flight, 256 B params",
            floors_and_gateways(
                Shape::Traffic(closed(pick(s, 16, 2), pick(s, 32, 4), 256)),
                o,
            ),
        ),
        "large" => (
            "64 connections x 8 in flight, 16 KiB params",
            floors_and_gateways(
                Shape::Traffic(closed(pick(s, 64, 2), pick(s, 8, 2), 16 * 1024)),
                o,
            ),
        ),
        "fixed-rate" => {
            let load = Load {
                rate: Some(if s { 200 } else { 5000 }),
                ..closed(pick(s, 16, 2), OPEN_LOOP_CAP, 256)
            };
            (
                "5,000 req/s open loop over 16 connections, 256 B params",
                floors_and_gateways(Shape::Traffic(load), o),
            )
        }
        "idle" => (
            "N idle WebSocket connections held open to switchyard",
            idle_runs(o),
        ),
        _ => (
            "200 clients onto ONE upstream connection vs 16 clients (pool_size 1)",
            fan_in_runs(s),
        ),
    };
    Scenario { name, about, runs }
}

fn pick(smoke: bool, full: usize, small: usize) -> usize {
    if smoke {
        small
    } else {
        full
    }
}

/// Every standard target under the same shape.
fn floors_and_gateways(shape: Shape, o: &Options) -> Vec<Run> {
    target::standard()
        .into_iter()
        .map(|t| Run {
            label: t.name.to_owned(),
            target: t,
            shape,
            pool_size: o.pool_size,
        })
        .collect()
}

/// Every gateway target, held open idle.
fn idle_runs(o: &Options) -> Vec<Run> {
    target::standard()
        .into_iter()
        .filter(|t| t.role == Role::Gateway)
        .map(|t| Run {
            label: t.name.to_owned(),
            target: t,
            shape: Shape::Idle(o.idle_conns),
            pool_size: o.pool_size,
        })
        .collect()
}

/// The JSON-RPC gateway with one upstream connection: many clients, then 16.
fn fan_in_runs(smoke: bool) -> Vec<Run> {
    let t = target::switchyard_jsonrpc();
    [pick(smoke, 200, 20), pick(smoke, 16, 4)]
        .into_iter()
        .map(|clients| Run {
            label: format!("{} x{clients} clients, pool 1", t.name),
            target: t,
            shape: Shape::Traffic(Load {
                conns: clients,
                window: pick(smoke, 8, 2),
                params_bytes: 256,
                rate: None,
            }),
            pool_size: 1,
        })
        .collect()
}

/// Runs every run of a scenario, one after the other.
pub(crate) async fn run(sc: &Scenario, start: &StartOpts, o: &Options) -> ScenarioResult {
    let mut runs = Vec::with_capacity(sc.runs.len());
    for r in &sc.runs {
        let result = match run_one(r, start, o).await {
            Ok(result) => result,
            Err(e) => RunResult::failed(r, format!("{e:#}")),
        };
        runs.push(result);
    }
    ScenarioResult {
        name: sc.name,
        about: sc.about,
        runs,
    }
}

/// Starts the target, applies the shape, reads the numbers, tears down.
async fn run_one(r: &Run, start: &StartOpts, o: &Options) -> anyhow::Result<RunResult> {
    let opts = StartOpts {
        pool_size: r.pool_size,
        ..start.clone()
    };
    let live = r.target.start(&opts).await?;
    let mut result = RunResult::failed(r, String::new());
    result.failure = None;
    match r.shape {
        Shape::Idle(n) => {
            let Some(pid) = live.server_pid else {
                bail!("the idle scenario needs a gateway process");
            };
            let idle = idle::run(&live.endpoint, pid, r.target.wire, n).await;
            result.errors = idle.errors;
            result.mismatches = idle.mismatches;
            result.lost = idle.lost;
            result.idle = Some(idle);
        }
        Shape::Traffic(load) => {
            let conns = drive::connect_all(&live.endpoint, load.conns).await?;
            let pids = [live.server_pid, live.daemon_pid];
            let timing = timing(o.duration);
            let sampler = tokio::spawn(sample_cpu(pids, timing));
            let tally = drive::run(conns, r.target.wire, &load, timing).await;
            let cpu = sampler.await.ok();
            result.fill(&tally, timing, cpu);
        }
    }
    result.server_peak_rss_kib = live.server_pid.and_then(|p| procs::vm_kib(p, "VmHWM"));
    Ok(result)
}

/// Warm-up of a fifth of the duration (at most 1 s), then the window.
fn timing(duration: Duration) -> Timing {
    let begin = Instant::now();
    let start = begin + (duration / 5).min(Duration::from_secs(1));
    Timing {
        begin,
        start,
        end: start + duration,
        grace: GRACE,
    }
}

/// CPU used by the server, the daemon and loadgen between start and end.
async fn sample_cpu(pids: [Option<u32>; 2], timing: Timing) -> [Option<Duration>; 3] {
    let snap = || CpuSnap {
        server: pids[0].and_then(procs::cpu_time),
        daemon: pids[1].and_then(procs::cpu_time),
        loadgen: procs::cpu_time(std::process::id()),
    };
    tokio::time::sleep_until(timing.start).await;
    let a = snap();
    tokio::time::sleep_until(timing.end).await;
    let b = snap();
    let delta = |x: Option<Duration>, y: Option<Duration>| Some(y?.saturating_sub(x?));
    [
        delta(a.server, b.server),
        delta(a.daemon, b.daemon),
        delta(a.loadgen, b.loadgen),
    ]
}

// === impl RunResult ===

impl RunResult {
    /// A result with nothing measured and `why` as its failure.
    fn failed(r: &Run, why: String) -> Self {
        RunResult {
            label: r.label.clone(),
            role: r.target.role,
            load: match r.shape {
                Shape::Traffic(load) => Some(load),
                Shape::Idle(_) => None,
            },
            failure: Some(why),
            window_secs: 0.0,
            rps: 0.0,
            latency_us: [0.0; 5],
            sent: 0,
            verified: 0,
            errors: 0,
            mismatches: 0,
            lost: 0,
            server_cpu_s: None,
            daemon_cpu_s: None,
            loadgen_cpu_s: None,
            server_peak_rss_kib: None,
            idle: None,
        }
    }

    /// Copies a traffic run's tally and CPU deltas in.
    fn fill(&mut self, t: &Tally, timing: Timing, cpu: Option<[Option<Duration>; 3]>) {
        let window = (timing.end - timing.start).as_secs_f64();
        let us = |q: f64| t.hist.value_at_quantile(q) as f64 / 1000.0;
        self.window_secs = window;
        self.rps = t.completed as f64 / window;
        self.latency_us = [
            us(0.5),
            us(0.9),
            us(0.99),
            us(0.999),
            t.hist.max() as f64 / 1000.0,
        ];
        self.sent = t.sent;
        self.verified = t.verified;
        self.errors = t.errors;
        self.mismatches = t.mismatches;
        self.lost = t.lost;
        let [server, daemon, loadgen] = cpu.unwrap_or([None; 3]);
        self.server_cpu_s = server.map(|d| d.as_secs_f64());
        self.daemon_cpu_s = daemon.map(|d| d.as_secs_f64());
        self.loadgen_cpu_s = loadgen.map(|d| d.as_secs_f64());
    }
}
