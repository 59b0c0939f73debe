//! One client connection's request handling, independent of the transport.
//!
//! The transport's reader hands every inbound text to [`Session::on_text`].
//! A request to a pooled upstream with room right now is placed at once,
//! with no task (`in_place`); every other request (or batch) runs in its
//! own task on the session's [`TaskTracker`]. Either way the reply goes
//! into the bounded outbox that the transport's writer drains. A full
//! outbox slows only this client. When the client goes away,
//! [`Session::abort`] cancels its tasks and its placed calls, which
//! abandons their gateway ids (late replies are then counted as stale,
//! never delivered). On shutdown, [`Session::drain`] lets requests finish
//! until the grace period ends; what is left is answered with
//! `unavailable`.

use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod admission;
mod in_place;

use admission::{deliver, Checked};
use in_place::{InPlace, NotPlaced};
use tracing::Instrument;

use std::net::{IpAddr, Ipv4Addr};

use crate::error::Side;
use crate::limits::rate::ConnectionRate;
use crate::telemetry::metrics::{Direction, Limit};

use super::Outgoing;
use parking_lot::Mutex;

use super::codec::{Form, OutCodec};
use super::sbp::{Sbp, SbpEvent};
use crate::dialect::render::Style;
use crate::dialect::{holon, jsonrpc, Dialect, Inbound, Item};
use crate::envelope::{raw_from_string, Message, Outcome, Payload};
use crate::error::{ErrorKind, GatewayError};
use crate::router::{ClientLinks, Pusher, Route};

/// Request handling state of one client connection.
#[derive(Debug)]
pub struct Session {
    route: Arc<Route>,
    codec: OutCodec,
    outbox: mpsc::Sender<Outgoing>,
    /// Requests in flight for this client (`max_in_flight`).
    in_flight: Arc<Semaphore>,
    tasks: TaskTracker,
    /// Cancelled when the client is gone: tasks stop without replying.
    gone: CancellationToken,
    /// Cancelled when the shutdown grace period is over.
    grace_over: CancellationToken,
    /// Dedicated upstream links and pushes of this client.
    client: Arc<ClientLinks>,
    /// The connection's span (it may carry a `traceparent` from the
    /// upgrade request): the parent of every request span.
    parent: tracing::Span,
    /// This connection's rate limits (`None` when none is configured).
    rate: Option<Mutex<ConnectionRate>>,
    /// Cancelled when the client's outbox stayed full too long.
    slow: CancellationToken,
    /// The listener's outbox high-water mark.
    high_water: prometheus::IntGauge,
    /// Requests settled in place (the fast path) and where they reply.
    in_place: Arc<InPlace>,
}

/// What the transport must do after an inbound text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Keep reading.
    Continue,
    /// Close the connection with this code (the close frame is queued).
    Close(u16),
}

// === impl Session ===

impl Session {
    /// A session replying through `outbox`.
    pub fn new(
        route: Arc<Route>,
        outbox: mpsc::Sender<Outgoing>,
        grace_over: CancellationToken,
    ) -> Self {
        let d = route.cfg.dialect;
        let form = match d {
            Dialect::Ndjson => Form::Text(d, Style::Line),
            Dialect::Holon => Form::Text(d, Style::Holon),
            Dialect::JsonRpc => Form::Text(d, Style::Frame),
            Dialect::Sideband => Form::Sideband(Arc::new(Mutex::new(
                Sbp::new(route.cfg.sideband_cbor).with_subjects(
                    route.cfg.sideband_legacy_subjects,
                    route.cfg.sideband_reject_app,
                ),
            ))),
        };
        let codec = OutCodec::new(form, route.metrics().clone());
        let high_water = route
            .metrics()
            .outbox_high_water
            .with_label_values(&[route.cfg.name.as_str()]);
        let pusher = Pusher::new(
            codec.clone(),
            outbox.clone(),
            route.cfg.max_unanswered_pushes,
            route.cfg.request_timeout,
            route.metrics().clone(),
        );
        let slow = CancellationToken::new();
        let in_place = InPlace::new(
            outbox.clone(),
            codec.clone(),
            route.cfg.protection.slow_consumer_timeout,
            slow.clone(),
            high_water.clone(),
        );
        Session {
            in_flight: Arc::new(Semaphore::new(route.cfg.max_in_flight)),
            route,
            codec,
            outbox,
            tasks: TaskTracker::new(),
            gone: CancellationToken::new(),
            grace_over,
            client: Arc::new(ClientLinks::new(pusher)),
            parent: tracing::Span::current(),
            rate: None,
            slow,
            high_water,
            in_place,
        }
        .with_peer(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    /// Keys the per-IP rate limit on the client's address.
    pub fn with_peer(mut self, ip: IpAddr) -> Self {
        self.rate = (!self.route.rate.is_off()).then(|| Mutex::new(self.route.rate.connection(ip)));
        self
    }

    /// Handles one inbound text frame or line.
    pub async fn on_text(&self, text: &str) -> Verdict {
        let inbound = match self.route.cfg.dialect {
            Dialect::Holon => holon::decode(text),
            _ => jsonrpc::decode(text, self.route.cfg.max_batch_items),
        };
        self.count_in(text.len(), &inbound);
        match inbound {
            Inbound::Rejected(reply) => {
                self.route.count_protocol_error("rejected_message");
                self.send(&reply).await;
            }
            Inbound::Close(code, reason) => {
                self.route.count_protocol_error("fatal_message");
                // The writer is gone only when the connection is closing.
                let _ = self.outbox.send(Outgoing::Close(code, reason.into())).await;
                return Verdict::Close(code);
            }
            Inbound::Single(item) => return self.single(item).await,
            Inbound::Batch(items) => return self.batch(items).await,
        }
        Verdict::Continue
    }

    /// Counts an inbound frame and its messages (and a batch's size).
    fn count_in(&self, bytes: usize, inbound: &Inbound) {
        let (m, d) = (self.route.metrics(), self.route.cfg.dialect);
        m.count_frame(d, Side::Client, Direction::In, bytes);
        let count = |item: &Item| {
            if let Item::Valid(msg) = item {
                m.count_message(d, Side::Client, Direction::In, msg.kind());
            }
        };
        match inbound {
            Inbound::Single(item) => count(item),
            Inbound::Batch(items) => {
                m.observe_batch(&self.route.cfg.name, items.len());
                items.iter().for_each(count);
            }
            Inbound::Rejected(_) | Inbound::Close(..) => {}
        }
    }

    /// Queues a reply rendered by the session's codec.
    pub async fn send(&self, msg: &Message) {
        if let Some(out) = self.codec.encode(msg) {
            // The writer is gone only when the connection is closing.
            deliver(
                &self.outbox,
                out,
                self.route.cfg.protection.slow_consumer_timeout,
                &self.slow,
                &self.high_water,
            )
            .await;
        }
    }

    /// The frames to send when the connection opens (Sideband handshake).
    pub fn greeting(&self) -> Option<Outgoing> {
        match &self.codec.form {
            Form::Sideband(sbp) => Some(Outgoing::Binary(sbp.lock().hello())),
            Form::Text(..) => None,
        }
    }

    /// True while a Sideband peer has not sent its handshake.
    pub fn negotiating(&self) -> bool {
        matches!(&self.codec.form, Form::Sideband(sbp) if !sbp.lock().ready())
    }

    /// Handles one inbound binary frame (Sideband).
    pub async fn on_binary(&self, bytes: &[u8]) -> Verdict {
        let Form::Sideband(sbp) = &self.codec.form else {
            return Verdict::Close(1003);
        };
        let metrics = self.route.metrics();
        metrics.count_frame(Dialect::Sideband, Side::Client, Direction::In, bytes.len());
        let event = sbp.lock().on_frame(bytes);
        if let SbpEvent::Rpc(msg) = &event {
            metrics.count_message(Dialect::Sideband, Side::Client, Direction::In, msg.kind());
        }
        match event {
            SbpEvent::Nothing | SbpEvent::Ready => {}
            SbpEvent::Dropped(reason) => self.route.count_dropped_client(reason),
            SbpEvent::Send(frame) => {
                // The writer is gone only when the connection is closing.
                let _ = self.outbox.send(Outgoing::Binary(frame)).await;
            }
            SbpEvent::Rpc(msg) => return self.single(Item::Valid(msg)).await,
            SbpEvent::PeerError { code, message, .. } => {
                tracing::debug!(listener = %self.route.cfg.name, code, message, "ErrorFrame from client");
                self.route.count_protocol_error("peer_error_frame");
            }
            SbpEvent::Close {
                frame,
                code,
                reason,
            } => {
                self.route.count_protocol_error("fatal_frame");
                if let Some(frame) = frame {
                    let _ = self.outbox.send(Outgoing::Binary(frame)).await;
                }
                let _ = self.outbox.send(Outgoing::Close(code, reason)).await;
                return Verdict::Close(code);
            }
        }
        Verdict::Continue
    }

    /// Fires when the client's outbox stayed full for the slow-consumer
    /// timeout: the transport closes it (1008).
    pub fn slow_consumer(&self) -> CancellationToken {
        self.slow.clone()
    }

    /// Fires when a dedicated upstream link dropped: close the client.
    pub fn upstream_lost(&self) -> CancellationToken {
        self.client.lost().clone()
    }

    /// The client is gone: stop every task without replying.
    pub async fn abort(&self) {
        self.gone.cancel();
        self.tasks.close();
        self.in_place.abandon_all();
        self.client.close().await;
    }

    /// Waits for the requests in flight; once the grace period is over,
    /// what is left is answered `unavailable`. Then closes dedicated links.
    pub async fn drain(&self) {
        self.tasks.close();
        // Every in-flight slot back means every request answered.
        let all = u32::try_from(self.route.cfg.max_in_flight).unwrap_or(u32::MAX);
        tokio::select! {
            _ = self.in_flight.acquire_many(all) => {}
            () = self.grace_over.cancelled() => self.in_place.fail_all(),
        }
        self.tasks.wait().await;
        self.client.close().await;
    }

    /// Requests in flight right now.
    pub fn in_flight(&self) -> usize {
        self.route.cfg.max_in_flight - self.in_flight.available_permits()
    }

    async fn single(&self, item: Item) -> Verdict {
        let item = match self.rate_check(item) {
            Ok(Checked::Pass(item)) => item,
            Ok(Checked::Limited(reply)) => {
                // Answered at once, in order with what follows.
                self.send(&reply).await;
                return Verdict::Continue;
            }
            Ok(Checked::Dropped) => return Verdict::Continue,
            Err(verdict) => return verdict,
        };
        let permit = match &item {
            Item::Valid(Message::Request { id, method, .. }) => {
                if self.route.cfg.dialect == Dialect::Holon && method == "rpc.heartbeat" {
                    // Answered at once, never routed, never queued.
                    let ok = Payload::Json(raw_from_string(String::from("{}")));
                    let reply = Message::Response {
                        id: id.clone(),
                        result: Outcome::Value(ok),
                    };
                    self.send(&reply).await;
                    return Verdict::Continue;
                }
                match self.permit() {
                    Some(permit) => {
                        let Item::Valid(Message::Request { id, method, params }) = item else {
                            return Verdict::Continue;
                        };
                        let req = NotPlaced {
                            id,
                            method,
                            params,
                            permit,
                        };
                        match self.in_place.place(&self.route, &self.parent, req) {
                            Ok(()) => return Verdict::Continue,
                            Err(req) => {
                                return self.spawn(
                                    Item::Valid(Message::Request {
                                        id: req.id,
                                        method: req.method,
                                        params: req.params,
                                    }),
                                    Some(req.permit),
                                )
                            }
                        }
                    }
                    None => {
                        self.route
                            .metrics()
                            .count_limit(&self.route.cfg.name, Limit::MaxInFlight);
                        let reply = self.route.error_reply(id.clone(), &busy());
                        self.send(&reply).await;
                        return Verdict::Continue;
                    }
                }
            }
            _ => None,
        };
        self.spawn(item, permit)
    }

    /// Runs one item in a task of its own (the waiting path).
    fn spawn(&self, item: Item, permit: Option<OwnedSemaphorePermit>) -> Verdict {
        let route = self.route.clone();
        let (outbox, codec, client) =
            (self.outbox.clone(), self.codec.clone(), self.client.clone());
        let (gone, grace_over) = (self.gone.clone(), self.grace_over.clone());
        let (slow, slow_after) = (
            self.slow.clone(),
            self.route.cfg.protection.slow_consumer_timeout,
        );
        let high_water = self.high_water.clone();
        let task = async move {
            let Some(reply) = settle(&route, item, &client, &gone, &grace_over).await else {
                return;
            };
            drop(permit);
            if let Some(out) = codec.encode(&reply) {
                // Closed outbox: the client left while we worked.
                deliver(&outbox, out, slow_after, &slow, &high_water).await;
            }
        };
        self.tasks.spawn(task.instrument(self.parent.clone()));
        Verdict::Continue
    }

    async fn batch(&self, items: Vec<Item>) -> Verdict {
        let mut permits = Vec::new();
        let mut request_ids = Vec::new();
        let mut checked = Vec::with_capacity(items.len());
        for item in items {
            // Every batch item counts against the rate limits.
            match self.rate_check(item) {
                Ok(Checked::Pass(item)) => checked.push(item),
                Ok(Checked::Limited(reply)) => checked.push(Item::Invalid(reply)),
                Ok(Checked::Dropped) => {}
                Err(verdict) => return verdict,
            }
        }
        let items: Vec<Item> = checked
            .into_iter()
            .map(|item| match &item {
                Item::Valid(Message::Request { id, .. }) => match self.permit() {
                    Some(p) => {
                        permits.push(p);
                        request_ids.push(id.clone());
                        item
                    }
                    None => {
                        self.route
                            .metrics()
                            .count_limit(&self.route.cfg.name, Limit::MaxInFlight);
                        Item::Invalid(self.route.error_reply(id.clone(), &busy()))
                    }
                },
                _ => item,
            })
            .collect();
        let route = self.route.clone();
        let (outbox, codec, client) =
            (self.outbox.clone(), self.codec.clone(), self.client.clone());
        let (gone, grace_over) = (self.gone.clone(), self.grace_over.clone());
        let (slow, slow_after) = (
            self.slow.clone(),
            self.route.cfg.protection.slow_consumer_timeout,
        );
        let high_water = self.high_water.clone();
        let span = tracing::info_span!(parent: &self.parent, "rpc.batch", otel.kind = "server", rpc.batch.size = request_ids.len());
        let task = async move {
            let replies = tokio::select! {
                replies = route.handle_batch(items, &client) => replies,
                () = gone.cancelled() => return,
                () = grace_over.cancelled() => {
                    let err = GatewayError::with_detail(ErrorKind::Unavailable, "switchyard is shutting down");
                    request_ids.into_iter().map(|id| route.error_reply(id, &err)).collect()
                }
            };
            drop(permits);
            if replies.is_empty() {
                return;
            }
            if let Some(out) = codec.encode_batch(&replies) {
                // Closed outbox: the client left while we worked.
                deliver(&outbox, out, slow_after, &slow, &high_water).await;
            }
        };
        self.tasks.spawn(task.instrument(span));
        Verdict::Continue
    }

    fn permit(&self) -> Option<OwnedSemaphorePermit> {
        self.in_flight.clone().try_acquire_owned().ok()
    }
}

/// Runs one item to its reply, unless the client leaves; after the grace
/// period a request still in flight is answered `unavailable`.
async fn settle(
    route: &Route,
    item: Item,
    client: &ClientLinks,
    gone: &CancellationToken,
    grace_over: &CancellationToken,
) -> Option<Message> {
    let id = match &item {
        Item::Valid(Message::Request { id, .. }) => Some(id.clone()),
        _ => None,
    };
    tokio::select! {
        reply = route.handle(item, client) => reply,
        () = gone.cancelled() => None,
        () = grace_over.cancelled() => {
            let err = GatewayError::with_detail(ErrorKind::Unavailable, "switchyard is shutting down");
            id.map(|id| route.error_reply(id, &err))
        }
    }
}

fn busy() -> GatewayError {
    GatewayError::with_detail(
        ErrorKind::ResourceExhausted,
        "too many requests in flight on this connection",
    )
}
