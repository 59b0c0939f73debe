//! Upstreams: the services switchyard connects to.
//!
//! An [`Upstream`] is a pool of persistent, pipelined connections
//! ([`link::Link`]) kept up by one supervisor task per slot, reconnecting
//! with exponential backoff and jitter. Calls are admitted against the
//! upstream-wide pending cap (with a bounded wait queue), placed on the
//! least-loaded live connection, and settled by id. The transport-specific
//! parts (dialing, framing) live in [`ndjson`] and `ws` (TLS for
//! `wss://` in [`tls`]).
//!
//! The router reaches an upstream through `mode`, the one place that
//! chooses the pool, the client's own link or a link per stream:
//! `Upstream::submit`, `Upstream::request` and `Upstream::notify`.
//! Requests to a pooled upstream are settled in place (`direct`): written
//! at once when there is room, else parked in the upstream's queue
//! (`parking`) and written by whoever frees room, with no task per
//! request. The task path (`calls`: a future per call) remains for
//! per-client and streaming upstreams, notifications and batches.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{UpstreamConfig, UpstreamMode};
use crate::envelope::Payload;
use crate::error::{ErrorKind, GatewayError};
use crate::telemetry::metrics::Metrics;

pub use self::health::HealthSnapshot;

mod admission;
mod batch;
mod calls;
pub mod correlator;
pub(crate) mod direct;
mod encode;
mod error;
mod feed;
mod health;
mod heartbeat;
mod inbound;
pub(crate) mod link;
mod link_dialect;
mod mode;
mod ndjson;
mod outbound;
mod outlet;
mod owner;
mod parking;
mod pool;
mod process;
mod redact;
mod shared;
mod sideband;
mod stream;
pub mod tls;
mod waiter;
mod ws;

use admission::Admission;
use link::Link;
pub(crate) use shared::{hard_cap, UpstreamShared};

/// A named upstream and its connection pool.
#[derive(Debug)]
pub struct Upstream {
    shared: Arc<UpstreamShared>,
    /// The pool's links, the pending cap and the calls waiting for room.
    admission: Arc<Admission>,
    /// Cancelled to close this upstream's streaming feeds (it was retired
    /// by a reload, or switchyard stops).
    feeds: CancellationToken,
}

/// Where an upstream's events go: the pub/sub broker, and the persistent
/// store's hand-off for the topics configured as persistent.
#[derive(Debug, Clone)]
pub struct Events {
    /// Every event is published here.
    pub broker: Arc<crate::pubsub::Broker>,
    /// Events of persistent topics are also queued here for the store.
    pub recorder: Option<crate::persist::recorder::Recorder>,
}

// === impl Upstream ===

impl Upstream {
    /// Starts the pool's supervisors; connections come up in the background.
    /// `stopping` is cancelled the moment switchyard starts to stop (links
    /// closed from then on say goodbye as at shutdown, whatever closes
    /// them first); `shutdown` when the links themselves must go.
    pub fn start(
        cfg: UpstreamConfig,
        metrics: Metrics,
        events: Events,
        stopping: CancellationToken,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let Events { broker, recorder } = events;
        let entries = metrics.correlator_entries.with_label_values(&[&cfg.name]);
        let calls = (
            metrics.upstream_in_flight.with_label_values(&[&cfg.name]),
            metrics
                .upstream_request_duration
                .with_label_values(&[&cfg.name]),
        );
        let published = metrics.events.published.with_label_values(&[&cfg.name]);
        let tls = tls::for_upstream(&cfg);
        let processes = process::Processes::new(&cfg, &metrics);
        let shared = Arc::new(UpstreamShared {
            processes,
            broker,
            recorder,
            published,
            cfg,
            metrics,
            entries,
            calls,
            stopping,
            writers: TaskTracker::new(),
            health: health::LinkHealth::new(),
            tls,
        });
        let (changed_tx, changed) = watch::channel(0u64);
        let changed_tx = Arc::new(changed_tx);
        // Per-client upstreams have no shared pool: each client dials its own.
        let pooled = match shared.cfg.mode {
            UpstreamMode::Shared => shared.cfg.pool_size.get(),
            UpstreamMode::PerClient => 0,
        };
        let feeds = shutdown.child_token();
        for f in &shared.cfg.publish.feeds {
            tokio::spawn(feed::run(shared.clone(), f.clone(), feeds.clone()));
        }
        let slots = (0..pooled)
            .map(|slot| {
                pool::spawn_slot(slot, shared.clone(), changed_tx.clone(), shutdown.clone())
            })
            .collect();
        let admission = Admission::new(shared.clone(), slots, changed);
        if pooled > 0 {
            // The timer of the calls parked for room (one per upstream).
            tokio::spawn(parking::run(admission.clone(), shutdown));
        }
        Arc::new(Upstream {
            shared,
            admission,
            feeds,
        })
    }

    /// Closes this upstream's streaming feeds (a reload retired it: the
    /// new definition opens its own).
    pub(crate) fn stop_feeds(&self) {
        self.feeds.cancel();
    }

    /// Waits until every WebSocket link of this upstream has sent its
    /// goodbye (call after the links were told to close).
    pub(crate) async fn links_closed(&self) {
        self.shared.writers.close();
        self.shared.writers.wait().await;
    }

    /// The upstream's config name.
    pub fn name(&self) -> &str {
        &self.shared.cfg.name
    }

    /// The upstream's configuration.
    pub fn config(&self) -> &UpstreamConfig {
        &self.shared.cfg
    }

    /// Since when the shared pool has had no live connection, and the
    /// last connect error (`per-client` upstreams keep no pool: always
    /// "down since start", with the errors of client-opened links absent).
    pub fn health(&self) -> HealthSnapshot {
        self.shared.health.snapshot()
    }

    /// Live connections right now.
    pub fn connected(&self) -> usize {
        self.admission.connected()
    }

    /// Params for a holon notification: non-object params are wrapped as
    /// `{"value": …}` (counted), absent params stay absent (sent as `{}`).
    pub(crate) fn holon_params(&self, params: Option<&Payload>) -> Option<Payload> {
        match params {
            Some(p) if crate::dialect::holon::object_params(Some(p)).is_none() => {
                self.shared
                    .count_quirk(crate::telemetry::metrics::Quirk::ParamsWrapped);
                crate::dialect::holon::wrap_params(p)
            }
            other => other.cloned(),
        }
    }

    /// True when `method` streams on this upstream (per-stream mode).
    pub fn is_streaming(&self, method: &str) -> bool {
        self.shared
            .cfg
            .streaming_methods
            .iter()
            .any(|m| m == method)
    }

    /// The client span of one upstream call (child of the server span).
    fn client_span(&self, method: &str) -> tracing::Span {
        self.client_span_under(&tracing::Span::current(), method)
    }

    /// The client span of one upstream call under an explicit parent.
    pub(crate) fn client_span_under(&self, parent: &tracing::Span, method: &str) -> tracing::Span {
        tracing::debug_span!(
            target: crate::telemetry::trace::RPC_TARGET,
            parent: parent,
            "rpc.client",
            otel.name = %format_args!("{} {method}", self.shared.cfg.dialect.rpc_system()),
            otel.kind = "client",
            rpc.system = self.shared.cfg.dialect.rpc_system(),
            rpc.method = %method,
            switchyard.dialect = self.shared.cfg.dialect.as_str(),
            switchyard.upstream = %self.shared.cfg.name,
        )
    }

    /// Opens a connection owned by one client (per-client mode): what the
    /// upstream originates on it goes to `owner`.
    pub(crate) async fn connect_dedicated(
        &self,
        owner: link::OwnerRef,
        shutdown: CancellationToken,
    ) -> Result<Arc<Link>, GatewayError> {
        // Boxed: dialing (a WebSocket handshake) is a large future, and
        // inline it would make every request's and notification's future
        // as large (each waiting request is a task of that size).
        let connected = tokio::time::timeout(
            self.shared.cfg.connect_timeout,
            Box::pin(pool::dial(&self.shared, Some(owner), shutdown)),
        )
        .await;
        match connected {
            Ok(Ok(link)) => Ok(link),
            // `command` upstreams: no room for one more process.
            Ok(Err(e @ error::LinkError::ProcessCap { .. })) => Err(GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                format!("upstream {}: {e}", self.shared.cfg.name),
            )),
            Ok(Err(e)) => Err(GatewayError::with_detail(
                ErrorKind::Unavailable,
                format!("upstream {} is not reachable: {e}", self.shared.cfg.name),
            )),
            Err(_) => Err(GatewayError::with_detail(
                ErrorKind::Unavailable,
                format!(
                    "upstream {} did not accept a connection in time",
                    self.shared.cfg.name
                ),
            )),
        }
    }
}

// === impl AbandonGuard ===
