//! Dispatching what a client sent. A single request is rate-checked and
//! admitted under an in-flight permit, then placed in place when its
//! upstream has room, or run in a task of its own. A batch is rate-checked
//! item by item (each request takes a permit, or is answered busy) and runs
//! in one task that answers it as one reply.

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::admission::Checked;
use super::in_place::NotPlaced;
use super::{Session, Verdict};
use crate::dialect::{Dialect, Item};
use crate::envelope::{raw_from_string, Message, Outcome, Payload};
use crate::error::{ErrorKind, GatewayError};
use crate::router::{ClientLinks, Route};
use crate::telemetry::metrics::Limit;

// === impl Session ===

impl Session {
    /// One message (not a batch): a request, a notification, a reply to a
    /// call switchyard made, or an item already answered with an error.
    pub(super) async fn single(&self, item: Item) -> Verdict {
        if let Item::Valid(Message::Request { id, method, .. }) = &item {
            if self.route.cfg.dialect == Dialect::Holon && method == "rpc.heartbeat" {
                // Answered at once: never routed, never queued, and never
                // counted against the rate limits (holon-rpc.md §10).
                let ok = Payload::Json(raw_from_string(String::from("{}")));
                let reply = Message::Response {
                    id: id.clone(),
                    result: Outcome::Value(ok),
                };
                self.send(&reply).await;
                return Verdict::Continue;
            }
        }
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
            Item::Valid(Message::Request { id, .. }) => match self.permit() {
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
            },
            _ => None,
        };
        self.spawn(item, permit)
    }

    /// Runs one item in a task of its own (the waiting path).
    fn spawn(&self, item: Item, permit: Option<OwnedSemaphorePermit>) -> Verdict {
        let (route, client, outbox) =
            (self.route.clone(), self.client.clone(), self.outbox.clone());
        let (gone, grace_over) = (self.gone.clone(), self.grace_over.clone());
        let task = async move {
            let Some(reply) = settle(&route, item, &client, &gone, &grace_over).await else {
                return;
            };
            // The in-flight slot is freed once the reply is queued.
            outbox.send(&reply).await;
            drop(permit);
        };
        self.tasks.spawn(task.instrument(self.parent.clone()));
        Verdict::Continue
    }

    /// A client batch, answered as one batch reply (nothing when it held
    /// only notifications).
    pub(super) async fn batch(&self, items: Vec<Item>) -> Verdict {
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
        let (route, client, outbox) =
            (self.route.clone(), self.client.clone(), self.outbox.clone());
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
            if !replies.is_empty() {
                outbox.send_batch(&replies).await;
            }
            // The in-flight slots are freed once the reply is queued.
            drop(permits);
        };
        self.tasks.spawn(task.instrument(span));
        Verdict::Continue
    }

    /// An in-flight permit, if the connection has one free.
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
