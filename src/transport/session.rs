//! One client connection's request handling, independent of the transport.
//!
//! The transport's reader hands every inbound text to [`Session::on_text`];
//! each request (or batch) runs in its own task on the session's
//! [`TaskTracker`] and puts its reply into the bounded outbox that the
//! transport's writer drains. A full outbox slows only this client. When the
//! client goes away, [`Session::abort`] cancels its tasks, which abandons
//! their gateway ids (late replies are then counted as stale, never
//! delivered). On shutdown, [`Session::drain`] lets tasks finish until the
//! grace period ends; what is left is answered with `unavailable`.

use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::Outgoing;
use parking_lot::Mutex;

use super::codec::OutCodec;
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
}

/// What the transport must do after an inbound text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Keep reading.
    Continue,
    /// Close the connection with this code and reason (already queued).
    Close(u16, &'static str),
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
        let codec = match d {
            Dialect::Ndjson => OutCodec::Text(d, Style::Line),
            Dialect::Holon => OutCodec::Text(d, Style::Holon),
            Dialect::JsonRpc => OutCodec::Text(d, Style::Frame),
            Dialect::Sideband => {
                OutCodec::Sideband(Arc::new(Mutex::new(Sbp::new(route.cfg.sideband_cbor))))
            }
        };
        let pusher = Pusher::new(
            codec.clone(),
            outbox.clone(),
            route.cfg.max_unanswered_pushes,
            route.cfg.request_timeout,
            route.metrics().clone(),
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
        }
    }

    /// Handles one inbound text frame or line.
    pub async fn on_text(&self, text: &str) -> Verdict {
        let inbound = match self.route.cfg.dialect {
            Dialect::Holon => holon::decode(text),
            _ => jsonrpc::decode(text, self.route.cfg.max_batch_items),
        };
        match inbound {
            Inbound::Rejected(reply) => {
                self.route.count_protocol_error("rejected_message");
                self.send(&reply).await;
            }
            Inbound::Close(code, reason) => {
                self.route.count_protocol_error("fatal_message");
                // The writer is gone only when the connection is closing.
                let _ = self.outbox.send(Outgoing::Close(code, reason)).await;
                return Verdict::Close(code, reason);
            }
            Inbound::Single(item) => self.single(item).await,
            Inbound::Batch(items) => self.batch(items),
        }
        Verdict::Continue
    }

    /// Queues a reply rendered by the session's codec.
    pub async fn send(&self, msg: &Message) {
        if let Some(out) = self.codec.encode(msg) {
            // The writer is gone only when the connection is closing.
            let _ = self.outbox.send(out).await;
        }
    }

    /// The frames to send when the connection opens (Sideband handshake).
    pub fn greeting(&self) -> Option<Outgoing> {
        match &self.codec {
            OutCodec::Sideband(sbp) => Some(Outgoing::Binary(sbp.lock().hello())),
            OutCodec::Text(..) => None,
        }
    }

    /// True while a Sideband peer has not sent its handshake.
    pub fn negotiating(&self) -> bool {
        matches!(&self.codec, OutCodec::Sideband(sbp) if !sbp.lock().ready())
    }

    /// Handles one inbound binary frame (Sideband).
    pub async fn on_binary(&self, bytes: &[u8]) -> Verdict {
        let OutCodec::Sideband(sbp) = &self.codec else {
            return Verdict::Close(1003, "binary frames are not supported");
        };
        let event = sbp.lock().on_frame(bytes);
        match event {
            SbpEvent::Nothing | SbpEvent::Ready => {}
            SbpEvent::Send(frame) => {
                // The writer is gone only when the connection is closing.
                let _ = self.outbox.send(Outgoing::Binary(frame)).await;
            }
            SbpEvent::Rpc(msg) => self.single(Item::Valid(msg)).await,
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
                return Verdict::Close(code, reason);
            }
        }
        Verdict::Continue
    }

    /// Fires when a dedicated upstream link dropped: close the client.
    pub fn upstream_lost(&self) -> CancellationToken {
        self.client.lost().clone()
    }

    /// The client is gone: stop every task without replying.
    pub async fn abort(&self) {
        self.gone.cancel();
        self.tasks.close();
        self.client.close().await;
    }

    /// Waits for the tasks in flight (they answer `unavailable` once the
    /// grace period is over), then closes dedicated links.
    pub async fn drain(&self) {
        self.tasks.close();
        self.tasks.wait().await;
        self.client.close().await;
    }

    /// Requests in flight right now.
    pub fn in_flight(&self) -> usize {
        self.route.cfg.max_in_flight - self.in_flight.available_permits()
    }

    async fn single(&self, item: Item) {
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
                    return;
                }
                match self.permit() {
                    Some(p) => Some(p),
                    None => {
                        let reply = self.route.error_reply(id.clone(), &busy());
                        self.send(&reply).await;
                        return;
                    }
                }
            }
            _ => None,
        };
        let route = self.route.clone();
        let (outbox, codec, client) =
            (self.outbox.clone(), self.codec.clone(), self.client.clone());
        let (gone, grace_over) = (self.gone.clone(), self.grace_over.clone());
        let task = async move {
            let Some(reply) = settle(&route, item, &client, &gone, &grace_over).await else {
                return;
            };
            drop(permit);
            if let Some(out) = codec.encode(&reply) {
                // Closed outbox: the client left while we worked.
                let _ = outbox.send(out).await;
            }
        };
        self.tasks.spawn(task.instrument(self.parent.clone()));
    }

    fn batch(&self, items: Vec<Item>) {
        let mut permits = Vec::new();
        let mut request_ids = Vec::new();
        let items: Vec<Item> = items
            .into_iter()
            .map(|item| match &item {
                Item::Valid(Message::Request { id, .. }) => match self.permit() {
                    Some(p) => {
                        permits.push(p);
                        request_ids.push(id.clone());
                        item
                    }
                    None => Item::Invalid(self.route.error_reply(id.clone(), &busy())),
                },
                _ => item,
            })
            .collect();
        let route = self.route.clone();
        let (outbox, codec, client) =
            (self.outbox.clone(), self.codec.clone(), self.client.clone());
        let (gone, grace_over) = (self.gone.clone(), self.grace_over.clone());
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
                let _ = outbox.send(out).await;
            }
        };
        self.tasks.spawn(task.instrument(span));
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
