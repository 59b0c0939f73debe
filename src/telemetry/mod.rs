//! Logs and metrics.
//!
//! [`init_logging`] installs the tracing subscriber once per process;
//! [`metrics::Metrics`] holds every Prometheus collector on an explicit
//! registry that the composition root creates and passes down.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::{LogConfig, LogFormat};

/// Whether request ids are recorded on spans (off by default: ids are
/// client data).
static RECORD_IDS: AtomicBool = AtomicBool::new(false);

/// True when spans record request ids (`rpc.jsonrpc.request_id`).
pub fn record_ids() -> bool {
    RECORD_IDS.load(Ordering::Relaxed)
}

/// Turns recording of request ids on spans on or off.
pub fn set_record_ids(on: bool) {
    RECORD_IDS.store(on, Ordering::Relaxed);
}

pub mod metrics;

/// Installs the global tracing subscriber (text or JSON lines on stderr).
/// A second call is a no-op, so tests may call it freely.
pub fn init_logging(cfg: &LogConfig) {
    let filter = tracing_subscriber::EnvFilter::try_new(&cfg.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // try_init fails only when a subscriber is already installed: keep it.
    let _ = match cfg.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
