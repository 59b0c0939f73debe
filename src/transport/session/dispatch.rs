//! Dispatching what a client sent, and its admission under the rate
//! limits (a request over a limit is answered, a notification dropped, an
//! abuser closed; each logged, throttled per listener and reason).
//!
//! A single request is rate-checked and admitted under an in-flight
//! permit, then handed to its pooled upstream from the reader (written
//! now, or parked there until there is room: no task either way), or run
//! in a task of its own (per-client and streaming upstreams,
//! notifications, the methods switchyard serves itself). A batch is
//! rate-checked item by item (each request takes a permit) and runs in one
//! task that answers it as one reply. At the connection's in-flight cap the reader
//! waits for a slot: the client is no longer read (TCP back-pressure)
//! instead of being refused.

use std::net::{IpAddr, Ipv4Addr};

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Session, Verdict};
use crate::close::CloseCode;
use crate::dialect::Item;
use crate::envelope::Message;
use crate::error::{ErrorKind, GatewayError};
use crate::limits::rate::{Limited, Verdict as RateVerdict};
use crate::router::in_place::NotPlaced;
use crate::router::{ClientLinks, Router, Starts};
use crate::telemetry::metrics::{DropReason, Limit};

/// An item after the rate limits.
enum Checked {
    /// Within the limits.
    Pass(Item),
    /// A request over a limit: answer it with this error.
    Limited(Message),
    /// A notification over a limit: dropped (counted).
    Dropped,
}

// === impl Session ===

impl Session {
    /// One message (not a batch): a request, a notification, a reply to a
    /// call switchyard made, or an item already answered with an error.
    pub(super) async fn single(&self, item: Item) -> Verdict {
        if let Item::Valid(msg @ Message::Request { .. }) = &item {
            // holon-rpc's heartbeat is answered at once: never routed, never
            // queued, and never counted against the rate limits
            // (holon-rpc.md §10). (A `ping` notification is answered by the
            // router, after the rate limits.)
            if let Some(reply) = self.codec().local_reply(msg, false) {
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
        match item {
            Item::Valid(Message::Request { id, method, params }) => {
                let permit = match self.permits(1).await {
                    Ok(permit) => permit,
                    Err(NoSlot::ShuttingDown) => {
                        self.send(&self.router().error_reply(id, &shutting_down()))
                            .await;
                        return Verdict::Continue;
                    }
                    // Being closed: nobody reads the answer.
                    Err(NoSlot::Slow) => return Verdict::Continue,
                };
                let req = NotPlaced {
                    id,
                    method,
                    params,
                    permit,
                };
                match self
                    .in_place
                    .place(self.listener().router(), &self.parent, req)
                {
                    Ok(()) => Verdict::Continue,
                    Err(req) => self.spawn(
                        Item::Valid(Message::Request {
                            id: req.id,
                            method: req.method,
                            params: req.params,
                        }),
                        Some(req.permit),
                    ),
                }
            }
            item => self.spawn(item, None),
        }
    }

    /// Runs one item in a task of its own (the task path).
    fn spawn(&self, item: Item, permit: Option<OwnedSemaphorePermit>) -> Verdict {
        let (router, client, outbox) = (self.router(), self.client.clone(), self.outbox.clone());
        let (gone, grace_over) = (self.gone.clone(), self.grace_over.clone());
        let task = async move {
            let starts = Starts::default();
            let Some(reply) = settle(&router, item, &client, &starts, &gone, &grace_over).await
            else {
                return;
            };
            // The in-flight slot is freed once the reply is queued, and the
            // persistent subscriptions it opened start delivering.
            outbox.send(&reply).await;
            starts.release();
            drop(permit);
        };
        self.tasks.spawn(task.instrument(self.parent.clone()));
        Verdict::Continue
    }

    /// A client batch, answered as one batch reply (nothing when it held
    /// only notifications).
    pub(super) async fn batch(&self, items: Vec<Item>) -> Verdict {
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
        let request_ids: Vec<_> = checked
            .iter()
            .filter_map(|item| match item {
                Item::Valid(Message::Request { id, .. }) => Some(id.clone()),
                _ => None,
            })
            .collect();
        let items = checked;
        // One slot per request, at most the whole cap (a batch larger than
        // the cap runs under all of it).
        let wanted = request_ids.len().min(self.max_in_flight);
        let permits = if wanted == 0 {
            None
        } else {
            match self.permits(wanted).await {
                Ok(p) => Some(p),
                Err(NoSlot::Slow) => return Verdict::Continue,
                Err(NoSlot::ShuttingDown) => {
                    let err = shutting_down();
                    let replies: Vec<Message> = request_ids
                        .into_iter()
                        .map(|id| self.router().error_reply(id, &err))
                        .collect();
                    self.outbox.send_batch(&replies).await;
                    return Verdict::Continue;
                }
            }
        };
        let (router, client, outbox) = (self.router(), self.client.clone(), self.outbox.clone());
        let (gone, grace_over) = (self.gone.clone(), self.grace_over.clone());
        let span = tracing::debug_span!(target: crate::telemetry::trace::RPC_TARGET, parent: &self.parent, "rpc.batch", otel.kind = "server", rpc.batch.size = request_ids.len());
        let task = async move {
            let starts = Starts::default();
            let replies = tokio::select! {
                replies = router.handle_batch(items, &client, &starts) => replies,
                () = gone.cancelled() => return,
                () = grace_over.cancelled() => {
                    let err = shutting_down();
                    request_ids.into_iter().map(|id| router.error_reply(id, &err)).collect()
                }
            };
            if !replies.is_empty() {
                outbox.send_batch(&replies).await;
            }
            // The in-flight slots are freed once the reply is queued, and
            // the persistent subscriptions it opened start delivering.
            starts.release();
            drop(permits);
        };
        self.tasks.spawn(task.instrument(span));
        Verdict::Continue
    }

    /// `n` in-flight slots. At the connection's cap the reader waits here,
    /// so the client is no longer read (TCP back-pressure) until a reply
    /// frees a slot.
    async fn permits(&self, n: usize) -> Result<OwnedSemaphorePermit, NoSlot> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        if let Ok(permit) = self.in_flight.clone().try_acquire_many_owned(n) {
            return Ok(permit);
        }
        self.listener().count_limit(Limit::MaxInFlight);
        tokio::select! {
            permit = self.in_flight.clone().acquire_many_owned(n) => {
                permit.map_err(|_| NoSlot::ShuttingDown)
            }
            () = self.grace_over.cancelled() => Err(NoSlot::ShuttingDown),
            () = self.outbox.slow().cancelled() => Err(NoSlot::Slow),
        }
    }

    /// Charges a request or notification against the rate limits. Over a
    /// limit, a request becomes its `rate_limited` error reply and a
    /// notification is dropped (`Ok(None)`), counted; past the abuse
    /// threshold the connection is closed (1008).
    fn rate_check(&self, item: Item) -> Result<Checked, Verdict> {
        let (Item::Valid(Message::Request { method, .. })
        | Item::Valid(Message::Notification { method, .. })) = &item
        else {
            return Ok(Checked::Pass(item));
        };
        let listener = self.listener();
        if listener.rate().is_off() {
            return Ok(Checked::Pass(item));
        }
        let verdict = {
            let mut rate = self.rate.lock();
            // First use, or the listener's rates changed in a reload: this
            // connection's own bucket starts over under the new ones.
            let rate = match &mut *rate {
                Some(r) if r.follows(listener.rate()) => r,
                slot => slot.insert(listener.rate().connection_of(
                    self.peer.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                    self.client.client_name(),
                )),
            };
            rate.check(method)
        };
        let limited = match verdict {
            RateVerdict::Allow => return Ok(Checked::Pass(item)),
            RateVerdict::Limit(l) | RateVerdict::Abuse(l) => l,
        };
        listener.count_limit(limit_label(limited));
        if let RateVerdict::Abuse(_) = verdict {
            let reason = "rate limit exceeded";
            listener.log_closed(CloseCode::PolicyViolation, reason, self.peer());
            // Closing anyway: a client that is not reading is cut off
            // without the close frame.
            self.outbox.try_close(CloseCode::PolicyViolation, reason);
            return Err(Verdict::Close(CloseCode::PolicyViolation));
        }
        listener.log_refused_request(refusal_reason(limited), self.peer());
        match item {
            Item::Valid(Message::Request { id, .. }) => {
                let err = GatewayError::with_detail(ErrorKind::RateLimited, limited.as_str());
                Ok(Checked::Limited(listener.router().error_reply(id, &err)))
            }
            _ => {
                listener.count_dropped(DropReason::RateLimited);
                Ok(Checked::Dropped)
            }
        }
    }
}

/// Runs one item to its reply, unless the client leaves; after the grace
/// period a request still in flight is answered `unavailable`.
async fn settle(
    router: &Router,
    item: Item,
    client: &ClientLinks,
    starts: &Starts,
    gone: &CancellationToken,
    grace_over: &CancellationToken,
) -> Option<Message> {
    let id = match &item {
        Item::Valid(Message::Request { id, .. }) => Some(id.clone()),
        _ => None,
    };
    tokio::select! {
        reply = router.handle(item, client, starts) => reply,
        () = gone.cancelled() => None,
        () = grace_over.cancelled() => {
            id.map(|id| router.error_reply(id, &shutting_down()))
        }
    }
}

/// Why a request got no in-flight slot.
enum NoSlot {
    /// The shutdown grace period is over.
    ShuttingDown,
    /// The client stopped reading and is being closed.
    Slow,
}

fn shutting_down() -> GatewayError {
    GatewayError::with_detail(ErrorKind::Unavailable, "switchyard is shutting down")
        .on(crate::error::Side::Internal)
}

/// The reason a log line gives for a request or notification over a
/// rate limit.
fn refusal_reason(limited: Limited) -> &'static str {
    match limited {
        Limited::Connection => "rate limited: connection",
        Limited::Client => "rate limited: client",
        Limited::Ip => "rate limited: ip",
        Limited::Global => "rate limited: global",
    }
}

fn limit_label(limited: Limited) -> Limit {
    match limited {
        Limited::Connection => Limit::RatePerSecond,
        Limited::Client => Limit::ClientRatePerSecond,
        Limited::Ip => Limit::IpRatePerSecond,
        Limited::Global => Limit::GlobalRatePerSecond,
    }
}
