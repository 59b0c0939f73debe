//! Process upstream metrics (`command` upstreams): processes started,
//! exited by [`ExitReason`], and alive, per upstream.

use prometheus::{IntCounterVec, IntGaugeVec, Registry};

use super::{counter, gauge};

/// How an upstream process ended (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReason {
    /// It exited on its own with status 0.
    Exited,
    /// It exited on its own with a non-zero status.
    Failed,
    /// A signal switchyard did not send ended it (a crash, an OOM kill).
    Crashed,
    /// switchyard stopped it (its client left, a reload, shutdown, a
    /// protocol violation) and it exited within `stop_grace_ms`.
    Stopped,
    /// switchyard stopped it and it needed SIGKILL after `stop_grace_ms`.
    Killed,
}

/// The process families.
#[derive(Debug, Clone)]
pub struct ProcessMetrics {
    /// Processes started, by upstream.
    pub started: IntCounterVec,
    /// Processes that ended (and were reaped), by upstream and reason.
    pub exits: IntCounterVec,
    /// Processes alive now (started, not yet reaped), by upstream.
    pub alive: IntGaugeVec,
}

// === impl ExitReason ===

impl ExitReason {
    /// Every reason, for the series that exist from the start.
    pub const ALL: [ExitReason; 5] = [
        ExitReason::Exited,
        ExitReason::Failed,
        ExitReason::Crashed,
        ExitReason::Stopped,
        ExitReason::Killed,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitReason::Exited => "exited",
            ExitReason::Failed => "failed",
            ExitReason::Crashed => "crashed",
            ExitReason::Stopped => "stopped",
            ExitReason::Killed => "killed",
        }
    }
}

// === impl ProcessMetrics ===

impl ProcessMetrics {
    pub(super) fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(ProcessMetrics {
            started: counter(
                registry,
                "upstream_processes_started_total",
                "Upstream processes started (command upstreams)",
                &["upstream"],
            )?,
            exits: counter(
                registry,
                "upstream_process_exits_total",
                "Upstream processes that ended, by reason",
                &["upstream", "reason"],
            )?,
            alive: gauge(
                registry,
                "upstream_processes",
                "Upstream processes alive now (started, not yet reaped)",
                &["upstream"],
            )?,
        })
    }

    /// Touches the series of a process upstream, so they read 0 from the
    /// first scrape.
    pub fn init_upstream(&self, name: &str) {
        self.started.with_label_values(&[name]);
        self.alive.with_label_values(&[name]);
        for reason in ExitReason::ALL {
            self.exits.with_label_values(&[name, reason.as_str()]);
        }
    }
}
