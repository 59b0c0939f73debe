//! Logs, traces and metrics.
//!
//! Per-request events an operator must see (requests answered
//! `unavailable`, refused upgrades, requests and connections switchyard
//! refuses or closes) go through a [`crate::throttle::Throttle`].
//!
//! [`init`] installs the process-wide `tracing` subscriber once: logs on
//! stderr (text or JSON lines, filtered by `log.level`) and, when
//! `[tracing] enabled`, the OpenTelemetry exporter of [`trace`]. It returns a
//! [`Telemetry`] guard that `main` keeps until exit and shuts down last, so
//! queued spans are flushed. [`metrics::Metrics`] holds every Prometheus
//! collector on an explicit registry that the composition root creates and
//! passes down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::config::{LogConfig, LogFormat, TracingConfig};

pub mod live;
pub mod metrics;
pub mod trace;

pub use trace::TraceError;

/// Whether request ids are recorded on spans (off by default: ids are
/// client data).
static RECORD_IDS: AtomicBool = AtomicBool::new(false);

/// How long the exit waits for the last spans to be sent: a collector that
/// is down must not hold up a restart for long.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// A client's address in a log line: its IP, or `unix` for a client of a
/// Unix-socket listener (which has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub Option<std::net::IpAddr>);

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(ip) => ip.fmt(f),
            None => f.write_str("unix"),
        }
    }
}

/// One layer of the process-wide subscriber.
type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// What [`init`] installed. Keep it alive until exit, then
/// [`shutdown`](Telemetry::shutdown) it: the subscriber lives on regardless,
/// but the spans still queued at exit are sent only by the shutdown.
#[derive(Debug)]
#[must_use = "spans still queued at exit are sent only by `Telemetry::shutdown`"]
pub struct Telemetry {
    /// The tracer provider when spans are exported.
    provider: Option<trace::SdkTracerProvider>,
}

/// True when spans record request ids (`rpc.jsonrpc.request_id`).
pub fn record_ids() -> bool {
    RECORD_IDS.load(Ordering::Relaxed)
}

/// Turns recording of request ids on spans on or off.
pub fn set_record_ids(on: bool) {
    RECORD_IDS.store(on, Ordering::Relaxed);
}

/// Installs the global tracing subscriber with logs only (text or JSON lines
/// on stderr). A second call is a no-op, so tests may call it freely.
pub fn init_logging(cfg: &LogConfig) {
    // Nothing is exported, so there is nothing to flush later.
    drop(install(cfg, None));
}

/// Installs the global tracing subscriber: logs per `log`, plus span export
/// when `tracing.enabled`, and applies `tracing.record_ids`.
///
/// Only the first call in a process installs anything; a later call (or a
/// subscriber installed by someone else) leaves the existing one in place
/// and exports nothing. Export problems are logged, never fatal: the
/// gateway serves without traces rather than not at all.
pub fn init(log: &LogConfig, tracing: &TracingConfig) -> Telemetry {
    set_record_ids(tracing.record_ids);
    install(log, tracing.enabled.then_some(tracing))
}

/// Installs logs, plus the exporter of `tracing` if given.
fn install(log: &LogConfig, tracing: Option<&TracingConfig>) -> Telemetry {
    let mut layers = vec![log_layer(log)];
    let (provider, problem) = match tracing.map(trace::provider) {
        None => (None, None),
        Some(Ok(provider)) => {
            layers.push(Box::new(trace::layer(&provider)));
            (Some(provider), None)
        }
        Some(Err(e)) => (None, Some(e)),
    };
    // try_init fails only when a subscriber is already installed: keep it.
    let installed = tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .is_ok();
    if let Some(e) = problem {
        tracing::warn!(error = %e, "trace export is off");
    }
    let provider = provider.filter(|_| {
        if !installed {
            tracing::warn!("a tracing subscriber was already installed; trace export is off");
        }
        installed
    });
    if let (Some(_), Some(cfg)) = (&provider, tracing) {
        tracing::info!(endpoint = %cfg.endpoint, "exporting traces over OTLP");
    }
    Telemetry { provider }
}

/// Log lines on stderr, filtered by `log.level` (which does not limit what
/// the exporter sees).
fn log_layer(cfg: &LogConfig) -> BoxedLayer {
    let filter = EnvFilter::try_new(&cfg.level).unwrap_or_else(|_| EnvFilter::new("info"));
    // Reloadable: a configuration reload changes `log.level` in place.
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    live::keep_filter(handle);
    // Colour only for a person at a terminal: escape codes in a file or a
    // log collector are noise.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match cfg.format {
        LogFormat::Text => Box::new(fmt.with_filter(filter)),
        // Fields at the top level of each object, beside `message`: the
        // shape log shippers expect (not nested under `fields`).
        LogFormat::Json => Box::new(fmt.json().flatten_event(true).with_filter(filter)),
    }
}

// === impl Telemetry ===

impl Telemetry {
    /// True when spans are being exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends every queued span now and waits for the collector's answer
    /// (bounded by the exporter's timeout). Runs on the blocking pool: the
    /// exporter's HTTP client blocks.
    ///
    /// # Errors
    ///
    /// [`TraceError::Export`] when the export failed or timed out.
    pub async fn flush(&self) -> Result<(), TraceError> {
        let Some(provider) = self.provider.clone() else {
            return Ok(());
        };
        run_blocking(move || provider.force_flush()).await
    }

    /// Flushes the queue and stops the exporter, waiting at most a few
    /// seconds; call once, at exit.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        let stop = move || provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        if let Err(e) = run_blocking(stop).await {
            tracing::warn!(error = %e, "could not send the last spans");
        }
    }
}

/// Runs a blocking provider call off the async workers.
async fn run_blocking<E: std::fmt::Display>(
    call: impl FnOnce() -> Result<(), E> + Send + 'static,
) -> Result<(), TraceError> {
    let done = tokio::task::spawn_blocking(move || call().map_err(|e| e.to_string())).await;
    match done {
        Ok(result) => result.map_err(TraceError::Export),
        Err(e) => Err(TraceError::Export(format!("the export task failed: {e}"))),
    }
}
