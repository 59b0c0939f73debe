//! The process cap of one `command` upstream and its process metrics:
//! what the upstream's shared settings hold, apart from the processes
//! themselves (`super`), which run links.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::UpstreamConfig;
use crate::telemetry::metrics::{ExitReason, Metrics};
use crate::upstream::error::LinkError;

/// The process cap of one upstream and its process metrics.
#[derive(Debug)]
pub(crate) struct Processes {
    /// `max_processes` permits; one is held by each process until reaped.
    permits: Arc<Semaphore>,
    /// The cap, for the error that says it was reached.
    max: usize,
    /// The upstream's name (metric label, log field).
    name: String,
    metrics: Metrics,
}

// === impl Processes ===

impl Processes {
    /// The cap and metrics of the upstream `cfg`.
    pub(crate) fn new(cfg: &UpstreamConfig, metrics: &Metrics) -> Self {
        let max = cfg.max_processes.get();
        Processes {
            permits: Arc::new(Semaphore::new(max)),
            max,
            name: cfg.name.clone(),
            metrics: metrics.clone(),
        }
    }

    /// Room for one more process: a permit held until it is reaped, or
    /// [`LinkError::ProcessCap`] at the cap (nothing is forked).
    pub(super) fn admit(&self) -> Result<OwnedSemaphorePermit, LinkError> {
        self.permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| LinkError::ProcessCap { max: self.max })
    }

    pub(super) fn started(&self) {
        let m = &self.metrics.processes;
        m.started.with_label_values(&[&self.name]).inc();
        m.alive.with_label_values(&[&self.name]).inc();
    }

    pub(super) fn ended(&self, reason: ExitReason) {
        let m = &self.metrics.processes;
        let labels = [self.name.as_str(), reason.as_str()];
        m.exits.with_label_values(&labels).inc();
        m.alive.with_label_values(&[&self.name]).dec();
    }
}
