//! Every metric switchyard exports, on an explicit registry.
//!
//! Labels come only from closed sets (dialect, kind, outcome, reason, side)
//! and config names (listener, upstream): never ids, client method names or
//! addresses. `dashboards/` may reference only names declared here.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Request latency buckets, seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// The collectors, registered on one registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// Client connections currently open, by listener.
    pub connections_open: IntGaugeVec,
    /// Client connections accepted, by listener.
    pub connections_accepted: IntCounterVec,
    /// Requests settled, by listener, upstream and outcome.
    pub requests: IntCounterVec,
    /// Client-observed request duration, by listener and upstream.
    pub request_duration: HistogramVec,
    /// Replies whose id was not pending, by dialect, side and kind
    /// (`unknown`, `duplicate`, `stale`, `no_id`).
    pub unmatched_responses: IntCounterVec,
    /// Malformed input, answered or fatal, by dialect, side and reason.
    pub protocol_errors: IntCounterVec,
    /// Messages dropped, by dialect, side and reason.
    pub dropped_messages: IntCounterVec,
    /// Tolerated deviations of real peers, by dialect and quirk.
    pub peer_quirks: IntCounterVec,
    /// WebSocket closes, by dialect, side and code.
    pub ws_closes: IntCounterVec,
    /// Pending gateway ids, by upstream.
    pub correlator_entries: IntGaugeVec,
    /// Upstream connections currently up, by upstream.
    pub upstream_connections: IntGaugeVec,
    /// Upstream connections established after the first, by upstream.
    pub upstream_reconnects: IntCounterVec,
}

// === impl Metrics ===

impl Metrics {
    /// Creates every collector on a fresh registry.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
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
            requests: counter(
                &registry,
                "requests_total",
                "Requests settled",
                &["listener", "upstream", "outcome"],
            )?,
            request_duration: {
                let opts = HistogramOpts::new(
                    "switchyard_request_duration_seconds",
                    "Client-observed request duration",
                )
                .buckets(LATENCY_BUCKETS.to_vec());
                let h = HistogramVec::new(opts, &["listener", "upstream"])?;
                registry.register(Box::new(h.clone()))?;
                h
            },
            unmatched_responses: counter(
                &registry,
                "unmatched_responses_total",
                "Replies whose id was not pending",
                &["dialect", "side", "kind"],
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
            correlator_entries: gauge(
                &registry,
                "correlator_entries",
                "Pending gateway ids",
                &["upstream"],
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
            registry,
        };
        Ok(m)
    }

    /// The registry to expose on the admin listener.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The current value of a counter family member, for tests and the
    /// status page.
    pub fn counter_value(vec: &IntCounterVec, labels: &[&str]) -> u64 {
        vec.get_metric_with_label_values(labels)
            .map_or(0, |c| c.get())
    }
}

fn counter(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    let c = IntCounterVec::new(Opts::new(format!("switchyard_{name}"), help), labels)?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, prometheus::Error> {
    let g = IntGaugeVec::new(Opts::new(format!("switchyard_{name}"), help), labels)?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}
