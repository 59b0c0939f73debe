//! Every metric switchyard exports, on an explicit registry.
//!
//! Labels come only from closed sets (dialect, kind, outcome, reason, side)
//! and config names (listener, upstream): never ids, client method names or
//! addresses. `dashboards/` may reference only names declared here.
//!
//! Families with labels appear in the Prometheus text output only once a
//! label set has been touched, so [`Metrics::init_labels`] touches every
//! label set that is known from the configuration and the closed label sets
//! ([`Direction`], [`RejectReason`], [`Limit`])
//! when the gateway binds: dashboards and alerts then see zero-valued series
//! from the first scrape instead of "no data".
//!
//! Who increments what (the data path owns the calls; this file owns the
//! names):
//!
//! - transport (`transport::ws`, `transport::unix`) and upstream links
//!   (`upstream::ndjson`, `upstream::ws`): a frame or line read or written,
//!   through a [`FrameCounter`] resolved once per connection or upstream
//!   ([`Metrics::frame_counter`]); a client connection's writer
//!   counts in a [`FrameTally`], published whenever it runs out of frames
//!   to write (before it flushes them) and when it stops;
//!   [`Metrics::count_rejected_connection`] when an accept or upgrade is
//!   refused.
//! - sessions, client outboxes and upstream links: a decoded or encoded
//!   item, through a [`MessageCounter`] resolved once
//!   ([`Metrics::message_counter`]); [`Metrics::observe_batch`] per
//!   client batch;
//!   [`Metrics::count_limit`] whenever a configured limit refuses something;
//!   [`Metrics::count_error`] for every error answered (`Router::error_reply`).
//! - upstream admission (`upstream::admission::Slots`): `upstream_in_flight`
//!   while a call written to a link is unsettled, and
//!   `upstream_request_duration` when it settles, unless it timed out or
//!   was never written (refused before its request went out).
//! - the router (`Router::finish`, `Router::reply_for`): `requests` and
//!   `request_duration` per settled request; upstream links:
//!   `correlator_entries` per call written and settled.
//!
//! The families every request touches (`messages`, `bytes`,
//! `message_size`, `requests`, `request_duration`, `correlator_entries`,
//! `upstream_in_flight`, `upstream_request_duration`) are [`sharded`]: each
//! worker thread adds to cells of its own, and the registry folds them
//! into the usual families on every scrape, with the same names, help,
//! labels and buckets, and exact totals. The rest are plain `prometheus`
//! collectors; both kinds sit on the one registry.
//!
//! This file holds the struct and the counting calls; `register` creates
//! and registers every family (names, help, buckets), with the two that
//! are no field here (`switchyard_build_info` and the standard `process_*`
//! families, Linux only), `events` and
//! `persistent` the pub/sub and persistent-subscription families, `init`
//! the zero-valued label sets, `labels`/`reasons` the closed label sets,
//! `cache` the per-message handles resolved once, `sharded` the per-thread
//! counters, gauges and histograms.

use prometheus::{HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use crate::dialect::Dialect;
use crate::error::{GatewayError, Side};

mod backbone;
mod cache;
mod events;
mod init;
mod labels;
mod persistent;
mod processes;
mod reasons;
mod register;
pub mod sharded;

pub use backbone::BackboneMetrics;
pub use cache::{FrameCounter, FrameTally, MessageCounter};
pub use events::{EventDrop, EventMetrics};
pub use labels::{close_code, Direction, Limit, Quirk, RejectReason, RequestOutcome, Unmatched};
pub use persistent::PersistMetrics;
pub use processes::{ExitReason, ProcessMetrics};
pub use reasons::{DropReason, ProtocolError};

use register::{counter, gauge, histogram, LATENCY_BUCKETS};

/// The collectors, registered on one registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// Client connections currently open, by listener.
    pub connections_open: IntGaugeVec,
    /// Client connections accepted, by listener.
    pub connections_accepted: IntCounterVec,
    /// Client connections currently open, by listener and named client
    /// (`client` is a configured client's name: bounded by the
    /// configuration; the unnamed client has no series here).
    pub client_connections_open: IntGaugeVec,
    /// Requests settled, by listener, upstream and outcome.
    pub requests: sharded::CounterVec<3>,
    /// Client-observed request duration, by listener and upstream.
    pub request_duration: sharded::HistogramVec<2>,
    /// Replies whose id was not pending, by dialect, side and kind
    /// (`unknown`, `duplicate`, `stale`, `no_id`).
    pub unmatched_responses: IntCounterVec,
    /// Errors switchyard answered requests with, by listener, the side
    /// that caused them ([`GatewayError::side`]) and kind.
    pub errors: IntCounterVec,
    /// Malformed input, answered or fatal, by dialect, side and reason.
    pub protocol_errors: IntCounterVec,
    /// Messages dropped, by dialect, side and reason.
    pub dropped_messages: IntCounterVec,
    /// Tolerated deviations of real peers, by dialect and quirk.
    pub peer_quirks: IntCounterVec,
    /// WebSocket close frames received, by dialect, the side that sent
    /// them and code.
    pub ws_closes: IntCounterVec,
    /// Pending gateway ids, by upstream.
    pub correlator_entries: sharded::GaugeVec<1>,
    /// Upstream connections currently up, by upstream.
    pub upstream_connections: IntGaugeVec,
    /// Upstream connections established after the first, by upstream.
    pub upstream_reconnects: IntCounterVec,
    /// Messages (single items; a batch counts each item), by dialect, side,
    /// direction and kind. See [`Metrics::message_counter`].
    pub messages: sharded::CounterVec<4>,
    /// Bytes of frames or lines, by dialect, side and direction. See
    /// [`Metrics::frame_counter`].
    pub bytes: sharded::CounterVec<3>,
    /// Size of frames or lines, by dialect, side and direction.
    pub message_size: sharded::HistogramVec<3>,
    /// Client connections refused, by listener and [`RejectReason`].
    pub connections_rejected: IntCounterVec,
    /// Things a configured [`Limit`] refused, by listener and limit.
    pub limit_rejections: IntCounterVec,
    /// The most messages ever queued in one client outbox, by listener
    /// (bounded by `outbox_capacity`: shows memory stays bounded).
    pub outbox_high_water: IntGaugeVec,
    /// The most bytes ever queued (or waiting for room) in one client
    /// outbox, by listener: bounded by `max(outbox_max_bytes, F)` queued
    /// (`F` the largest frame) plus `max(outbox_max_bytes, F)` of replies
    /// waiting for room (see `outbox`).
    pub outbox_queued_bytes_max: IntGaugeVec,
    /// Pub/sub: subscriptions, events published, delivered, dropped.
    pub events: EventMetrics,
    /// Persistent subscriptions: stored, evicted unacknowledged,
    /// redelivered, acknowledged, write latency, attached.
    pub persist: PersistMetrics,
    /// The pub/sub backbone (NATS core): connection, subscriptions,
    /// events across it and lost.
    pub backbone: BackboneMetrics,
    /// Process upstreams: processes started, exited by reason, alive.
    pub processes: ProcessMetrics,
    /// Items per client batch, by listener.
    pub batch_size: HistogramVec,
    /// Calls written to an upstream and not yet settled, by upstream.
    pub upstream_in_flight: sharded::GaugeVec<1>,
    /// Upstream-only duration (written to the link → reply read), by
    /// upstream; `request_duration` minus this is switchyard's own time.
    pub upstream_request_duration: sharded::HistogramVec<1>,
    /// Always 1; labels describe each configured upstream (`upstream`,
    /// `dialect`, `mode`, `required`), for joins in alert rules.
    pub upstream_info: IntGaugeVec,
    /// 1 while the readiness check passes, 0 otherwise; refreshed by the
    /// admin listener on every `/readyz` and `/metrics` request.
    pub ready: IntGauge,
    /// Configuration reloads, by `result` (`ok`, `rejected`).
    pub config_reloads: IntCounterVec,
    /// The configuration generation serving now: 1 at start, +1 per
    /// applied reload.
    pub config_generation: IntGauge,
    /// Resolved handles of `messages`, `bytes` and `message_size`.
    traffic: std::sync::Arc<cache::Traffic>,
}

// === impl Metrics ===

impl Metrics {
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

    /// Counts a client connection refused by `listener`.
    pub fn count_rejected_connection(&self, listener: &str, reason: RejectReason) {
        let labels = [listener, reason.as_str()];
        self.connections_rejected.with_label_values(&labels).inc();
    }

    /// Counts a WebSocket close frame `side` sent, by its code.
    pub fn count_ws_close(&self, dialect: Dialect, side: Side, code: u16) {
        let labels = [dialect.as_str(), side.as_str(), close_code(code)];
        self.ws_closes.with_label_values(&labels).inc();
    }

    /// Counts an error `listener` answered a request with, on the side
    /// that caused it.
    pub fn count_error(&self, listener: &str, err: &GatewayError) {
        let labels = [listener, err.side.as_str(), err.kind.as_str()];
        self.errors.with_label_values(&labels).inc();
    }

    /// Counts something `limit` refused on `listener`.
    pub fn count_limit(&self, listener: &str, limit: Limit) {
        let labels = [listener, limit.as_str()];
        self.limit_rejections.with_label_values(&labels).inc();
    }

    /// Records a client batch of `items` on `listener`.
    pub fn observe_batch(&self, listener: &str, items: usize) {
        #[allow(clippy::cast_precision_loss)]
        let items = items as f64;
        self.batch_size
            .with_label_values(&[listener])
            .observe(items);
    }
}
