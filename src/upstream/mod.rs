//! Upstreams: the services switchyard connects to.
//!
//! An [`Upstream`] is a pool of persistent, pipelined connections
//! ([`link::Link`]) kept up by one supervisor task per slot, reconnecting
//! with exponential backoff and jitter. Calls are admitted against the
//! upstream-wide pending cap (with a bounded wait queue), placed on the
//! least-loaded live connection, and settled by id. The transport-specific
//! parts (dialing, framing) live in [`ndjson`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::IntGauge;
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{NotificationPolicy, UpstreamConfig, UpstreamMode};
use crate::dialect::Dialect;
use crate::envelope::{Message, Payload};
use crate::error::{ErrorKind, GatewayError};
use crate::telemetry::metrics::Metrics;

mod encode;
mod inbound;
pub(crate) mod link;
mod ndjson;
mod pool;
mod stream;
mod ws;

use link::Link;

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
}

/// Settings and metrics shared by an upstream's links.
#[derive(Debug)]
pub(crate) struct UpstreamShared {
    pub(crate) cfg: UpstreamConfig,
    pub(crate) metrics: Metrics,
    entries: IntGauge,
}

/// Gives a call's gateway id up if the caller stops waiting before the reply.
struct AbandonGuard {
    link: Option<(Arc<Link>, u64)>,
    timed_out: bool,
}

// === impl Upstream ===

impl Upstream {
    /// Starts the pool's supervisors; connections come up in the background.
    pub fn start(cfg: UpstreamConfig, metrics: Metrics, shutdown: CancellationToken) -> Arc<Self> {
        let entries = metrics.correlator_entries.with_label_values(&[&cfg.name]);
        let pending = Arc::new(Semaphore::new(cfg.max_pending.get()));
        let shared = Arc::new(UpstreamShared {
            cfg,
            metrics,
            entries,
        });
        let (changed_tx, changed) = watch::channel(0u64);
        let changed_tx = Arc::new(changed_tx);
        // Per-client upstreams have no shared pool: each client dials its own.
        let pooled = match shared.cfg.mode {
            UpstreamMode::Shared => shared.cfg.pool_size.get(),
            UpstreamMode::PerClient => 0,
        };
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
        })
    }

    /// The upstream's config name.
    pub fn name(&self) -> &str {
        &self.shared.cfg.name
    }

    /// The upstream's configuration.
    pub fn config(&self) -> &UpstreamConfig {
        &self.shared.cfg
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

    /// Sends several calls as one batch (for upstreams that accept batches).
    /// `calls[i].2` tells whether call `i` is a request (expects a reply).
    /// Returns one entry per call: the reply for requests, `None` for
    /// notifications. Requests unanswered at `deadline` get `timeout`.
    pub async fn call_batch(
        &self,
        calls: &[(&str, Option<&Payload>, bool)],
        deadline: tokio::time::Instant,
    ) -> Vec<Option<Result<Message, GatewayError>>> {
        let requests = calls.iter().filter(|c| c.2).count();
        let fail_all = |err: GatewayError| {
            calls
                .iter()
                .map(|c| c.2.then(|| Err(err.clone())))
                .collect()
        };
        let started = tokio::time::timeout_at(deadline, self.start_batch(calls, requests)).await;
        let (receivers, mut guard, _permits) = match started {
            Ok(Ok(started)) => started,
            Ok(Err(e)) => return fail_all(e),
            Err(_) => return fail_all(GatewayError::new(ErrorKind::Timeout)),
        };
        let mut out = Vec::with_capacity(calls.len());
        for (i, rx) in receivers.into_iter().enumerate() {
            let Some(rx) = rx else {
                out.push(None);
                continue;
            };
            let reply = match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(reply)) => {
                    guard.settled(i);
                    reply
                }
                Ok(Err(_)) => {
                    guard.settled(i);
                    Err(GatewayError::new(ErrorKind::Unavailable))
                }
                Err(_) => Err(GatewayError::new(ErrorKind::Timeout)),
            };
            out.push(Some(reply));
        }
        guard.timed_out = true;
        out
    }

    /// Admits, places and sends a batch; returns the reply receivers.
    async fn start_batch(
        &self,
        calls: &[(&str, Option<&Payload>, bool)],
        requests: usize,
    ) -> Result<
        (
            Vec<Option<oneshot::Receiver<link::ReplyResult>>>,
            BatchGuard,
            Vec<OwnedSemaphorePermit>,
        ),
        GatewayError,
    > {
        let depth = self.shared.cfg.max_in_flight_per_connection.get();
        if requests > depth.min(self.shared.cfg.max_pending.get()) {
            return Err(GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                "batch larger than the upstream's in-flight limit",
            ));
        }
        let mut permits = Vec::with_capacity(2);
        if requests > 0 {
            permits.push(self.admit_many(requests as u32).await?);
        }
        let link = self.pick_link().await?;
        if requests > 0 {
            let slot = link.depth.clone().acquire_many_owned(requests as u32).await;
            permits.push(slot.map_err(|_| GatewayError::new(ErrorKind::Unavailable))?);
        }
        let (waiters, receivers): (Vec<_>, Vec<_>) = calls
            .iter()
            .map(|c| {
                if c.2 {
                    let (tx, rx) = oneshot::channel();
                    (Some(tx), Some(rx))
                } else {
                    (None, None)
                }
            })
            .unzip();
        let pairs: Vec<(&str, Option<&Payload>)> = calls.iter().map(|c| (c.0, c.1)).collect();
        let ids = link.send_batch(&pairs, waiters)?;
        let guard = BatchGuard {
            link,
            ids,
            timed_out: false,
        };
        Ok((receivers, guard, permits))
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
                self.shared.count_quirk("params_wrapped");
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
                    self.shared.count_dropped("notification_error");
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
                self.shared.count_quirk("params_wrapped");
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
        tracing::info_span!(
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
        let connected = tokio::time::timeout(
            self.shared.cfg.connect_timeout,
            pool::dial(&self.shared, Some(owner), shutdown),
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

    /// Takes a slot under the upstream-wide pending cap, waiting in the
    /// bounded queue when the cap is reached.
    async fn admit(&self) -> Result<OwnedSemaphorePermit, GatewayError> {
        self.admit_many(1).await
    }

    async fn admit_many(&self, n: u32) -> Result<OwnedSemaphorePermit, GatewayError> {
        if let Ok(permit) = self.pending.clone().try_acquire_many_owned(n) {
            return Ok(permit);
        }
        let exhausted = || {
            GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                "upstream pending limit reached",
            )
        };
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.shared.cfg.max_queued {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(exhausted());
        }
        let permit = self.pending.clone().acquire_many_owned(n).await;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        permit.map_err(|_| exhausted())
    }

    /// The least-loaded live link, waiting up to the connect timeout for one.
    async fn pick_link(&self) -> Result<Arc<Link>, GatewayError> {
        let deadline = tokio::time::Instant::now() + self.shared.cfg.connect_timeout;
        let mut changed = self.changed.clone();
        loop {
            let best = self
                .slots
                .iter()
                .filter_map(|s| s.borrow().as_ref().filter(|l| l.usable()).cloned())
                .min_by_key(|l| l.in_flight());
            if let Some(link) = best {
                return Ok(link);
            }
            let wait = tokio::time::timeout_at(deadline, changed.changed()).await;
            if !matches!(wait, Ok(Ok(()))) {
                return Err(GatewayError::with_detail(
                    ErrorKind::Unavailable,
                    format!("upstream {} is not connected", self.shared.cfg.name),
                ));
            }
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
    let gid = link.send_request(method, params, tx)?;
    let call = link
        .shared
        .metrics
        .start_upstream_call(&link.shared.cfg.name);
    guard.link = Some((link, gid));
    let reply = rx.await;
    call.settled();
    guard.link = None;
    reply.unwrap_or_else(|_| Err(GatewayError::new(ErrorKind::Unavailable)))
}

// === impl UpstreamShared ===

impl UpstreamShared {
    pub(crate) fn entries_gauge(&self) -> &IntGauge {
        &self.entries
    }

    pub(crate) fn count_unmatched(&self, kind: &str) {
        self.metrics
            .unmatched_responses
            .with_label_values(&[self.cfg.dialect.as_str(), "upstream", kind])
            .inc();
    }

    pub(crate) fn count_dropped(&self, reason: &str) {
        self.metrics
            .dropped_messages
            .with_label_values(&[self.cfg.dialect.as_str(), "upstream", reason])
            .inc();
    }

    pub(crate) fn count_close(&self, code: u16) {
        self.metrics
            .ws_closes
            .with_label_values(&[self.cfg.dialect.as_str(), "upstream", close_label(code)])
            .inc();
    }

    pub(crate) fn count_quirk(&self, quirk: &str) {
        self.metrics
            .peer_quirks
            .with_label_values(&[self.cfg.dialect.as_str(), quirk])
            .inc();
    }

    pub(crate) fn count_protocol_error(&self, reason: &str) {
        self.metrics
            .protocol_errors
            .with_label_values(&[self.cfg.dialect.as_str(), "upstream", reason])
            .inc();
    }
}

/// Gives a batch's unsettled gateway ids up when the caller stops waiting.
struct BatchGuard {
    link: Arc<Link>,
    ids: Vec<Option<u64>>,
    timed_out: bool,
}

impl BatchGuard {
    fn settled(&mut self, i: usize) {
        if let Some(id) = self.ids.get_mut(i) {
            *id = None;
        }
    }
}

impl Drop for BatchGuard {
    fn drop(&mut self) {
        for gid in self.ids.iter().flatten() {
            self.link.abandon(*gid, self.timed_out);
        }
    }
}

/// The framing limit for replies: twice `max_response_bytes`, so that a
/// reply above the limit can still be read whole and fail only its own call.
pub(crate) fn hard_cap(max_response_bytes: usize) -> usize {
    max_response_bytes.saturating_mul(2)
}

/// A close code as a label from a closed set.
pub(crate) fn close_label(code: u16) -> &'static str {
    match code {
        1000 => "1000",
        1001 => "1001",
        1002 => "1002",
        1003 => "1003",
        1005 => "1005",
        1006 => "1006",
        1007 => "1007",
        1008 => "1008",
        1009 => "1009",
        1011 => "1011",
        1012 => "1012",
        4000 => "4000",
        _ => "other",
    }
}

// === impl AbandonGuard ===

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if let Some((link, gid)) = self.link.take() {
            link.abandon(gid, self.timed_out);
        }
    }
}
