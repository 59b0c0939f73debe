//! The telemetry settings a configuration reload changes in place: the
//! log filter (`log.level`) and the share of new traces exported
//! (`tracing.sampling_ratio`). Log format and trace export itself (on/off,
//! endpoint, service name) are set up once, at start.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use opentelemetry::trace::{Link, SpanKind, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SamplingResult, ShouldSample};
use tracing_subscriber::{reload, EnvFilter, Registry};

/// The installed log filter's handle (set once, by the first `init`).
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// `tracing.sampling_ratio` now, as `f64` bits (1.0 until set).
static RATIO: AtomicU64 = AtomicU64::new(0x3FF0_0000_0000_0000);

/// Keeps the handle of the log filter just installed.
pub(super) fn keep_filter(handle: reload::Handle<EnvFilter, Registry>) {
    // Only the first subscriber is installed; a later handle is moot.
    let _ = FILTER.set(handle);
}

/// Applies a new `log.level` (validated already). Does nothing when this
/// process's subscriber was not installed by [`super::init`].
pub fn set_log_level(level: &str) {
    let Some(handle) = FILTER.get() else {
        return;
    };
    match EnvFilter::try_new(level) {
        Ok(filter) => {
            if let Err(e) = handle.reload(filter) {
                tracing::warn!(error = %e, "log level not changed");
            }
        }
        Err(e) => tracing::warn!(error = %e, level, "log level not changed"),
    }
}

/// Applies a new `tracing.sampling_ratio`.
pub fn set_sampling_ratio(ratio: f64) {
    RATIO.store(ratio.to_bits(), Ordering::Relaxed);
}

/// The ratio sampler for new traces, reading the current ratio per trace.
#[derive(Debug, Clone)]
pub(super) struct LiveRatio;

impl ShouldSample for LiveRatio {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let ratio = f64::from_bits(RATIO.load(Ordering::Relaxed));
        Sampler::TraceIdRatioBased(ratio).should_sample(
            parent_context,
            trace_id,
            name,
            span_kind,
            attributes,
            links,
        )
    }
}
