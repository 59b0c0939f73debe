//! Creating and registering every family of [`Metrics`]: names, help
//! texts, label names and buckets. The families are documented on the
//! fields of [`Metrics`], except the two that never change after start:
//! `switchyard_build_info` and the standard `process_*` families.

use prometheus::{
    HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use super::{cache, sharded};
use super::{BackboneMetrics, EventMetrics, Metrics, PersistMetrics, ProcessMetrics};

/// Request latency buckets, seconds.
pub(super) const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Message size buckets, bytes: 64 B to 16 MiB in powers of four.
const SIZE_BUCKETS: &[f64] = &[
    64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
];

/// Batch size buckets, items.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

// === impl Metrics ===

impl Metrics {
    /// Creates every collector on a fresh registry.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        build_info(&registry)?;
        process(&registry)?;
        let m = Metrics {
            connections_open: gauge(
                &registry,
                "connections_open",
                "Client connections open",
                &["listener"],
            )?,
            connections_accepted: counter(
                &registry,
                "connections_accepted_total",
                "Client connections accepted",
                &["listener"],
            )?,
            client_connections_open: gauge(
                &registry,
                "client_connections_open",
                "Client connections open, by named client",
                &["listener", "client"],
            )?,
            requests: register_sharded(
                &registry,
                sharded::CounterVec::new(
                    "switchyard_requests_total",
                    "Requests settled",
                    ["listener", "upstream", "outcome"],
                ),
            )?,
            request_duration: register_sharded(
                &registry,
                sharded::HistogramVec::new(
                    (
                        "switchyard_request_duration_seconds",
                        "Client-observed request duration",
                    ),
                    sharded::Unit::Seconds,
                    LATENCY_BUCKETS,
                    ["listener", "upstream"],
                ),
            )?,
            unmatched_responses: counter(
                &registry,
                "unmatched_responses_total",
                "Replies whose id was not pending",
                &["dialect", "side", "kind"],
            )?,
            errors: counter(
                &registry,
                "errors_total",
                "Errors switchyard answered requests with, by the side that caused them",
                &["listener", "side", "kind"],
            )?,
            protocol_errors: counter(
                &registry,
                "protocol_errors_total",
                "Malformed input, answered and fatal",
                &["dialect", "side", "reason"],
            )?,
            dropped_messages: counter(
                &registry,
                "dropped_messages_total",
                "Messages dropped",
                &["dialect", "side", "reason"],
            )?,
            peer_quirks: counter(
                &registry,
                "peer_quirks_total",
                "Tolerated deviations of real peers",
                &["dialect", "quirk"],
            )?,
            ws_closes: counter(
                &registry,
                "ws_closes_total",
                "WebSocket closes",
                &["dialect", "side", "code"],
            )?,
            correlator_entries: register_sharded(
                &registry,
                sharded::GaugeVec::new(
                    "switchyard_correlator_entries",
                    "Pending gateway ids",
                    ["upstream"],
                ),
            )?,
            upstream_connections: gauge(
                &registry,
                "upstream_connections",
                "Upstream connections up",
                &["upstream"],
            )?,
            upstream_reconnects: counter(
                &registry,
                "upstream_reconnects_total",
                "Upstream reconnections",
                &["upstream"],
            )?,
            messages: register_sharded(
                &registry,
                sharded::CounterVec::new(
                    "switchyard_messages_total",
                    "Messages read and written",
                    ["dialect", "side", "direction", "kind"],
                ),
            )?,
            bytes: register_sharded(
                &registry,
                sharded::CounterVec::new(
                    "switchyard_bytes_total",
                    "Bytes of frames and lines read and written",
                    ["dialect", "side", "direction"],
                ),
            )?,
            message_size: register_sharded(
                &registry,
                sharded::HistogramVec::new(
                    ("switchyard_message_size_bytes", "Size of frames and lines"),
                    sharded::Unit::Bytes,
                    SIZE_BUCKETS,
                    ["dialect", "side", "direction"],
                ),
            )?,
            connections_rejected: counter(
                &registry,
                "connections_rejected_total",
                "Client connections refused",
                &["listener", "reason"],
            )?,
            limit_rejections: counter(
                &registry,
                "limit_rejections_total",
                "Messages, requests and connections refused by a configured limit",
                &["listener", "limit"],
            )?,
            batch_size: histogram(
                &registry,
                ("batch_size", "Items per client batch"),
                BATCH_BUCKETS,
                &["listener"],
            )?,
            outbox_high_water: gauge(
                &registry,
                "outbox_high_water",
                "Most messages ever queued in one client outbox",
                &["listener"],
            )?,
            outbox_queued_bytes_max: gauge(
                &registry,
                "outbox_queued_bytes_max",
                "Most bytes ever queued in one client outbox",
                &["listener"],
            )?,
            events: EventMetrics::new(&registry)?,
            persist: PersistMetrics::new(&registry)?,
            backbone: BackboneMetrics::new(&registry)?,
            processes: ProcessMetrics::new(&registry)?,
            upstream_in_flight: register_sharded(
                &registry,
                sharded::GaugeVec::new(
                    "switchyard_upstream_in_flight",
                    "Calls in flight on the upstream",
                    ["upstream"],
                ),
            )?,
            upstream_request_duration: register_sharded(
                &registry,
                sharded::HistogramVec::new(
                    (
                        "switchyard_upstream_request_duration_seconds",
                        "Upstream-only call duration, written to reply read",
                    ),
                    sharded::Unit::Seconds,
                    LATENCY_BUCKETS,
                    ["upstream"],
                ),
            )?,
            upstream_info: gauge(
                &registry,
                "upstream_info",
                "Configured upstreams (always 1)",
                &["upstream", "dialect", "mode", "required"],
            )?,
            ready: {
                let g = IntGauge::new("switchyard_ready", "1 while the readiness check passes")?;
                registry.register(Box::new(g.clone()))?;
                g
            },
            config_reloads: {
                let c = counter(
                    &registry,
                    "config_reloads_total",
                    "Configuration reloads",
                    &["result"],
                )?;
                for result in ["ok", "rejected"] {
                    c.with_label_values(&[result]);
                }
                c
            },
            config_generation: {
                let help = "Configuration generation serving now (1 at start, +1 per reload)";
                let g = IntGauge::new("switchyard_config_generation", help)?;
                registry.register(Box::new(g.clone()))?;
                g.set(1);
                g
            },
            registry,
            traffic: std::sync::Arc::new(cache::Traffic::new()),
        };
        Ok(m)
    }
}

/// `switchyard_build_info{version, target} 1`: which build runs, for
/// joins (`* on (job, instance) group_left (version)`) and for alert rules
/// that select switchyard's scrape targets without naming their job.
fn build_info(registry: &Registry) -> Result<(), prometheus::Error> {
    let target = format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS);
    let g = gauge(
        registry,
        "build_info",
        "Always 1; labels describe the running build",
        &["version", "target"],
    )?;
    g.with_label_values(&[env!("CARGO_PKG_VERSION"), target.as_str()])
        .set(1);
    Ok(())
}

/// The standard `process_*` families (CPU seconds, resident and virtual
/// memory, open and maximum file descriptors, threads, start time) of this
/// process, read from `/proc` on every scrape. Linux only: elsewhere there
/// are none.
fn process(registry: &Registry) -> Result<(), prometheus::Error> {
    #[cfg(target_os = "linux")]
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    #[cfg(not(target_os = "linux"))]
    let _ = registry;
    Ok(())
}

/// Registers a sharded family (see [`sharded`]): the
/// families every request touches.
fn register_sharded<F>(
    registry: &Registry,
    family: Result<F, prometheus::Error>,
) -> Result<F, prometheus::Error>
where
    F: prometheus::core::Collector + Clone + 'static,
{
    let family = family?;
    registry.register(Box::new(family.clone()))?;
    Ok(family)
}

pub(super) fn counter(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    let c = IntCounterVec::new(Opts::new(format!("switchyard_{name}"), help), labels)?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

pub(super) fn histogram(
    registry: &Registry,
    (name, help): (&str, &str),
    buckets: &[f64],
    labels: &[&str],
) -> Result<HistogramVec, prometheus::Error> {
    let opts = HistogramOpts::new(format!("switchyard_{name}"), help).buckets(buckets.to_vec());
    let h = HistogramVec::new(opts, labels)?;
    registry.register(Box::new(h.clone()))?;
    Ok(h)
}

pub(super) fn gauge(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, prometheus::Error> {
    let g = IntGaugeVec::new(Opts::new(format!("switchyard_{name}"), help), labels)?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}
