//! A run's measurement window (warm-up, then the measured window) and the
//! CPU time the processes involved and the machine used over it: shared by
//! every kind of run ([`super::measure`], [`super::fanout`],
//! [`super::persist`]).

use std::time::Duration;

use tokio::time::Instant;

use super::drive::Timing;
use super::procs;

/// How long readers wait for outstanding replies after a run's window.
const GRACE: Duration = Duration::from_secs(3);

/// CPU time of the processes involved and of the whole machine, at one
/// instant.
#[derive(Debug, Clone, Copy)]
struct CpuSnap {
    server: Option<Duration>,
    server_activity: Option<procs::Activity>,
    daemon: Option<Duration>,
    loadgen: Option<Duration>,
    machine: Option<Duration>,
}

/// CPU used during a run's window.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuUse {
    server: Option<Duration>,
    daemon: Option<Duration>,
    loadgen: Option<Duration>,
    /// Everything else on the machine (other processes, the kernel's
    /// unattributed work): noise when it is large.
    other: Option<Duration>,
    /// The server's kernel time and context switches.
    server_activity: Option<procs::Activity>,
}

/// Warm-up of a fifth of the duration (at most 1 s), then the window.
pub(crate) fn timing(duration: Duration) -> Timing {
    let begin = Instant::now();
    let start = begin + (duration / 5).min(Duration::from_secs(1));
    Timing {
        begin,
        start,
        end: start + duration,
        grace: GRACE,
    }
}

/// CPU used by the server, the daemon, loadgen and everything else
/// between start and end.
pub(crate) async fn sample_cpu(pids: [Option<u32>; 2], timing: Timing) -> CpuUse {
    let snap = || CpuSnap {
        server: pids[0].and_then(procs::cpu_time),
        server_activity: pids[0].and_then(procs::activity),
        daemon: pids[1].and_then(procs::cpu_time),
        loadgen: procs::cpu_time(std::process::id()),
        machine: procs::machine_busy(),
    };
    tokio::time::sleep_until(timing.start).await;
    let a = snap();
    tokio::time::sleep_until(timing.end).await;
    let b = snap();
    let delta = |x: Option<Duration>, y: Option<Duration>| Some(y?.saturating_sub(x?));
    let (server, daemon) = (delta(a.server, b.server), delta(a.daemon, b.daemon));
    let loadgen = delta(a.loadgen, b.loadgen);
    let ours = [server, daemon, loadgen]
        .into_iter()
        .flatten()
        .sum::<Duration>();
    let server_activity = a
        .server_activity
        .zip(b.server_activity)
        .map(|(a, b)| procs::Activity {
            kernel: b.kernel.saturating_sub(a.kernel),
            switches: b.switches.saturating_sub(a.switches),
        });
    CpuUse {
        server,
        daemon,
        loadgen,
        other: delta(a.machine, b.machine).map(|m| m.saturating_sub(ours)),
        server_activity,
    }
}

/// CPU used by each of `pids` between the window's start and end.
pub(crate) async fn sample_cpu_of(pids: Vec<Option<u32>>, timing: Timing) -> Vec<Option<Duration>> {
    let snap =
        || -> Vec<Option<Duration>> { pids.iter().map(|p| p.and_then(procs::cpu_time)).collect() };
    tokio::time::sleep_until(timing.start).await;
    let a = snap();
    tokio::time::sleep_until(timing.end).await;
    let b = snap();
    a.into_iter()
        .zip(b)
        .map(|(x, y)| Some(y?.saturating_sub(x?)))
        .collect()
}

// === impl CpuUse ===

impl CpuUse {
    /// The CPU seconds of the server, the daemon, loadgen and everything
    /// else, in that order.
    pub(crate) fn secs(&self) -> [Option<f64>; 4] {
        [self.server, self.daemon, self.loadgen, self.other].map(|d| d.map(|d| d.as_secs_f64()))
    }

    /// The server's kernel time and context switches in the window.
    pub(crate) fn server_activity(&self) -> Option<procs::Activity> {
        self.server_activity
    }

    /// The server's CPU seconds.
    pub(crate) fn server_secs(&self) -> Option<f64> {
        self.server.map(|d| d.as_secs_f64())
    }

    /// Takes `ours` (processes measured apart: further instances, the
    /// backbone) out of everything else.
    pub(crate) fn exclude_from_other(&mut self, ours: Duration) {
        self.other = self.other.map(|o| o.saturating_sub(ours));
    }
}
