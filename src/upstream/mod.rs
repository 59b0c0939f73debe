//! Upstreams: the services switchyard connects to.
//!
//! An [`Upstream`] is a pool of persistent, pipelined connections (`link`)
//! kept up by one supervisor task per slot (`pool`), reconnecting with
//! exponential backoff and jitter. Each connection is run by the one link
//! driver (`driver`: a reader and a writer loop) over its transport
//! (`ndjson`, `ws`; TLS for `wss://` in [`tls`]), and speaks its
//! upstream's dialect through the dialect's codec
//! ([`crate::dialect::UpstreamCodec`]). Calls are admitted
//! against the upstream-wide pending cap (`admission`, with a bounded
//! wait queue), placed on the least-loaded live connection, and settled
//! by gateway id.
//!
//! The router reaches an upstream through the doors of this file, the one
//! place that chooses the pool, the client's own link (`dedicated`) or a
//! link per stream (`stream`): [`Upstream::submit`] from the client's
//! reader, [`Upstream::request`] from a task, [`Upstream::notify`].
//! Requests to a pooled upstream are settled in place: written at once
//! when there is room, else parked in the upstream's queue and written by
//! whoever frees room, with no task per request; the client is told where
//! each went by a [`Receipt`]. The task path (`calls`: a future per call)
//! remains for per-client and streaming upstreams, notifications and
//! batches, and takes every call to a `jsonrpc-http` upstream, which
//! keeps no links: one POST per call through a client pool (`http`),
//! under the same pending cap. The router never holds a link.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use tokio::time::Instant;

use crate::config::{UpstreamConfig, UpstreamMode};
use crate::envelope::{Payload, WireId};
use crate::error::GatewayError;
use crate::telemetry::metrics::Metrics;

pub use self::health::HealthSnapshot;

mod admission;
mod calls;
pub mod correlator;
mod dedicated;
mod driver;
mod error;
mod feed;
mod health;
mod http;
mod link;
mod ndjson;
mod outlet;
mod owner;
mod pool;
mod process;
mod redact;
mod shared;
mod stream;
pub mod tls;
mod ws;

use admission::Admission;
pub(crate) use correlator::{Caller, Receipt, ReplyResult, Settle, Settled, Submission};
pub(crate) use dedicated::{Client, Dedicated};
pub(crate) use owner::{Owner, OwnerRef, PendingPush};
use shared::UpstreamShared;

/// A named upstream and its connection pool.
#[derive(Debug)]
pub struct Upstream {
    shared: Arc<UpstreamShared>,
    /// The pool's links, the pending cap and the calls waiting for room.
    admission: Arc<Admission>,
    /// Cancelled to close this upstream's streaming feeds (it was retired
    /// by a reload, or switchyard stops).
    feeds: CancellationToken,
    /// `jsonrpc-http` upstreams: the HTTP client every call goes through
    /// (no pool of links then).
    http: Option<http::HttpUpstream>,
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

/// How one call travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// On the shared pool.
    Pooled,
    /// On the client's own link.
    PerClient,
    /// On a link opened for this call (a streaming method).
    PerStream,
    /// One POST of its own (`jsonrpc-http` upstreams).
    Http,
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
        let processes = shared::Processes::new(&cfg, &metrics);
        let traffic = shared::Traffic::new(&metrics, cfg.dialect);
        let shared = Arc::new(UpstreamShared {
            traffic,
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
        // Nor do HTTP upstreams: each call is a POST through `http`.
        let http = match &shared.cfg.target {
            crate::config::UpstreamTarget::Http(target) => Some(http::HttpUpstream::new(
                &shared.cfg,
                target,
                shared.tls.as_ref(),
            )),
            _ => None,
        };
        let pooled = match shared.cfg.mode {
            _ if http.is_some() => 0,
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
            tokio::spawn(admission.clone().run_queue(shutdown));
        }
        Arc::new(Upstream {
            shared,
            admission,
            feeds,
            http,
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

    /// How calls of `method` travel: the only place the upstream's mode
    /// and its streaming methods are looked at.
    fn mode(&self, method: &str) -> Mode {
        if self.http.is_some() {
            return Mode::Http;
        }
        if self.is_streaming(method) {
            // On a pooled connection it would take the connection over.
            return Mode::PerStream;
        }
        self.links_mode()
    }

    /// Where the upstream's calls go when they open no stream (and its
    /// notifications, always).
    fn links_mode(&self) -> Mode {
        if self.http.is_some() {
            return Mode::Http;
        }
        match self.shared.cfg.mode {
            UpstreamMode::Shared => Mode::Pooled,
            UpstreamMode::PerClient => Mode::PerClient,
        }
    }

    /// True when calls of `method` are settled in place (pooled calls).
    pub(crate) fn settles_in_place(&self, method: &str) -> bool {
        self.mode(method) == Mode::Pooled
    }

    /// True when requests of `method` may go in a client batch sent as
    /// one (pooled calls, or calls to an HTTP upstream: one `POST`, to an
    /// upstream that accepts batches).
    pub(crate) fn takes_batches_of(&self, method: &str) -> bool {
        self.shared.cfg.accepts_batches && matches!(self.mode(method), Mode::Pooled | Mode::Http)
    }

    /// Settles `call` in place: written now if there is room, else parked
    /// until there is (see `admission`). Given back when it
    /// must take the task path ([`request`](Self::request)) instead.
    /// Returns the receipt of a call written at once: the caller records
    /// it (a call written later is recorded by [`Caller::written`]).
    // The call comes back as it came, by value: boxing it would cost an
    // allocation per request.
    #[allow(clippy::result_large_err)]
    pub(crate) fn submit(&self, call: Submission) -> Result<Option<Receipt>, Submission> {
        if !self.settles_in_place(&call.method) {
            return Err(call);
        }
        Ok(self.admission.submit(call))
    }

    /// Takes out the calls `caller` has parked here (its shutdown grace
    /// period is over: it answers them itself).
    pub(crate) fn withdraw(&self, caller: &Arc<dyn Caller>) -> Vec<Settle> {
        self.admission.withdraw(caller)
    }

    /// Calls `method` for `client` and awaits the reply (still carrying
    /// the gateway id), or `timeout` at `deadline`. Cancel-safe: dropping
    /// the future abandons the call. `id` is the client's id of the call
    /// (a stream's events name it).
    pub(crate) async fn request(
        &self,
        id: &WireId,
        method: &str,
        params: Option<&Payload>,
        deadline: Instant,
        client: &dyn Client,
    ) -> ReplyResult {
        match self.mode(method) {
            Mode::Pooled => self.call_until(method, params, deadline).await,
            Mode::Http => self
                .call_http(method, params, true, deadline)
                .await?
                .ok_or_else(|| GatewayError::new(crate::error::ErrorKind::Internal)),
            Mode::PerClient => {
                let link = client.dedicated().link(&self.shared, client).await?;
                self.call_dedicated(link, method, params, deadline).await
            }
            Mode::PerStream => {
                let shared = self.shared.clone();
                let (owner, gone) = (client.owner(), client.gone());
                // Boxed: inline, opening a stream (a dial and a handshake)
                // would make every request's future as large, and a task
                // waits on one per request while an upstream restarts.
                Box::pin(stream::open(shared, method, params, id, owner, gone)).await
            }
        }
    }

    /// Forwards a client notification according to the upstream's policy,
    /// on the pool or on the client's own link.
    pub(crate) async fn notify(
        &self,
        method: &str,
        params: Option<&Payload>,
        deadline: Instant,
        client: &dyn Client,
    ) -> Result<(), GatewayError> {
        // A notification opens no stream.
        match self.links_mode() {
            Mode::Pooled | Mode::PerStream => self.notify_pooled(method, params).await,
            Mode::Http => self
                .call_http(method, params, false, deadline)
                .await
                .map(|_| ()),
            Mode::PerClient => {
                let link = client.dedicated().link(&self.shared, client).await?;
                self.notify_dedicated(link, method, params, deadline).await
            }
        }
    }
}
