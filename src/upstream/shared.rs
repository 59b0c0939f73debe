//! What an upstream's links share: its settings, its metrics handle and
//! the counting helpers every link reports through, and, for a `command`
//! upstream, its process cap ([`Processes`]).

use std::sync::Arc;

use prometheus::IntCounter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::error::LinkError;
use super::tls::TlsSetupError;
use crate::config::UpstreamConfig;
use crate::dialect::link::Options;
use crate::dialect::Dialect;
use crate::dialect::UpstreamCodec;
use crate::envelope::{raw_from_string, Payload};
use crate::error::Side;
use crate::persist::recorder::{Backlog, Recorder};
use crate::pubsub::Broker;
use crate::telemetry::metrics::sharded::{Gauge, Histogram};
use crate::telemetry::metrics::{
    Direction, DropReason, ExitReason, FrameCounter, MessageCounter, Metrics, ProtocolError, Quirk,
    Unmatched,
};

/// Settings and metrics shared by an upstream's links. Its fields are
/// visible to the whole `upstream` module: every part of it (the doors,
/// admission, links, their driver, streams and feeds) reads these
/// settings and reports through these counters; nothing outside it sees
/// this type.
#[derive(Debug)]
pub(crate) struct UpstreamShared {
    pub(super) cfg: UpstreamConfig,
    pub(super) metrics: Metrics,
    pub(super) entries: Gauge,
    /// `upstream_in_flight` and `upstream_request_duration` of this upstream.
    pub(super) calls: (Gauge, Histogram),
    /// The links' frames and messages, resolved once.
    pub(super) traffic: Traffic,
    /// Cancelled when switchyard starts to stop: links closed from then on
    /// say goodbye as at shutdown (Sideband: Control Close `shutdown`, 1001).
    pub(super) stopping: CancellationToken,
    /// The WebSocket links' writer tasks, so that shutdown can wait for
    /// their goodbyes before the process exits.
    pub(super) writers: TaskTracker,
    /// Down since when, last connect error (pool supervisors write it).
    pub(super) health: super::health::LinkHealth,
    /// Where notifications on shared connections and feed events go.
    pub(super) broker: Arc<Broker>,
    /// The persistent store's hand-off: events of persistent topics are
    /// stored too. A full queue keeps them in the publisher's [`Backlog`],
    /// which the reader hands off before it reads on (back-pressure).
    pub(super) recorder: Option<Recorder>,
    /// `switchyard_events_published_total` of this upstream.
    pub(super) published: IntCounter,
    /// `wss://` upstreams: the TLS client configuration (roots read once,
    /// when the upstream starts), or why there is none (each dial then
    /// fails with it). `None` for `ws://` and Unix sockets.
    pub(super) tls: Option<Result<Arc<rustls::ClientConfig>, TlsSetupError>>,
    /// `command` upstreams: the `max_processes` cap and process metrics.
    pub(super) processes: Processes,
}

/// The `bytes`, `message_size` and `messages` series of an upstream's
/// dialect, side `upstream`, each way: every link counts every frame and
/// message it reads or writes into them.
#[derive(Debug)]
pub(crate) struct Traffic {
    pub(super) frames_in: FrameCounter,
    pub(super) frames_out: FrameCounter,
    pub(super) messages_in: MessageCounter,
    pub(super) messages_out: MessageCounter,
}

// === impl Traffic ===

impl Traffic {
    /// The series of `dialect`'s upstream side.
    pub(crate) fn new(metrics: &Metrics, dialect: Dialect) -> Self {
        let (side, r#in, out) = (Side::Upstream, Direction::In, Direction::Out);
        Traffic {
            frames_in: metrics.frame_counter(dialect, side, r#in),
            frames_out: metrics.frame_counter(dialect, side, out),
            messages_in: metrics.message_counter(dialect, side, r#in),
            messages_out: metrics.message_counter(dialect, side, out),
        }
    }
}

// === impl UpstreamShared ===

impl UpstreamShared {
    /// A fresh codec for a new link of this upstream.
    pub(crate) fn codec(&self) -> UpstreamCodec {
        UpstreamCodec::new(
            self.cfg.dialect,
            Options {
                offer_subprotocol: self.cfg.offer_subprotocol,
                fill_empty_params: self.cfg.fill_empty_params,
            },
        )
    }

    pub(crate) fn entries_gauge(&self) -> &Gauge {
        &self.entries
    }

    pub(crate) fn count_unmatched(&self, kind: Unmatched) {
        self.metrics
            .unmatched_responses
            .with_label_values(&[
                self.cfg.dialect.as_str(),
                Side::Upstream.as_str(),
                kind.as_str(),
            ])
            .inc();
    }

    /// Publishes `params` of the notification `method` under its topic
    /// (`<upstream>.<method>` unless renamed), unless publishing is off;
    /// see [`UpstreamShared::publish`] for `backlog`.
    pub(crate) fn publish_notification(
        &self,
        method: &str,
        params: Option<Payload>,
        backlog: &Backlog,
    ) {
        if !self.cfg.publish.notifications {
            self.count_dropped(DropReason::NoSubscriber);
            return;
        }
        let topic = self.cfg.publish.topic_for(&self.cfg.name, method);
        self.publish(&topic, params, backlog);
    }

    /// Publishes `data` (`null` when absent) under the concrete `topic`,
    /// and hands it to the persistent store if the topic is persistent:
    /// when the store's queue is full it waits in `backlog`, and the
    /// caller (the task reading the upstream connection) must
    /// [`UpstreamShared::hand_off`] it before it reads on.
    pub(crate) fn publish(&self, topic: &str, data: Option<Payload>, backlog: &Backlog) {
        let data = data.unwrap_or_else(|| Payload::Json(raw_from_string(String::from("null"))));
        match self.broker.publish(topic, &data) {
            Ok(_) => {
                self.published.inc();
                if let Some(recorder) = &self.recorder {
                    recorder.record(topic, &data, backlog);
                }
            }
            Err(e) => {
                tracing::debug!(upstream = %self.cfg.name, topic, error = %e, "event not published");
                self.count_dropped(DropReason::InvalidTopic);
            }
        }
    }

    /// Waits until the store's queue took every event of `backlog` (or
    /// the store stopped): the connection they came from is not read
    /// meanwhile, so a store that falls behind slows its upstream instead
    /// of losing events.
    pub(crate) async fn hand_off(&self, backlog: &Backlog) {
        if let Some(recorder) = &self.recorder {
            recorder.hand_off(backlog).await;
        }
    }

    /// Whether events under the concrete `topic` are stored (a feed of a
    /// persistent topic stays open without subscribers).
    pub(crate) fn is_persistent(&self, topic: &str) -> bool {
        self.recorder
            .as_ref()
            .is_some_and(|r| r.is_persistent(topic))
    }

    pub(crate) fn count_dropped(&self, reason: DropReason) {
        self.metrics
            .count_dropped(self.cfg.dialect, Side::Upstream, reason);
    }

    pub(crate) fn count_close(&self, code: u16) {
        self.metrics
            .ws_closes
            .with_label_values(&[
                self.cfg.dialect.as_str(),
                "upstream",
                crate::telemetry::metrics::close_code(code),
            ])
            .inc();
    }

    pub(crate) fn count_quirk(&self, quirk: Quirk) {
        self.metrics
            .peer_quirks
            .with_label_values(&[self.cfg.dialect.as_str(), quirk.as_str()])
            .inc();
    }

    pub(crate) fn count_protocol_error(&self, reason: ProtocolError) {
        self.metrics
            .count_protocol_error(self.cfg.dialect, Side::Upstream, reason);
    }
}

/// The framing limit for replies: twice `max_response_bytes`, so that a
/// reply above the limit can still be read whole and fail only its own call.
pub(crate) fn hard_cap(max_response_bytes: usize) -> usize {
    max_response_bytes.saturating_mul(2)
}

// === Processes: the process cap of a `command` upstream ===

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
