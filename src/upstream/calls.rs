//! The task path: calls a task awaits (per-client links, the pool for
//! notifications sent as requests), and client batches sent to an
//! upstream that accepts batches (admitted as one unit, written as one
//! JSON array, settled item by item). Each waits for its slots (see
//! `admission`), sends, and awaits a oneshot; dropping the future
//! abandons what is unsettled (a late reply is counted as stale).

use std::borrow::Cow;
use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::Instrument;

use super::admission::Admission;
use super::correlator::{Held, ReplyResult, Slots};
use super::link::Link;
use super::Upstream;
use crate::config::NotificationPolicy;
use crate::dialect::link::NotificationRule;
use crate::dialect::UpstreamCodec;
use crate::envelope::{Message, Payload};
use crate::error::{ErrorKind, GatewayError};
use crate::telemetry::metrics::sharded::{Gauge, Histogram};

/// The receivers of a started batch, its guard, and the permits it holds.
type Started = (
    Vec<Option<oneshot::Receiver<ReplyResult>>>,
    BatchGuard,
    Vec<Held>,
);

/// Gives a call's gateway id up if the caller stops waiting before the reply.
#[derive(Default)]
struct AbandonGuard {
    link: Option<(Arc<Link>, u64)>,
    timed_out: bool,
}

/// One HTTP call counted in flight until dropped; [`Self::done`] also
/// records its duration (a call that completed, not a timeout).
struct InFlight<'a> {
    calls: &'a (Gauge, Histogram),
    started: std::time::Instant,
}

impl<'a> InFlight<'a> {
    fn new(calls: &'a (Gauge, Histogram)) -> Self {
        calls.0.inc();
        InFlight {
            calls,
            started: std::time::Instant::now(),
        }
    }

    fn done(self) {
        self.calls.1.observe_duration(self.started.elapsed());
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.calls.0.dec();
    }
}

// === impl Upstream ===

impl Upstream {
    /// Calls one method and returns the upstream's reply (a response or an
    /// error, still carrying the gateway id). Cancel-safe: dropping the
    /// future abandons the call and a late reply is counted as stale.
    async fn call(&self, method: &str, params: Option<&Payload>) -> Result<Message, GatewayError> {
        self.call_inner(method, params, &mut AbandonGuard::default())
            .await
    }

    /// Like [`call`](Self::call), but marks an abandoned call as timed out
    /// (which retires ordered connections) when `deadline` passes.
    pub(super) async fn call_until(
        &self,
        method: &str,
        params: Option<&Payload>,
        deadline: tokio::time::Instant,
    ) -> Result<Message, GatewayError> {
        let mut guard = AbandonGuard::default();
        let span = self.client_span(method);
        let call = self.call_inner(method, params, &mut guard).instrument(span);
        let result = tokio::time::timeout_at(deadline, call).await;
        guard.settle(result)
    }

    /// Forwards a client notification on the pool, according to the
    /// upstream's policy.
    pub(super) async fn notify_pooled(
        &self,
        method: &str,
        params: Option<&Payload>,
    ) -> Result<(), GatewayError> {
        let rule = UpstreamCodec::notification_rule(self.shared.cfg.dialect);
        let params = self.notification_params(rule, params);
        if rule == NotificationRule::AsRequest {
            // No notifications on this wire: send a request, drop its reply.
            return self.call(method, params.as_deref()).await.map(|_| ());
        }
        match self.shared.cfg.notifications {
            NotificationPolicy::Forward => {
                let link = self.admission.pick_link().await?;
                link.send_notification(method, params.as_deref())
            }
            NotificationPolicy::AsRequest => match self.call(method, params.as_deref()).await? {
                Message::Error { .. } => {
                    self.shared
                        .count_dropped(crate::telemetry::metrics::DropReason::NotificationError);
                    Ok(())
                }
                _ => Ok(()),
            },
        }
    }

    /// POSTs a request (`want_reply`) or notification to a `jsonrpc-http`
    /// upstream under the pending cap, until `deadline` (then `timeout`;
    /// the POST is abandoned and its connection closed).
    pub(super) async fn call_http(
        &self,
        method: &str,
        params: Option<&Payload>,
        want_reply: bool,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Message>, GatewayError> {
        let Some(http) = &self.http else {
            return Err(GatewayError::new(ErrorKind::Internal));
        };
        let span = self.client_span(method);
        let traceparent = crate::telemetry::trace::traceparent(&span);
        let call = async {
            let _admitted = self.admission.admit_many(1).await?;
            let counted = InFlight::new(&self.shared.calls);
            let reply = http.call(method, params, want_reply, traceparent).await;
            counted.done();
            reply
        };
        match tokio::time::timeout_at(deadline, call.instrument(span)).await {
            Ok(reply) => reply,
            Err(_) => Err(GatewayError::new(ErrorKind::Timeout)),
        }
    }

    /// A client batch to a `jsonrpc-http` upstream: one `POST` of a JSON
    /// array, admitted as one unit under the pending cap, until `deadline`.
    async fn http_batch(
        &self,
        http: &super::http::HttpUpstream,
        calls: &[(&str, Option<&Payload>, bool)],
        requests: usize,
        deadline: tokio::time::Instant,
    ) -> Vec<Option<Result<Message, GatewayError>>> {
        let span = self.client_span("batch");
        let traceparent = crate::telemetry::trace::traceparent(&span);
        let n = u32::try_from(requests.max(1)).unwrap_or(u32::MAX);
        let call = async {
            let _admitted = self.admission.admit_many(n).await?;
            let counted = InFlight::new(&self.shared.calls);
            let replies = http.batch(calls, traceparent).await;
            counted.done();
            Ok::<_, GatewayError>(replies)
        };
        let failed = match tokio::time::timeout_at(deadline, call.instrument(span)).await {
            Ok(Ok(replies)) => return replies,
            Ok(Err(e)) => e,
            Err(_) => GatewayError::new(ErrorKind::Timeout),
        };
        calls
            .iter()
            .map(|c| c.2.then(|| Err(failed.clone())))
            .collect()
    }

    /// Forwards a client notification on a dedicated (per-client) link.
    pub(super) async fn notify_dedicated(
        &self,
        link: Arc<Link>,
        method: &str,
        params: Option<&Payload>,
        deadline: tokio::time::Instant,
    ) -> Result<(), GatewayError> {
        let rule = UpstreamCodec::notification_rule(self.shared.cfg.dialect);
        let as_request = rule == NotificationRule::AsRequest
            || self.shared.cfg.notifications == NotificationPolicy::AsRequest;
        if !as_request {
            return link.send_notification(method, params);
        }
        let params = match rule {
            NotificationRule::AsRequest => self.notification_params(rule, params),
            NotificationRule::Structured | NotificationRule::AsIs => params.map(Cow::Borrowed),
        };
        self.call_dedicated(link, method, params.as_deref(), deadline)
            .await
            .map(|_| ())
    }

    /// A notification's params as `rule` wants them: params of the wrong
    /// shape are wrapped as `{"value": …}` (counted), absent ones stay
    /// absent.
    fn notification_params<'a>(
        &self,
        rule: NotificationRule,
        params: Option<&'a Payload>,
    ) -> Option<Cow<'a, Payload>> {
        let p = params?;
        let fits = match rule {
            NotificationRule::AsRequest => crate::dialect::holon::is_object(p),
            NotificationRule::Structured => p.is_structured(),
            NotificationRule::AsIs => true,
        };
        if fits {
            return Some(Cow::Borrowed(p));
        }
        self.shared
            .count_quirk(crate::telemetry::metrics::Quirk::ParamsWrapped);
        crate::dialect::holon::wrap_params(p).map(Cow::Owned)
    }

    async fn call_inner(
        &self,
        method: &str,
        params: Option<&Payload>,
        guard: &mut AbandonGuard,
    ) -> Result<Message, GatewayError> {
        let _admitted = self.admission.admit_many(1).await?;
        let link = self.admission.pick_link().await?;
        call_on(&self.admission, link, method, params, guard).await
    }

    /// Calls `method` on a dedicated (per-client) link, until `deadline`.
    pub(super) async fn call_dedicated(
        &self,
        link: Arc<Link>,
        method: &str,
        params: Option<&Payload>,
        deadline: tokio::time::Instant,
    ) -> Result<Message, GatewayError> {
        let mut guard = AbandonGuard::default();
        let call = async {
            let _admitted = self.admission.admit_many(1).await?;
            call_on(&self.admission, link, method, params, &mut guard).await
        };
        let result = tokio::time::timeout_at(deadline, call).await;
        guard.settle(result)
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
        if let Some(http) = &self.http {
            return self.http_batch(http, calls, requests, deadline).await;
        }
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
    ) -> Result<Started, GatewayError> {
        let depth = self.shared.cfg.max_in_flight_per_connection.get();
        if requests > depth.min(self.shared.cfg.max_pending.get()) {
            return Err(GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                "batch larger than the upstream's in-flight limit",
            ));
        }
        let mut permits = Vec::with_capacity(2);
        if requests > 0 {
            permits.push(self.admission.admit_many(requests as u32).await?);
        }
        let link = self.admission.pick_link().await?;
        if requests > 0 {
            permits.push(self.admission.link_slots(&link, requests as u32).await?);
        }
        let (waiters, receivers): (Vec<_>, Vec<_>) = calls
            .iter()
            .map(|c| {
                if c.2 {
                    let (tx, rx) = oneshot::channel();
                    (Some(tx.into()), Some(rx))
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
}

/// Sends one request on `link` and waits for its reply; the guard abandons
/// the gateway id if the caller stops waiting.
async fn call_on(
    admission: &Arc<Admission>,
    link: Arc<Link>,
    method: &str,
    params: Option<&Payload>,
    guard: &mut AbandonGuard,
) -> Result<Message, GatewayError> {
    let mut slots = Slots::start(admission.link_slots(&link, 1).await?);
    let (tx, rx) = oneshot::channel();
    let gid = link
        .send_request(method, params, tx.into())
        .map_err(|(e, _)| e)?;
    guard.link = Some((link, gid));
    let reply = rx.await;
    slots.settled(true, std::time::Instant::now());
    guard.link = None;
    reply.unwrap_or_else(|_| Err(GatewayError::new(ErrorKind::Unavailable)))
}

// === impl AbandonGuard ===

impl AbandonGuard {
    /// The outcome of a call awaited until a deadline: when the deadline
    /// passed, the call is marked timed out (so that abandoning it retires
    /// an ordered connection) and the caller gets a timeout.
    fn settle(
        &mut self,
        result: Result<Result<Message, GatewayError>, tokio::time::error::Elapsed>,
    ) -> Result<Message, GatewayError> {
        result.unwrap_or_else(|_| {
            self.timed_out = true;
            Err(GatewayError::new(ErrorKind::Timeout))
        })
    }
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if let Some((link, gid)) = self.link.take() {
            // Nobody waits any more: the waiter is dropped.
            let _ = link.abandon(gid, self.timed_out);
        }
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
            let _ = self.link.abandon(*gid, self.timed_out);
        }
    }
}
