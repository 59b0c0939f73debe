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

mod batch;
pub mod client;
mod events;
pub(crate) mod in_place;
mod outcome;
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
    /// The pub/sub broker every listener shares.
    broker: Arc<crate::pubsub::Broker>,
    /// The persistent-subscription hub every listener shares (`None`: the
    /// persistent methods are not served).
    hub: Option<Arc<crate::persist::hub::Hub>>,
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
            broker,
            hub: None,
            table,
            metrics,
            series,
            logs: crate::throttle::Throttle::new(LOG_PERIOD),
        }
    }

    /// Serves the persistent methods from `hub`.
    pub fn with_hub(mut self, hub: Arc<crate::persist::hub::Hub>) -> Self {
        self.hub = Some(hub);
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
        if crate::telemetry::record_ids() {
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
        if let Some(reply) = self.pubsub(&id, method, params, client) {
            return reply;
        }
        if let Some(reply) = self.persistent(&id, method, params, client, starts).await {
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
        let started = Instant::now();
        let deadline = TokioInstant::now() + self.cfg.request_timeout;
        let result = upstream
            .request(&id, method, params, deadline, client)
            .await;
        self.finish(id, upstream, started, result)
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
        if method.starts_with("rpc.") || self.forbidden(method, who) {
            return None;
        }
        self.upstream_for(method)
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

    /// The metrics handle.
    fn metrics(&self) -> &Metrics {
        &self.metrics
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
