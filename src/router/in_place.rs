//! The path of a client request to a pooled upstream: no task of its own.
//!
//! A request to a pooled (shared-mode, non-streaming) upstream is handed
//! to the upstream from the client's reader ([`Upstream::submit`]): written
//! at once when there is room, else parked in the upstream's queue until
//! there is. Its reply is rendered into the client's outbox by whoever
//! settles it (the upstream link's reader, its deadline sweeper, its
//! failure, or the queue's timer): see `upstream::direct`. Everything else
//! (per-client and streaming upstreams, notifications, batches, the
//! methods switchyard serves itself) takes the task path.
//!
//! The session keeps the calls it handed over, so that a client who
//! leaves has them abandoned at once (late replies count as stale; parked
//! calls are dropped unsent) and a shutdown can answer what is left with
//! `unavailable`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::{record_outcome, Router};
use crate::envelope::{Message, Method, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::outbox::Outbox;
use crate::upstream::direct::Submission;
use crate::upstream::link::{Caller, Completion, Link, ReplyResult};
use crate::upstream::Upstream;

/// Where a session's in-place replies go, and the calls still out.
#[derive(Debug)]
pub(crate) struct InPlace {
    outbox: Outbox,
    next: AtomicU64,
    /// Calls out, by token.
    calls: Mutex<Calls>,
    /// Set when the client left (read without the lock by the upstream
    /// before it writes a parked call).
    gone: AtomicBool,
    /// Cancelled when the shutdown grace period is over: parked calls are
    /// answered `unavailable` instead of written.
    grace_over: CancellationToken,
}

/// A session's calls out, and whether it ended.
#[derive(Debug, Default)]
struct Calls {
    out: HashMap<u64, Out>,
    ended: Option<Ended>,
}

/// Where one call is.
#[derive(Debug)]
enum Out {
    /// Handed to this upstream, not written yet (it may be parked there).
    Waiting(Arc<Upstream>),
    /// Written on this link, as this gateway id.
    Written(Arc<Link>, u64),
}

/// How a session stopped taking replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The client left: calls are abandoned.
    Gone,
    /// The shutdown grace period is over: calls are answered `unavailable`.
    Failed,
}

/// A request that did not fit the fast path, given back whole.
pub(crate) struct NotPlaced {
    pub(crate) id: WireId,
    pub(crate) method: Method,
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
    /// The client's in-flight slot (`max_in_flight`).
    permit: OwnedSemaphorePermit,
    /// Closed (ended) when the call settles.
    span: tracing::Span,
    client_span: tracing::Span,
}

// === impl InPlace ===

impl InPlace {
    /// Replies go to `outbox`; `grace_over` ends the shutdown's grace.
    pub(crate) fn new(outbox: Outbox, grace_over: CancellationToken) -> Arc<Self> {
        Arc::new(InPlace {
            outbox,
            next: AtomicU64::new(0),
            calls: Mutex::new(Calls::default()),
            gone: AtomicBool::new(false),
            grace_over,
        })
    }

    /// Hands a request to its pooled upstream (written now, or parked
    /// there until there is room); gives it back when it must take the
    /// task path.
    pub(crate) fn place(
        self: &Arc<Self>,
        router: &Arc<Router>,
        parent: &tracing::Span,
        req: NotPlaced,
    ) -> Result<(), NotPlaced> {
        let Some(upstream) = router.routed(&req.method) else {
            return Err(req);
        };
        if !upstream.settles_in_place(&req.method) {
            return Err(req);
        }
        let now = tokio::time::Instant::now();
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
        self.calls
            .lock()
            .out
            .insert(token, Out::Waiting(upstream.clone()));
        let call = Box::new(Call {
            id,
            token,
            router: router.clone(),
            upstream: upstream.clone(),
            to: self.clone(),
            started: now.into_std(),
            deadline: now + router.cfg.request_timeout,
            permit,
            span,
            client_span,
        });
        let submission = Submission {
            method,
            params,
            done: call,
            caller: self.clone(),
            token,
        };
        if let Err(back) = upstream.submit(submission) {
            // `settles_in_place` said yes a moment ago.
            back.done
                .complete(Err(GatewayError::new(ErrorKind::Internal)));
        }
        Ok(())
    }

    /// The client left: abandon every call out (late replies are stale;
    /// parked calls are dropped unsent when their upstream comes to them).
    pub(crate) fn abandon_all(&self) {
        self.gone.store(true, Ordering::Release);
        let out = {
            let mut calls = self.calls.lock();
            calls.ended = Some(Ended::Gone);
            std::mem::take(&mut calls.out)
        };
        for out in out.into_values() {
            if let Out::Written(link, gid) = out {
                // Dropped unanswered: nobody is there to read it.
                drop(link.abandon(gid, false));
            }
        }
    }

    /// Shutdown grace is over: answer every call out with `unavailable`,
    /// parked ones included.
    pub(crate) fn fail_all(self: &Arc<Self>) {
        let out = {
            let mut calls = self.calls.lock();
            calls.ended = Some(Ended::Failed);
            std::mem::take(&mut calls.out)
        };
        // Parked calls first: the room that failing written calls frees
        // must not write them.
        let mut parked_on: Vec<Arc<Upstream>> = Vec::new();
        let mut written = Vec::new();
        for out in out.into_values() {
            match out {
                Out::Written(link, gid) => written.push((link, gid)),
                Out::Waiting(up) => {
                    if !parked_on.iter().any(|u| Arc::ptr_eq(u, &up)) {
                        parked_on.push(up);
                    }
                }
            }
        }
        let me: Arc<dyn Caller> = self.clone();
        for up in parked_on {
            for done in up.withdraw(&me) {
                done.complete(Err(shutting_down()));
            }
        }
        for (link, gid) in written {
            if let Some(waiter) = link.abandon(gid, false) {
                waiter.complete(Err(shutting_down()));
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

impl Caller for InPlace {
    fn gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    fn closing(&self) -> Option<GatewayError> {
        self.grace_over.is_cancelled().then(shutting_down)
    }

    fn written(&self, token: u64, link: Arc<Link>, gid: u64) {
        let ended = {
            let mut calls = self.calls.lock();
            if let Some(entry) = calls.out.get_mut(&token) {
                *entry = Out::Written(link, gid);
                return;
            }
            calls.ended
        };
        // Settled already, or the session ended while it was being written.
        match ended {
            None => {}
            Some(Ended::Gone) => drop(link.abandon(gid, false)),
            Some(Ended::Failed) => {
                if let Some(waiter) = link.abandon(gid, false) {
                    waiter.complete(Err(shutting_down()));
                }
            }
        }
    }
}

fn shutting_down() -> GatewayError {
    GatewayError::with_detail(ErrorKind::Unavailable, "switchyard is shutting down")
        .on(crate::error::Side::Internal)
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
            permit,
            span,
            client_span,
            ..
        } = *self;
        // Dropped after the lock: a last link handle may free room, which
        // writes parked calls (and tells their sessions).
        let out = to.calls.lock().out.remove(&token);
        drop(out);
        drop(client_span);
        let msg = router.finish(id, &upstream, started, reply);
        record_outcome(&span, &msg);
        to.deliver(&msg, permit)
    }

    fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }
}
