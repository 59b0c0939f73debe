//! Routing and reply delivery: the core between listeners and upstreams.
//!
//! A [`Router`] owns a request's whole trip for one listener: the method
//! policy, the pub/sub and persistent methods switchyard serves itself,
//! the route table (the one [`RouteTable`] that config validation checks,
//! resolved here to started upstreams), the call to the upstream, the
//! reply with the client's original id restored, error replies in the
//! listener's dialect, the request metrics and the throttled log of
//! upstream failures. [`Router::handle`] takes one decoded client item and
//! produces the reply to send back (if any).
//!
//! What it needs of its listener's configuration is a [`RouterSettings`]
//! (see `settings` for why a copy, not the whole config). The listener
//! itself (its connection and rate limits, upgrade checks, the cell a
//! reload swaps) is `transport::Listener`, which holds an `Arc<Router>`;
//! the router knows nothing of it. Correlation lives in
//! [`crate::upstream::correlator`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;
use tokio::time::Instant as TokioInstant;
use tracing::Instrument;

use crate::config::{ListenerConfig, RouteTable};
use crate::dialect::errors;
use crate::dialect::jsonrpc::Item;
use crate::envelope::{Message, Outcome, Payload, WireId};
use crate::error::{ErrorKind, GatewayError, Side};
use crate::telemetry::metrics::{DropReason, Metrics, ProtocolError, RequestOutcome};
use crate::telemetry::Peer;
use crate::upstream::Upstream;

use batch::Batch;
use events::Events;
use persistent::Persistent;

mod batch;
pub mod client;
mod events;
pub(crate) mod in_place;
mod persistent;
mod policy;
mod pusher;
mod settings;

pub use crate::persist::hub::Starts;
pub use client::ClientLinks;
pub use pusher::Pusher;
pub use settings::RouterSettings;

/// At most one log line per upstream and failure per this period; the
/// next line counts the ones held back.
const LOG_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// The `upstream` label of pub/sub requests switchyard answers itself.
const PUBSUB: &str = "pubsub";

/// The `upstream` label of persistent requests switchyard answers itself.
const PERSISTENT: &str = "persistent";

/// Records the outcome of a request on its span.
pub(crate) fn record_outcome(span: &tracing::Span, reply: &Message) {
    match reply {
        Message::Error { error, .. } => {
            span.record("otel.status_code", "ERROR");
            span.record("rpc.jsonrpc.error_code", error.code);
        }
        _ => {
            span.record("otel.status_code", "OK");
        }
    }
}

/// One listener's request handling: its route table with the upstreams
/// resolved, its method policy and the methods switchyard serves itself.
#[derive(Debug)]
pub struct Router {
    /// What the router takes from the listener's configuration.
    cfg: RouterSettings,
    /// The pub/sub methods, served from the broker every listener shares.
    events: Events,
    /// The persistent methods, served from the hub every listener shares
    /// (`None`: they are not served).
    persistent: Option<Persistent>,
    /// The listener's route table, resolved to started upstreams.
    table: RouteTable<Arc<Upstream>>,
    metrics: Metrics,
    /// One log line per second per upstream and outcome (`unavailable`,
    /// `timeout`).
    logs: crate::throttle::Throttle,
    /// Resolved per-upstream series: `request_duration` and the `ok`
    /// member of `requests` (touched on every request).
    series: Vec<(Arc<Upstream>, Series)>,
}

/// One route → upstream pair's hot series.
#[derive(Debug)]
struct Series {
    duration: crate::telemetry::metrics::sharded::Histogram,
    ok: crate::telemetry::metrics::sharded::Counter,
}

// === impl Router ===

impl Router {
    /// The router of listener `cfg`, its route table resolved against the
    /// started upstreams. Config validation guarantees every name exists;
    /// a missing one is treated as "no route".
    pub fn new(
        cfg: &ListenerConfig,
        upstreams: &HashMap<String, Arc<Upstream>>,
        broker: Arc<crate::pubsub::Broker>,
        metrics: Metrics,
    ) -> Self {
        let table = cfg.routes.resolve(|name| upstreams.get(name).cloned());
        let mut series: Vec<(Arc<Upstream>, Series)> = Vec::new();
        for up in table.upstreams() {
            if series.iter().any(|(u, _)| Arc::ptr_eq(u, up)) {
                continue;
            }
            let labels = [cfg.name.as_str(), up.name()];
            let s = Series {
                duration: metrics.request_duration.with_label_values(&labels),
                ok: metrics.requests.with_label_values(&[
                    cfg.name.as_str(),
                    up.name(),
                    RequestOutcome::Ok.as_str(),
                ]),
            };
            series.push((up.clone(), s));
        }
        let default_topics = policy::upstream_topics(&table);
        Router {
            cfg: RouterSettings::of(cfg).with_default_topics(&default_topics),
            events: Events::new(broker, &metrics, &cfg.name),
            persistent: None,
            table,
            metrics,
            series,
            logs: crate::throttle::Throttle::new(LOG_PERIOD),
        }
    }

    /// Serves the persistent methods from `hub`.
    pub fn with_hub(mut self, hub: Arc<crate::persist::hub::Hub>) -> Self {
        self.persistent = Some(Persistent::new(hub, &self.metrics, &self.cfg.name));
        self
    }

    /// The upstream serving `method`, if any.
    pub fn upstream_for(&self, method: &str) -> Option<&Arc<Upstream>> {
        self.table.upstream_for(method)
    }

    /// Handles one client item and returns the reply to send, if any. The
    /// persistent subscriptions it opens deliver once the caller has queued
    /// the reply and released `starts`.
    pub async fn handle(
        &self,
        item: Item,
        client: &ClientLinks,
        starts: &Starts,
    ) -> Option<Message> {
        match item {
            Item::Invalid(reply) => {
                self.count_protocol_error(ProtocolError::InvalidRequest);
                Some(reply)
            }
            Item::Valid(Message::Request { id, method, params }) => {
                let span = self.server_span(&tracing::Span::current(), &id, &method);
                let reply = self
                    .request(id, &method, params.as_ref(), client, starts)
                    .instrument(span.clone())
                    .await;
                record_outcome(&span, &reply);
                Some(reply)
            }
            Item::Valid(Message::Notification { method, params }) => {
                self.notification(&method, params.as_ref(), client).await
            }
            Item::Valid(reply @ (Message::Response { .. } | Message::Error { .. })) => {
                self.client_reply(reply, client)
            }
            Item::BadReply(id) => {
                self.count_protocol_error(ProtocolError::InvalidResponse);
                let err =
                    GatewayError::with_detail(ErrorKind::Internal, "invalid reply from the client")
                        .on(Side::Client);
                client.pusher().settle(&id, Err(err));
                None
            }
        }
    }

    /// Handles the items of one client batch and returns their replies in
    /// request order. Items routed to an upstream that accepts batches go to
    /// it as one batch; all others are handled one by one, concurrently.
    /// Persistent subscriptions opened by its items deliver once `starts`
    /// is released (after the batch reply is queued).
    pub async fn handle_batch(
        &self,
        items: Vec<Item>,
        client: &ClientLinks,
        starts: &Starts,
    ) -> Vec<Message> {
        let batch = Batch::split(items, |method| {
            self.routed(method, client.client_name())
                .filter(|u| u.takes_batches_of(method))
                .cloned()
        });
        let (groups, single) = batch.into_parts();
        let singles =
            join_all(single.into_iter().map(|(i, item)| async move {
                vec![(i, self.handle(item, client, starts).await)]
            }));
        let groups = join_all(groups.into_iter().map(|group| {
            group.forward(self.cfg.request_timeout, |id, up, answer| {
                self.reply_for(id, up, answer)
            })
        }));
        let (singles, groups) = tokio::join!(singles, groups);
        let mut replies: Vec<(usize, Option<Message>)> =
            singles.into_iter().chain(groups).flatten().collect();
        replies.sort_by_key(|(i, _)| *i);
        replies.into_iter().filter_map(|(_, m)| m).collect()
    }

    /// The server span of one client request (OpenTelemetry RPC
    /// conventions; ids are recorded only when enabled).
    pub(crate) fn server_span(
        &self,
        parent: &tracing::Span,
        id: &WireId,
        method: &str,
    ) -> tracing::Span {
        let span = tracing::debug_span!(
            target: crate::telemetry::trace::RPC_TARGET,
            parent: parent,
            "rpc.server",
            otel.name = %format_args!("{} {method}", self.cfg.dialect.rpc_system()),
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            rpc.system = self.cfg.dialect.rpc_system(),
            rpc.method = %method,
            rpc.jsonrpc.version = "2.0",
            rpc.jsonrpc.request_id = tracing::field::Empty,
            rpc.jsonrpc.error_code = tracing::field::Empty,
            switchyard.dialect = self.cfg.dialect.as_str(),
            switchyard.listener = %self.cfg.name,
            switchyard.upstream = tracing::field::Empty,
        );
        if !span.is_disabled() && crate::telemetry::record_ids() {
            if let Some(token) = id.as_json() {
                span.record("rpc.jsonrpc.request_id", token);
            }
        }
        span
    }

    /// A client's reply to a request switchyard pushed to it. One that
    /// answers nothing is counted and dropped, except holon-rpc's id-only
    /// frame.
    fn client_reply(&self, reply: Message, client: &ClientLinks) -> Option<Message> {
        let (id, void) = match &reply {
            Message::Response { id, result } => (id.clone(), *result == Outcome::Void),
            Message::Error { id: Some(id), .. } => (id.clone(), false),
            _ => return None,
        };
        if client.pusher().settle(&id, Ok(reply)) || !void {
            return None;
        }
        // holon-rpc row 9: an id-only frame that answers nothing is an
        // invalid message. A Sideband `R` without `result` is a valid void
        // reply (sideband.md §6): with an unknown cid it is dropped like any
        // other reply (§10), and `settle` has counted it.
        client
            .pusher()
            .codec()
            .unmatched_void_is_invalid()
            .then(|| self.error_reply(id, &GatewayError::new(ErrorKind::InvalidRequest)))
    }

    /// An error reply to `id` in the listener's dialect, counted by the
    /// side that caused it.
    pub fn error_reply(&self, id: WireId, err: &GatewayError) -> Message {
        self.metrics.count_error(&self.cfg.name, err);
        Message::error(Some(id), errors::render(err, self.cfg.dialect))
    }

    async fn request(
        &self,
        id: WireId,
        method: &str,
        params: Option<&Payload>,
        client: &ClientLinks,
        starts: &Starts,
    ) -> Message {
        let who = client.client_name();
        if let Some(refusal) = self.refuse_request(&id, method, Peer(client.peer()), who) {
            return refusal;
        }
        if let Some(reply) = self.own_method(&id, method, params, client, starts).await {
            return reply;
        }
        let Some(upstream) = self.routed(method, who) else {
            self.count_request("none", RequestOutcome::Error(ErrorKind::MethodNotFound));
            let err = GatewayError::no_route(method);
            // `rpc.*` is switchyard's own namespace, never routed: an
            // unknown one is plainly not found.
            if method.starts_with("rpc.") {
                return self.error_reply(id, &err);
            }
            self.metrics.count_error(&self.cfg.name, &err);
            return Message::error(Some(id), errors::no_route_matched(method, self.cfg.dialect));
        };
        tracing::Span::current().record("switchyard.upstream", upstream.name());
        // One clock read: the request's start and its deadline.
        let now = TokioInstant::now();
        let (started, deadline) = (now.into_std(), now + self.cfg.request_timeout);
        let result = upstream
            .request(&id, method, params, deadline, client)
            .await;
        let elapsed = Instant::now().saturating_duration_since(started);
        self.finish(id, upstream, elapsed, result)
    }

    /// Serves one of the pub/sub or persistent methods (switchyard's own,
    /// never forwarded) for `client`, within its topic policy; `None` when
    /// `method` is not one of them.
    async fn own_method(
        &self,
        id: &WireId,
        method: &str,
        params: Option<&Payload>,
        client: &ClientLinks,
        starts: &Starts,
    ) -> Option<Message> {
        let pubsub = crate::pubsub::methods::is_pubsub(method);
        let asked = if pubsub {
            crate::pubsub::methods::requested(method, params)
        } else if crate::persist::methods::is_persistent(method) {
            crate::persist::methods::requested(method, params)
        } else {
            return None;
        };
        let peer = Peer(client.peer());
        if let Some(refusal) = self.refuse_topics(id, &asked, peer, client.client_name()) {
            return Some(refusal);
        }
        let (label, outcome) = if pubsub {
            (PUBSUB, self.events.serve(method, params, client))
        } else {
            let Some(persistent) = self.persistent.as_ref() else {
                let e = GatewayError::with_detail(
                    ErrorKind::MethodNotFound,
                    "persistent subscriptions are not enabled",
                );
                return Some(self.error_reply(id.clone(), &e));
            };
            (
                PERSISTENT,
                persistent.serve(method, params, client, starts).await,
            )
        };
        Some(self.own_reply(id, label, outcome))
    }

    async fn notification(
        &self,
        method: &str,
        params: Option<&Payload>,
        client: &ClientLinks,
    ) -> Option<Message> {
        let codec = client.pusher().codec();
        if let Some(pong) = codec.pong(method, self.cfg.answer_ping_notification) {
            return Some(pong);
        }
        let who = client.client_name();
        if self.refuse_notification(method, Peer(client.peer()), who) {
            return None;
        }
        let Some(upstream) = self.routed(method, who) else {
            self.count_dropped(DropReason::NoRoute);
            return None;
        };
        let deadline = TokioInstant::now() + self.cfg.request_timeout;
        let sent = upstream.notify(method, params, deadline, client).await;
        if let Err(e) = sent {
            tracing::debug!(listener = %self.cfg.name, upstream = upstream.name(), error = %e, "notification not delivered");
            self.count_dropped(DropReason::Undelivered(e.kind));
        }
        None
    }

    /// The upstream for a method; `rpc.*` methods and methods the
    /// policy of the client (`who`: its named client, `None` for the
    /// unnamed one) refuses are never forwarded. Every path to an upstream
    /// (in place, waiting, batch) asks here.
    pub(crate) fn routed(&self, method: &str, who: Option<&str>) -> Option<&Arc<Upstream>> {
        if method.starts_with("rpc.") || policy::forbidden(&self.cfg, method, who) {
            return None;
        }
        self.upstream_for(method)
    }

    /// The reply to a method switchyard serves itself (the pub/sub and
    /// persistent families), counted under `label`; `None` from the
    /// method table is an unknown `rpc.*` method.
    fn own_reply(
        &self,
        id: &WireId,
        label: &'static str,
        outcome: Option<Result<Payload, GatewayError>>,
    ) -> Message {
        match outcome {
            Some(Ok(result)) => {
                self.count_request(label, RequestOutcome::Ok);
                Message::Response {
                    id: id.clone(),
                    result: Outcome::Value(result),
                }
            }
            Some(Err(e)) => {
                self.count_request(label, RequestOutcome::Error(e.kind));
                self.error_reply(id.clone(), &e)
            }
            None => self.error_reply(id.clone(), &GatewayError::new(ErrorKind::MethodNotFound)),
        }
    }

    /// Records a request's duration (`elapsed`) and outcome and
    /// returns the client's reply, with the client's id.
    pub(crate) fn finish(
        &self,
        id: WireId,
        upstream: &Upstream,
        elapsed: std::time::Duration,
        result: Result<Message, GatewayError>,
    ) -> Message {
        let at = self
            .series
            .iter()
            .position(|(u, _)| std::ptr::eq(Arc::as_ptr(u), upstream));
        if let Some(at) = at {
            return self.finish_at(id, at, elapsed, result);
        }
        let labels = [self.cfg.name.as_str(), upstream.name()];
        self.metrics
            .request_duration
            .with_label_values(&labels)
            .observe_duration(elapsed);
        self.reply_for(id, upstream, result)
    }

    /// The upstream serving `method` for client `who` (see
    /// [`Self::routed`]) and where its series are: what a call settled in
    /// place keeps to be finished ([`Self::finish_at`]), rather than a
    /// handle of the upstream's own.
    pub(crate) fn routed_at(&self, method: &str, who: Option<&str>) -> Option<(usize, &Upstream)> {
        let up = self.routed(method, who)?;
        self.series
            .iter()
            .position(|(u, _)| Arc::ptr_eq(u, up))
            .map(|at| (at, &**up))
    }

    /// The upstream whose series are at `at` (see [`Self::routed_at`]).
    pub(crate) fn upstream_at(&self, at: usize) -> Option<&Arc<Upstream>> {
        self.series.get(at).map(|(u, _)| u)
    }

    /// [`Self::finish`] of a call to the upstream whose series are at `at`
    /// (see [`Self::routed_at`]).
    pub(crate) fn finish_at(
        &self,
        id: WireId,
        at: usize,
        elapsed: std::time::Duration,
        result: Result<Message, GatewayError>,
    ) -> Message {
        let Some((upstream, s)) = self.series.get(at) else {
            // Not one of this router's: never, `at` came from it.
            return self.error_reply(id, &GatewayError::new(ErrorKind::Internal));
        };
        s.duration.observe_duration(elapsed);
        match result {
            Ok(Message::Response { result, .. }) => {
                s.ok.inc();
                Message::Response { id, result }
            }
            result => self.reply_for(id, upstream, result),
        }
    }

    /// The client's reply for an upstream outcome, with the client's id.
    fn reply_for(
        &self,
        id: WireId,
        up: &Upstream,
        result: Result<Message, GatewayError>,
    ) -> Message {
        let upstream = up.name();
        match result {
            Ok(Message::Response { result, .. }) => {
                self.count_request(upstream, RequestOutcome::Ok);
                Message::Response { id, result }
            }
            Ok(Message::Error { error, .. }) => {
                self.count_request(upstream, RequestOutcome::UpstreamError);
                let error = errors::translate(&error, up.config().dialect, self.cfg.dialect);
                Message::Error {
                    id: Some(id),
                    error,
                }
            }
            Ok(_) => {
                self.count_request(upstream, RequestOutcome::Error(ErrorKind::Internal));
                self.error_reply(id, &GatewayError::new(ErrorKind::Internal))
            }
            Err(mut err) => {
                self.count_request(upstream, RequestOutcome::Error(err.kind));
                self.log_failure(upstream, &err);
                if err.kind == ErrorKind::Timeout {
                    let ms = self.cfg.request_timeout.as_millis();
                    err.detail = Some(format!("no reply from upstream within {ms} ms"));
                }
                self.error_reply(id, &err)
            }
        }
    }

    /// The reply to a request the policy refuses (counted and logged),
    /// or `None` when it may go on.
    fn refuse_request(
        &self,
        id: &WireId,
        method: &str,
        peer: Peer,
        who: Option<&str>,
    ) -> Option<Message> {
        if !policy::forbidden(&self.cfg, method, who) {
            return None;
        }
        self.log_refusal("request", method, peer, who);
        self.count_request("none", RequestOutcome::Forbidden);
        let err = GatewayError::with_detail(ErrorKind::Unauthorized, policy::DETAIL);
        Some(self.error_reply(id.clone(), &err))
    }

    /// True (and counted as dropped, and logged) when the policy refuses
    /// a notification.
    fn refuse_notification(&self, method: &str, peer: Peer, who: Option<&str>) -> bool {
        if !policy::forbidden(&self.cfg, method, who) {
            return false;
        }
        self.log_refusal("notification", method, peer, who);
        self.count_dropped(DropReason::Forbidden);
        true
    }

    /// The reply to a subscribe whose `patterns` the client's topic policy
    /// does not admit (counted and logged), or `None` when every pattern
    /// may be subscribed.
    fn refuse_topics(
        &self,
        id: &WireId,
        patterns: &[String],
        peer: Peer,
        who: Option<&str>,
    ) -> Option<Message> {
        if !policy::topics_refused(&self.cfg, patterns, who) {
            return None;
        }
        self.log_refusal("subscription", "rpc.subscribe", peer, who);
        self.count_request("none", RequestOutcome::Forbidden);
        let err = GatewayError::with_detail(ErrorKind::Unauthorized, policy::DETAIL);
        Some(self.error_reply(id.clone(), &err))
    }

    /// Tells the operator that the policy refused a `what` (`request` or
    /// `notification`): at `info`, at most one line per second per
    /// listener generation and kind, like every refusal switchyard decides.
    fn log_refusal(&self, what: &str, method: &str, peer: Peer, who: Option<&str>) {
        let Some(suppressed) = self.logs.admit(what) else {
            return;
        };
        tracing::info!(
            listener = %self.cfg.name,
            %peer,
            // The named client (empty: the listener's unnamed client).
            client = who.unwrap_or_default(),
            reason = policy::DETAIL,
            method,
            suppressed,
            "{what} refused"
        );
    }

    /// Tells the operator that requests fail because of the upstream
    /// (throttled: one line per upstream and outcome per second).
    fn log_failure(&self, upstream: &str, err: &GatewayError) {
        if err.side != Side::Upstream {
            return;
        }
        let outcome = err.kind.as_str();
        let Some(suppressed) = self.logs.admit(&format!("{upstream}\0{outcome}")) else {
            return;
        };
        tracing::warn!(
            listener = %self.cfg.name,
            upstream,
            outcome,
            suppressed,
            "requests answered {outcome}"
        );
    }

    fn count_request(&self, upstream: &str, outcome: RequestOutcome) {
        self.metrics
            .requests
            .with_label_values(&[self.cfg.name.as_str(), upstream, outcome.as_str()])
            .inc();
    }

    fn count_dropped(&self, reason: DropReason) {
        self.metrics
            .count_dropped(self.cfg.dialect, Side::Client, reason);
    }

    /// Counts a malformed client message.
    fn count_protocol_error(&self, reason: ProtocolError) {
        self.metrics
            .count_protocol_error(self.cfg.dialect, Side::Client, reason);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::dialect::Item;

    /// The size of the future `f` returns, without running it.
    fn future_size<A, F: std::future::Future>(_: impl FnOnce(A) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A request that waits for an upstream link (while the daemon
    /// restarts, every request does) is a task holding this future: it
    /// must not carry the large futures of rare paths (dialing a
    /// per-client link, opening a stream, the persistent store). Inline,
    /// they made it 6 KiB (8.4 KiB as a task in a release build), and a
    /// soak restart with ~300 such tasks swung RSS by several MiB.
    #[test]
    fn a_waiting_request_is_a_small_future() {
        let handle = future_size(
            |(r, i, c, s): (Arc<Router>, Item, ClientLinks, Starts)| async move {
                r.handle(i, &c, &s).await
            },
        );
        assert!(
            handle <= 3 * 1024,
            "Router::handle's future is {handle} bytes"
        );
    }
}
