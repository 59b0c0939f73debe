//! The fast path of a client request: no task of its own.
//!
//! A request to a pooled upstream with room right now is written at once
//! from the client's reader, and its reply is rendered into the client's
//! outbox by whoever settles it (the upstream link's reader, its deadline
//! sweeper, or its failure): see `upstream::direct`. Everything else (per
//! client and streaming upstreams, a full upstream, batches) takes the
//! waiting path, a task per request.
//!
//! The session keeps the calls it placed this way, so that a client who
//! leaves has them abandoned at once (late replies count as stale) and a
//! shutdown can answer what is left with `unavailable`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use tokio::sync::OwnedSemaphorePermit;

use super::{record_outcome, Router};
use crate::envelope::{Message, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::outbox::Outbox;
use crate::upstream::direct::Slots;
use crate::upstream::link::{Completion, Link, ReplyResult};
use crate::upstream::Upstream;

/// Where a session's in-place replies go, and the calls still out.
#[derive(Debug)]
pub(crate) struct InPlace {
    outbox: Outbox,
    next: AtomicU64,
    /// Calls out, by token: the link and gateway id once written.
    calls: Mutex<HashMap<u64, Option<Written>>>,
}

/// Where a call was written: its link and gateway id.
type Written = (Arc<Link>, u64);

/// A request that did not fit the fast path, given back whole.
pub(crate) struct NotPlaced {
    pub(crate) id: WireId,
    pub(crate) method: String,
    pub(crate) params: Option<Payload>,
    pub(crate) permit: OwnedSemaphorePermit,
}

/// One call settled in place.
#[derive(Debug)]
struct Call {
    id: WireId,
    token: u64,
    router: Arc<Router>,
    upstream: Arc<Upstream>,
    to: Arc<InPlace>,
    started: std::time::Instant,
    deadline: tokio::time::Instant,
    slots: Slots,
    /// The client's in-flight slot (`max_in_flight`).
    permit: OwnedSemaphorePermit,
    /// Closed (ended) when the call settles.
    span: tracing::Span,
    client_span: tracing::Span,
}

// === impl InPlace ===

impl InPlace {
    /// Replies go to `outbox`.
    pub(crate) fn new(outbox: Outbox) -> Arc<Self> {
        Arc::new(InPlace {
            outbox,
            next: AtomicU64::new(0),
            calls: Mutex::new(HashMap::default()),
        })
    }

    /// Places a request on a pooled upstream with room right now; gives
    /// it back when it must take the waiting path.
    pub(crate) fn place(
        self: &Arc<Self>,
        router: &Arc<Router>,
        parent: &tracing::Span,
        req: NotPlaced,
    ) -> Result<(), NotPlaced> {
        let Some(upstream) = router.routed(&req.method) else {
            return Err(req);
        };
        if upstream.config().mode != crate::config::UpstreamMode::Shared
            || upstream.is_streaming(&req.method)
        {
            return Err(req);
        }
        let now = tokio::time::Instant::now();
        let Some(room) = upstream.try_room(now.into_std()) else {
            return Err(req);
        };
        let NotPlaced {
            id,
            method,
            params,
            permit,
        } = req;
        let span = router.server_span(parent, &id, &method);
        span.record("switchyard.upstream", upstream.name());
        let client_span = upstream.client_span_under(&span, &method);
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        self.calls.lock().insert(token, None);
        let (placed, slots) = room.take_slots();
        let call = Box::new(Call {
            id,
            token,
            router: router.clone(),
            upstream: upstream.clone(),
            to: self.clone(),
            started: now.into_std(),
            deadline: now + router.cfg.request_timeout,
            slots,
            permit,
            span,
            client_span,
        });
        match placed.send(&method, params.as_ref(), call) {
            Ok((link, gid)) => {
                // Unless it settled already (then it forgot its token).
                if let Some(entry) = self.calls.lock().get_mut(&token) {
                    *entry = Some((link, gid));
                }
            }
            Err((e, Some(waiter))) => {
                waiter.complete(Err(e));
            }
            Err((e, None)) => {
                // The link hands back what it registered; this cannot happen.
                self.calls.lock().remove(&token);
                tracing::error!(listener = %router.cfg.name, error = %e, "in-place call lost");
            }
        }
        Ok(())
    }

    /// The client left: abandon every call out (late replies are stale).
    pub(crate) fn abandon_all(&self) {
        let calls = std::mem::take(&mut *self.calls.lock());
        for (link, gid) in calls.into_values().flatten() {
            // Dropped unanswered: nobody is there to read it.
            drop(link.abandon(gid, false));
        }
    }

    /// Shutdown grace is over: answer every call out with `unavailable`.
    pub(crate) fn fail_all(&self) {
        let calls = std::mem::take(&mut *self.calls.lock());
        for (link, gid) in calls.into_values().flatten() {
            if let Some(waiter) = link.abandon(gid, false) {
                let err = GatewayError::with_detail(
                    ErrorKind::Unavailable,
                    "switchyard is shutting down",
                )
                .on(crate::error::Side::Internal);
                waiter.complete(Err(err));
            }
        }
    }

    /// Queues a settled reply without waiting (see `Outbox::settle`); the
    /// request's in-flight slot is freed once the reply is queued, as on
    /// the waiting path. Returns false when the client is gone.
    fn deliver(&self, msg: &Message, permit: OwnedSemaphorePermit) -> bool {
        self.outbox.settle(msg, permit)
    }
}

// === impl Call ===

impl Completion for Call {
    fn complete(self: Box<Self>, reply: ReplyResult) -> bool {
        let Call {
            id,
            token,
            router,
            upstream,
            to,
            started,
            slots,
            permit,
            span,
            client_span,
            ..
        } = *self;
        to.calls.lock().remove(&token);
        if !matches!(&reply, Err(e) if e.kind == ErrorKind::Timeout) {
            // Timed-out calls have no upstream duration.
            slots.call.settled();
        }
        drop(client_span);
        let msg = router.finish(id, &upstream, started, reply);
        record_outcome(&span, &msg);
        to.deliver(&msg, permit)
    }

    fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }
}
