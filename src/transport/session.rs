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

use crate::dialect::jsonrpc::{decode, Inbound, Item};
use crate::dialect::render::{render, render_batch, Style};
use crate::envelope::Message;
use crate::error::{ErrorKind, GatewayError};
use crate::router::Route;

/// What the writer of a connection sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// One text frame / NDJSON line.
    Text(String),
    /// A WebSocket ping (liveness check).
    Ping,
    /// Close the connection with this code and reason.
    Close(u16, &'static str),
}

/// Request handling state of one client connection.
#[derive(Debug)]
pub struct Session {
    route: Arc<Route>,
    style: Style,
    outbox: mpsc::Sender<Outgoing>,
    /// Requests in flight for this client (`max_in_flight`).
    in_flight: Arc<Semaphore>,
    tasks: TaskTracker,
    /// Cancelled when the client is gone: tasks stop without replying.
    gone: CancellationToken,
    /// Cancelled when the shutdown grace period is over.
    grace_over: CancellationToken,
}

// === impl Session ===

impl Session {
    /// A session replying through `outbox`.
    pub fn new(
        route: Arc<Route>,
        style: Style,
        outbox: mpsc::Sender<Outgoing>,
        grace_over: CancellationToken,
    ) -> Self {
        let in_flight = Arc::new(Semaphore::new(route.cfg.max_in_flight));
        Session {
            route,
            style,
            outbox,
            in_flight,
            tasks: TaskTracker::new(),
            gone: CancellationToken::new(),
            grace_over,
        }
    }

    /// Handles one inbound text frame or line.
    pub async fn on_text(&self, text: &str) {
        match decode(text, self.route.cfg.max_batch_items) {
            Inbound::Rejected(reply) => {
                self.route.count_protocol_error("rejected_message");
                self.send(&reply).await;
            }
            Inbound::Single(item) => self.single(item).await,
            Inbound::Batch(items) => self.batch(items),
        }
    }

    /// Queues a reply rendered by the session's style.
    pub async fn send(&self, msg: &Message) {
        if let Ok(text) = render(msg, self.style) {
            // The writer is gone only when the connection is closing.
            let _ = self.outbox.send(Outgoing::Text(text)).await;
        }
    }

    /// The client is gone: stop every task without replying.
    pub fn abort(&self) {
        self.gone.cancel();
        self.tasks.close();
    }

    /// Waits for the tasks in flight (they answer `unavailable` once the
    /// grace period is over).
    pub async fn drain(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Requests in flight right now.
    pub fn in_flight(&self) -> usize {
        self.route.cfg.max_in_flight - self.in_flight.available_permits()
    }

    async fn single(&self, item: Item) {
        let permit = match &item {
            Item::Valid(Message::Request { id, .. }) => match self.permit() {
                Some(p) => Some(p),
                None => {
                    let reply = self.route.error_reply(id.clone(), &busy());
                    self.send(&reply).await;
                    return;
                }
            },
            _ => None,
        };
        let route = self.route.clone();
        let (outbox, style) = (self.outbox.clone(), self.style);
        let (gone, grace_over) = (self.gone.clone(), self.grace_over.clone());
        self.tasks.spawn(async move {
            let Some(reply) = settle(&route, item, &gone, &grace_over).await else {
                return;
            };
            drop(permit);
            if let Ok(text) = render(&reply, style) {
                // Closed outbox: the client left while we worked.
                let _ = outbox.send(Outgoing::Text(text)).await;
            }
        });
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
        let (outbox, style) = (self.outbox.clone(), self.style);
        let (gone, grace_over) = (self.gone.clone(), self.grace_over.clone());
        self.tasks.spawn(async move {
            let replies = tokio::select! {
                replies = route.handle_batch(items) => replies,
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
            if let Ok(text) = render_batch(&replies, style) {
                // Closed outbox: the client left while we worked.
                let _ = outbox.send(Outgoing::Text(text)).await;
            }
        });
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
    gone: &CancellationToken,
    grace_over: &CancellationToken,
) -> Option<Message> {
    let id = match &item {
        Item::Valid(Message::Request { id, .. }) => Some(id.clone()),
        _ => None,
    };
    tokio::select! {
        reply = route.handle(item) => reply,
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
