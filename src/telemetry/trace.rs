//! Trace export: the data path's `tracing` spans, sent to an OpenTelemetry
//! collector over OTLP (HTTP/protobuf). Off by default (`[tracing] enabled`).
//!
//! The data path does not know about OpenTelemetry: it creates plain
//! `tracing` spans that follow the RPC semantic conventions (`rpc.server`
//! per client request in `router`, `rpc.client` per upstream call in
//! `upstream`, `rpc.batch` around a batch's items in `transport::session`),
//! and [`layer`] turns them into OpenTelemetry spans. Only spans of this
//! crate at `INFO` and above are exported (and `WARN`/`ERROR` events inside
//! them, as span events); the `log.level` filter applies to logs only.
//!
//! # Parenting
//!
//! [`connection_span`] is the span a WebSocket connection runs in, and so the
//! parent of every request and batch span of that connection. Two shapes:
//!
//! - The upgrade request carried a valid W3C `traceparent` (and maybe a
//!   `tracestate`): the connection span is **exported** as
//!   `switchyard.connection` (kind `SERVER`) with the caller's span as its
//!   OpenTelemetry parent, so the whole connection — every `rpc.server` and
//!   `rpc.batch` span below it — joins the caller's trace:
//!   caller span → `switchyard.connection` → `rpc.server` → `rpc.client`.
//!   The connection span ends, and is exported, when the connection closes;
//!   its children are exported as they end and refer to it meanwhile.
//! - No (or an invalid) `traceparent`: the connection span is **local**: logs
//!   see it, the exporter does not (its target is [`LOCAL_TARGET`]), so each
//!   request or batch starts its own trace. A long-lived connection thus
//!   never becomes one enormous trace.
//!
//! # What it must not do
//!
//! Slow down or break traffic. Ended spans go into a bounded queue
//! ([`MAX_QUEUE`]) that a background thread drains in batches; when the
//! queue is full new spans are dropped, never waited for, and an export that
//! fails or hangs costs only that thread its [`EXPORT_TIMEOUT`].

use std::time::Duration;

use axum::http::HeaderMap;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, Sampler};
use opentelemetry_sdk::Resource;
use tracing::{Level, Metadata};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::{Layer, Registry};

pub use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::config::{OtlpProtocol, TracingConfig};

/// Target of the connection span when it has no remote parent: seen by the
/// logs, never exported.
pub const LOCAL_TARGET: &str = "switchyard::connection";

/// The target of the per-request spans (`rpc.server`, `rpc.client`,
/// `rpc.batch`). They are `DEBUG` spans, which the exporter always sees:
/// with export off and logs at `info` they are never created, so a request
/// costs no span at all.
pub const RPC_TARGET: &str = "switchyard::rpc";

/// Ended spans waiting for export. Past it new spans are dropped: memory
/// stays bounded and requests never wait on the collector.
pub const MAX_QUEUE: usize = 2048;

/// Spans sent in one export request.
const MAX_BATCH: usize = 512;

/// How often queued spans are sent (the SDK's default).
const EXPORT_DELAY: Duration = Duration::from_secs(5);

/// Time one export request may take before it is abandoned (a hung
/// collector holds only the exporter thread, for this long).
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Name of the instrumentation scope of every exported span.
const SCOPE: &str = "switchyard";

/// Why trace export could not be set up or could not send spans.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The OTLP exporter could not be built (its HTTP client or endpoint).
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// Sending spans failed or timed out (a flush or the final shutdown).
    #[error("exporting spans failed: {0}")]
    Export(String),
}

/// The W3C header that names a request's parent span.
const TRACEPARENT: &str = "traceparent";

/// Reads W3C trace context headers from an HTTP request.
struct HeaderCarrier<'a>(&'a HeaderMap);

/// Builds the tracer provider: OTLP exporter behind a batch processor with
/// a bounded queue, a parent-based ratio sampler and the service resource.
///
/// # Errors
///
/// [`TraceError::Exporter`] when the exporter cannot be built.
pub fn provider(cfg: &TracingConfig) -> Result<SdkTracerProvider, TraceError> {
    let protocol = match cfg.protocol {
        OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
    };
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .with_endpoint(cfg.endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()?;
    // `OTEL_BSP_*` environment variables still override these.
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(MAX_QUEUE)
        .with_max_export_batch_size(MAX_BATCH)
        .with_scheduled_delay(EXPORT_DELAY)
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch)
        .build();
    // A caller's sampling decision (the traceparent flags) wins; the ratio
    // applies to traces that start here.
    // The ratio is read per trace: a reload changes it.
    super::live::set_sampling_ratio(cfg.sampling_ratio);
    let sampler = Sampler::ParentBased(Box::new(super::live::LiveRatio));
    let resource = Resource::builder()
        .with_service_name(cfg.service_name.clone())
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler)
        .with_resource(resource)
        .build())
}

/// The `tracing` layer that exports this crate's spans through `provider`.
pub fn layer(provider: &SdkTracerProvider) -> impl Layer<Registry> + Send + Sync {
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(SCOPE))
        .with_threads(false)
        .with_filter(filter_fn(exported))
}

/// The W3C `traceparent` of `span`, to send to an upstream (`None`
/// when the span belongs to no trace, e.g. tracing is off).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let mut fields = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut fields);
    fields.remove("traceparent")
}

/// The span a WebSocket connection runs in (see the module docs): exported
/// under the caller's span when `headers` carry a valid `traceparent`,
/// local to the logs otherwise.
pub fn connection_span(
    headers: &HeaderMap,
    listener: &str,
    dialect: &'static str,
) -> tracing::Span {
    // Without a `traceparent` there is nothing to extract: the common case
    // (every POST of a `jsonrpc-http` client) skips the propagator.
    let parent = headers
        .contains_key(TRACEPARENT)
        .then(|| TraceContextPropagator::new().extract(&HeaderCarrier(headers)));
    let Some(parent) = parent.filter(|p| p.span().span_context().is_valid()) else {
        return tracing::info_span!(
            target: LOCAL_TARGET,
            "switchyard.connection",
            switchyard.listener = %listener,
            switchyard.dialect = dialect,
            switchyard.client = tracing::field::Empty,
        );
    };
    let span = tracing::info_span!(
        "switchyard.connection",
        otel.kind = "server",
        network.protocol.name = "websocket",
        switchyard.listener = %listener,
        switchyard.dialect = dialect,
        // The named client its token names (`""`: the unnamed client).
        switchyard.client = tracing::field::Empty,
    );
    // Fails only when no OpenTelemetry layer is installed (export is off),
    // and then there is nothing to parent.
    let _ = span.set_parent(parent);
    span
}

/// Whether the exporter sees a span or event: this crate's spans at `INFO`
/// and above (the local connection span aside), its per-request spans
/// ([`RPC_TARGET`], `DEBUG`) and its warnings and errors.
fn exported(meta: &Metadata<'_>) -> bool {
    let target = meta.target();
    let ours =
        (target == "switchyard" || target.starts_with("switchyard::")) && target != LOCAL_TARGET;
    let level = match (meta.is_span(), target == RPC_TARGET) {
        (true, true) => Level::DEBUG,
        (true, false) => Level::INFO,
        (false, _) => Level::WARN,
    };
    ours && *meta.level() <= level
}

// === impl HeaderCarrier ===

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::util::SubscriberInitExt;

    use super::*;

    fn headers(traceparent: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert("traceparent", traceparent.parse().expect("ascii header"));
        map
    }

    #[test]
    fn connection_span_is_local_without_a_valid_traceparent() {
        let _guard = tracing_subscriber::fmt().set_default();
        for value in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-0000000000000000-01",
        ] {
            let span = connection_span(&headers(value), "public", "jsonrpc");
            let meta = span.metadata().expect("enabled span");
            assert_eq!(meta.target(), LOCAL_TARGET, "{value:?}");
        }
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let span = connection_span(&headers(valid), "public", "jsonrpc");
        let meta = span.metadata().expect("enabled span");
        assert_ne!(meta.target(), LOCAL_TARGET);
    }

    #[test]
    fn an_upstream_call_carries_the_callers_trace() {
        use tracing_subscriber::layer::SubscriberExt;
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry().with(layer(&provider));
        tracing::subscriber::with_default(subscriber, || {
            let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let conn = connection_span(&headers(caller), "public", "jsonrpc");
            let call = tracing::info_span!(parent: &conn, "rpc.client");
            let sent = traceparent(&call).expect("a traced call has a traceparent");
            assert!(
                sent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
                "{sent}"
            );
            assert!(
                !sent.contains("00f067aa0ba902b7"),
                "its own span id: {sent}"
            );
        });
        assert_eq!(traceparent(&tracing::Span::none()), None);
    }

    #[test]
    fn only_this_crates_spans_are_exported() {
        let _guard = tracing_subscriber::fmt().set_default();
        let span = tracing::info_span!("rpc.server");
        assert!(exported(span.metadata().expect("enabled span")));
        let debug = tracing::debug_span!("detail");
        assert!(debug.metadata().is_none_or(|m| !exported(m)));
        let local = tracing::info_span!(target: LOCAL_TARGET, "switchyard.connection");
        assert!(!exported(local.metadata().expect("enabled span")));
        let other = tracing::info_span!(target: "hyper::client", "request");
        assert!(!exported(other.metadata().expect("enabled span")));
    }
}
