//! One run from target start to teardown, and what it measured: the
//! verified traffic (or idle connections), CPU time of every process
//! involved and of the machine, and the server's peak memory.

use std::time::Duration;

use anyhow::bail;

use super::cpu::{sample_cpu, timing, CpuUse};
use super::drive::{self, Load, Tally, Timing};
use super::fanout::{self, Aim, Fanout, Spread};
use super::idle::{self, Idle};
use super::persist::{self, Persist};
use super::procs;
use super::scenario::{Options, Run, Scenario, Shape};
use super::target::{Role, StartOpts};
use super::wire::Requests;

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
    /// CPU seconds used by everything else on the machine in the window
    /// (other processes: a noisy machine shows here).
    pub(crate) other_cpu_s: Option<f64>,
    /// The measured server's CPU seconds in the kernel in the window.
    pub(crate) server_kernel_s: Option<f64>,
    /// The measured server's context switches (every thread's) in the
    /// window.
    pub(crate) server_switches: Option<u64>,
    /// Peak RSS (VmHWM) of the measured server process, KiB.
    pub(crate) server_peak_rss_kib: Option<u64>,
    /// Idle-scenario measurements.
    pub(crate) idle: Option<Idle>,
    /// Fanout-scenario measurements.
    pub(crate) fanout: Option<Fanout>,
    /// Fanout and scaleout: the work per instance and the backbone's.
    pub(crate) spread: Option<Spread>,
    /// Persist-scenario measurements.
    pub(crate) persist: Option<Persist>,
}

/// A scenario's results.
#[derive(Debug, serde::Serialize)]
pub(crate) struct ScenarioResult {
    /// Scenario name.
    pub(crate) name: &'static str,
    /// What it shows.
    pub(crate) about: String,
    /// One per run.
    pub(crate) runs: Vec<RunResult>,
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
        about: sc.about.clone(),
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
            // Connections opened together tick together (every 5 s at
            // most): a quiet window shorter than two ticks may see none.
            let quiet = if o.smoke {
                o.duration
            } else {
                o.duration.max(idle::QUIET_MIN)
            };
            let idle = idle::run(&live.endpoint, pid, r.target.wire, n, quiet).await?;
            result.errors = idle.errors;
            result.mismatches = idle.mismatches;
            result.lost = idle.lost;
            result.idle = Some(idle);
        }
        Shape::Fanout(n) => {
            let instances: Vec<_> = [(live.endpoint.clone(), live.server_pid)]
                .into_iter()
                .chain(live.more.iter().map(|(e, pid)| (e.clone(), Some(*pid))))
                .collect();
            let aim = Aim {
                instances: &instances,
                daemon: live.daemon_pid,
                backbone: live.backbone_pid,
            };
            let (f, cpu, spread) = fanout::run(&aim, n, o.duration).await?;
            result.fill_fanout(f, o.duration, cpu);
            result.spread = Some(spread);
        }
        Shape::Persist => {
            let pids = [live.server_pid, live.daemon_pid];
            let (p, cpu) = persist::run(&live.endpoint, o.duration, o.smoke, pids).await?;
            result.fill_persist(p, cpu);
        }
        Shape::Traffic(load) => {
            let requests = Requests::new(r.target.wire, load.params_bytes)?;
            let conns = drive::connect_all(&live.endpoint, r.target.wire, load.conns).await?;
            let pids = [live.server_pid, live.daemon_pid];
            let timing = timing(o.duration);
            let sampler = tokio::spawn(sample_cpu(pids, timing));
            let tally = drive::run(conns, r.target.wire, requests, &load, timing).await;
            // A failed sampler only costs the CPU columns.
            let cpu = sampler.await.unwrap_or_default();
            result.fill(&tally, timing, cpu);
        }
    }
    result.server_peak_rss_kib = live.server_pid.and_then(|p| procs::vm_kib(p, "VmHWM"));
    Ok(result)
}

// === impl RunResult ===

impl RunResult {
    /// A result with nothing measured and `why` as its failure.
    fn failed(r: &Run, why: String) -> Self {
        let load = match r.shape {
            Shape::Traffic(load) => Some(load),
            Shape::Idle(_) | Shape::Fanout(_) | Shape::Persist => None,
        };
        RunResult {
            failure: Some(why),
            ..RunResult::empty(r.label.clone(), r.target.role, load)
        }
    }

    /// A result with nothing measured (and no failure) yet.
    pub(crate) fn empty(label: String, role: Role, load: Option<Load>) -> Self {
        RunResult {
            label,
            role,
            load,
            failure: None,
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
            other_cpu_s: None,
            server_kernel_s: None,
            server_switches: None,
            server_peak_rss_kib: None,
            idle: None,
            fanout: None,
            spread: None,
            persist: None,
        }
    }

    /// Copies a persist run's observations and CPU deltas in: deliveries
    /// count as verified replies, gaps as lost, repeats as mismatched.
    fn fill_persist(&mut self, p: Persist, cpu: CpuUse) {
        self.window_secs = p.window_secs;
        self.rps = p.delivered_per_s;
        self.latency_us = p.latency_us;
        self.verified = p.delivered;
        self.errors = p.errors;
        self.mismatches = p.out_of_order;
        self.lost = p.lost;
        self.persist = Some(p);
        self.set_cpu(cpu);
    }

    /// Copies a fanout run's observations and CPU deltas in: events
    /// received count as verified replies, lost events as lost, repeated or
    /// misplaced ones as mismatched.
    fn fill_fanout(&mut self, f: Fanout, duration: Duration, cpu: CpuUse) {
        self.window_secs = duration.as_secs_f64();
        self.rps = f.delivered_per_s;
        self.latency_us = f.latency_us;
        self.verified = f.received;
        self.errors = f.errors;
        self.mismatches = f.out_of_order;
        self.lost = f.lost;
        self.fanout = Some(f);
        self.set_cpu(cpu);
    }

    /// Copies a traffic run's tally and CPU deltas in.
    fn fill(&mut self, t: &Tally, timing: Timing, cpu: CpuUse) {
        let window = (timing.end - timing.start).as_secs_f64();
        self.window_secs = window;
        self.rps = t.completed as f64 / window;
        self.latency_us = drive::latency_us(&t.hist);
        self.sent = t.sent;
        self.verified = t.verified;
        self.errors = t.errors;
        self.mismatches = t.mismatches;
        self.lost = t.lost;
        self.set_cpu(cpu);
    }

    fn set_cpu(&mut self, cpu: CpuUse) {
        [
            self.server_cpu_s,
            self.daemon_cpu_s,
            self.loadgen_cpu_s,
            self.other_cpu_s,
        ] = cpu.secs();
        let activity = cpu.server_activity();
        self.server_kernel_s = activity.map(|a| a.kernel.as_secs_f64());
        self.server_switches = activity.map(|a| a.switches);
    }
}
