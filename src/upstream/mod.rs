//! Upstreams: the services switchyard connects to.
//!
//! An [`Upstream`] is a pool of persistent, pipelined connections
//! ([`link::Link`]) kept up by one supervisor task per slot, reconnecting
//! with exponential backoff and jitter. Calls are admitted against the
//! upstream-wide pending cap (with a bounded wait queue), placed on the
//! least-loaded live connection, and settled by id. The transport-specific
//! parts (dialing, framing) live in [`ndjson`].

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio::sync::{oneshot, watch, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::{NotificationPolicy, UpstreamConfig, UpstreamMode};
use crate::dialect::Dialect;
use crate::envelope::{Message, Payload};
use crate::error::{ErrorKind, GatewayError};
use crate::telemetry::metrics::Metrics;

pub use self::health::HealthSnapshot;

mod admission;
mod batch;
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
mod ndjson;
mod owner;
mod pool;
mod shared;
mod sideband;
mod stream;
mod waiter;
mod ws;

use link::Link;
pub(crate) use shared::{hard_cap, UpstreamShared};

/// A named upstream and its connection pool.
#[derive(Debug)]
pub struct Upstream {
    shared: Arc<UpstreamShared>,
    /// One entry per pool slot: the live link, if any.
    slots: Vec<watch::Receiver<Option<Arc<Link>>>>,
    /// Bumped whenever any slot changes, so callers can wait for a link.
    changed: watch::Receiver<u64>,
    /// Upstream-wide cap on calls in flight (`max_pending`).
    pending: Arc<Semaphore>,
    /// Calls waiting for a pending slot (bounded by `max_queued`).
    queued: AtomicUsize,
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

/// Gives a call's gateway id up if the caller stops waiting before the reply.
struct AbandonGuard {
    link: Option<(Arc<Link>, u64)>,
    timed_out: bool,
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
        let pending = Arc::new(Semaphore::new(cfg.max_pending.get()));
        let published = metrics.events.published.with_label_values(&[&cfg.name]);
        let shared = Arc::new(UpstreamShared {
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
        Arc::new(Upstream {
            shared,
            slots,
            changed,
            pending,
            queued: AtomicUsize::new(0),
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
        self.slots
            .iter()
            .filter(|s| s.borrow().as_ref().is_some_and(|l| l.usable()))
            .count()
    }

    /// Calls one method and returns the upstream's reply (a response or an
    /// error, still carrying the gateway id). Cancel-safe: dropping the
    /// future abandons the call and a late reply is counted as stale.
    pub async fn call(
        &self,
        method: &str,
        params: Option<&Payload>,
    ) -> Result<Message, GatewayError> {
        self.call_inner(
            method,
            params,
            &mut AbandonGuard {
                link: None,
                timed_out: false,
            },
        )
        .await
    }

    /// Like [`call`](Self::call), but marks an abandoned call as timed out
    /// (which retires ordered connections) when `deadline` passes.
    pub async fn call_until(
        &self,
        method: &str,
        params: Option<&Payload>,
        deadline: tokio::time::Instant,
    ) -> Result<Message, GatewayError> {
        let mut guard = AbandonGuard {
            link: None,
            timed_out: false,
        };
        let span = self.client_span(method);
        let call = self.call_inner(method, params, &mut guard).instrument(span);
        let result = tokio::time::timeout_at(deadline, call).await;
        match result {
            Ok(r) => r,
            Err(_) => {
                guard.timed_out = true;
                Err(GatewayError::new(ErrorKind::Timeout))
            }
        }
    }

    /// Forwards a client notification according to the upstream's policy.
    pub async fn notify(&self, method: &str, params: Option<&Payload>) -> Result<(), GatewayError> {
        if self.shared.cfg.dialect == Dialect::Holon {
            // holon-rpc has no notifications: send a request, drop its reply.
            let wrapped = self.holon_params(params);
            return self.call(method, wrapped.as_ref()).await.map(|_| ());
        }
        // JSON-RPC params are an array or an object: wrap anything else.
        let wrapped;
        let params = match params {
            Some(p)
                if self.shared.cfg.dialect != Dialect::Sideband
                    && !crate::dialect::holon::is_structured(p) =>
            {
                self.shared
                    .count_quirk(crate::telemetry::metrics::Quirk::ParamsWrapped);
                wrapped = crate::dialect::holon::wrap_params(p);
                wrapped.as_ref()
            }
            other => other,
        };
        match self.shared.cfg.notifications {
            NotificationPolicy::Forward => {
                let link = self.pick_link().await?;
                link.send_notification(method, params)
            }
            NotificationPolicy::AsRequest => match self.call(method, params).await? {
                Message::Error { .. } => {
                    self.shared
                        .count_dropped(crate::telemetry::metrics::DropReason::NotificationError);
                    Ok(())
                }
                _ => Ok(()),
            },
        }
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

    /// Calls a streaming method (per-stream mode) on a dedicated
    /// connection; its events go to `owner` until `gone` fires.
    pub(crate) async fn stream_call(
        &self,
        method: &str,
        params: Option<&Payload>,
        client_id: &crate::envelope::WireId,
        owner: link::OwnerRef,
        gone: CancellationToken,
    ) -> Result<Message, GatewayError> {
        stream::open(self.shared.clone(), method, params, client_id, owner, gone).await
    }

    /// True when `method` streams on this upstream (per-stream mode).
    pub fn is_streaming(&self, method: &str) -> bool {
        self.shared
            .cfg
            .streaming_methods
            .iter()
            .any(|m| m == method)
    }

    /// Forwards a client notification on a dedicated (per-client) link.
    pub(crate) async fn notify_dedicated(
        &self,
        link: Arc<Link>,
        method: &str,
        params: Option<&Payload>,
        deadline: tokio::time::Instant,
    ) -> Result<(), GatewayError> {
        let as_request = self.shared.cfg.dialect == Dialect::Holon
            || self.shared.cfg.notifications == NotificationPolicy::AsRequest;
        if !as_request {
            return link.send_notification(method, params);
        }
        let params = if self.shared.cfg.dialect == Dialect::Holon {
            self.holon_params(params)
        } else {
            params.cloned()
        };
        self.call_dedicated(link, method, params.as_ref(), deadline)
            .await
            .map(|_| ())
    }

    async fn call_inner(
        &self,
        method: &str,
        params: Option<&Payload>,
        guard: &mut AbandonGuard,
    ) -> Result<Message, GatewayError> {
        let _admitted = self.admit().await?;
        let link = self.pick_link().await?;
        call_on(link, method, params, guard).await
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

    /// Calls `method` on a dedicated (per-client) link, until `deadline`.
    pub(crate) async fn call_dedicated(
        &self,
        link: Arc<Link>,
        method: &str,
        params: Option<&Payload>,
        deadline: tokio::time::Instant,
    ) -> Result<Message, GatewayError> {
        let mut guard = AbandonGuard {
            link: None,
            timed_out: false,
        };
        let call = async {
            let _admitted = self.admit().await?;
            call_on(link, method, params, &mut guard).await
        };
        match tokio::time::timeout_at(deadline, call).await {
            Ok(r) => r,
            Err(_) => {
                guard.timed_out = true;
                Err(GatewayError::new(ErrorKind::Timeout))
            }
        }
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

/// Sends one request on `link` and waits for its reply; the guard abandons
/// the gateway id if the caller stops waiting.
async fn call_on(
    link: Arc<Link>,
    method: &str,
    params: Option<&Payload>,
    guard: &mut AbandonGuard,
) -> Result<Message, GatewayError> {
    let _slot = link
        .depth
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| GatewayError::new(ErrorKind::Unavailable))?;
    let (tx, rx) = oneshot::channel();
    let gid = link
        .send_request(method, params, tx.into())
        .map_err(|(e, _)| e)?;
    let call = link.shared.start_call();
    guard.link = Some((link, gid));
    let reply = rx.await;
    call.settled();
    guard.link = None;
    reply.unwrap_or_else(|_| Err(GatewayError::new(ErrorKind::Unavailable)))
}

// === impl AbandonGuard ===

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if let Some((link, gid)) = self.link.take() {
            // Nobody waits any more: the waiter is dropped.
            let _ = link.abandon(gid, self.timed_out);
        }
    }
}
