//! The path of a client request to a pooled upstream: no task of its own.
//!
//! A request to a pooled (shared-mode, non-streaming) upstream is handed
//! to the upstream from the client's reader ([`Upstream::submit`]): written
//! at once when there is room, else parked in the upstream's queue until
//! there is. Its reply is rendered into the client's outbox by whoever
//! settles it (the upstream link's reader, its deadline sweeper, its
//! failure, or the queue's timer): see `upstream::admission`. Everything else
//! (per-client and streaming upstreams, notifications, batches, the
//! methods switchyard serves itself) takes the task path.
//!
//! The session keeps the calls it handed over, with each call's own state
//! (the client's id, its in-flight slot, its spans): the upstream holds
//! only the session and the call's token ([`Settle`]), so handing a call
//! over allocates nothing. A client who leaves has its calls abandoned at
//! once (late replies count as stale; parked calls are dropped unsent),
//! and a shutdown answers what is left with `unavailable`.
//!
//! The table is a slab: a call's token names its slot (and the call, so
//! that a slot used again is never taken for an earlier call's), and
//! recording, finding and taking a call out hash nothing.
//!
//! Bound: a session holds at most `max_in_flight` calls; its table keeps
//! room for [`CALLS_KEPT`] of them once it runs empty after a burst of
//! more than twice as many, and for at most twice as many otherwise (about
//! 112 bytes each): a table that runs empty now and then under a steady
//! load is not made again each time. It keeps one handle on each router
//! its calls went through (a reload makes a new one): at most one per
//! call out, and the newest.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use slab::Slab;
use tokio_util::sync::CancellationToken;

use super::{record_outcome, Router};
use crate::envelope::{Message, Method, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::limits::cap::Taken;
use crate::outbox::Outbox;
use crate::upstream::{Caller, Receipt, ReplyResult, Settle, Settled, Submission, Upstream};

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
    /// The client's identity (its named client, if any): whose method
    /// policy decides what may be placed.
    who: std::sync::OnceLock<crate::limits::identity::Identity>,
}

/// Calls a session's table keeps room for once it runs empty: a burst
/// larger than this gives its room back at its end.
const CALLS_KEPT: usize = 16;

/// A session's calls out (each with its token), the routers they were
/// placed through, and whether it ended.
#[derive(Debug, Default)]
struct Calls {
    out: Slab<(u64, Out)>,
    routers: Routers<Router>,
    ended: Option<Ended>,
}

/// The routers a session's calls out were placed through, the newest
/// last (a reload gives the listener a new one), each with its number and
/// its count of calls out. A call names its router by number: it holds no
/// handle of its own, so placing and settling it writes no reference
/// count that every session of the listener shares. A router no call
/// needs any more is let go, but for the newest one; usually there is one.
#[derive(Debug)]
struct Routers<R> {
    list: Vec<Through<R>>,
    /// The number of the next router added.
    next: u64,
}

/// One router of [`Routers`].
#[derive(Debug)]
struct Through<R> {
    number: u64,
    router: Arc<R>,
    calls: usize,
}

/// One call out: where it is, and what its reply needs.
#[derive(Debug)]
struct Out {
    at: At,
    call: Call,
}

/// A call's token: its slot in the table (low 32 bits) and the low 32
/// bits of the session's count of calls (high 32 bits), so that a token
/// names one call, not only its slot: a slot used again 2^32 calls later
/// while a settle of its first call is still out (at most a request
/// timeout) would be needed to mistake one for the other.
fn token_of(slot: usize, count: u64) -> u64 {
    (count << 32) | (slot as u64 & u64::from(u32::MAX))
}

/// The slot a token names.
fn slot_of(token: u64) -> usize {
    (token & u64::from(u32::MAX)) as usize
}

/// Where one call is.
#[derive(Debug)]
enum At {
    /// Handed to its upstream, not written yet (it may be parked there).
    Waiting,
    /// Written: the receipt takes it back.
    Written(Receipt),
}

/// How a session stopped taking replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The client left: calls are abandoned.
    Gone,
    /// The shutdown grace period is over: calls are answered `unavailable`.
    Failed,
}

/// A request that did not fit the fast path, given back whole. Its
/// fields are open: the session builds it from the decoded request and
/// takes it apart again to send it down the task path.
pub(crate) struct NotPlaced {
    pub(crate) id: WireId,
    pub(crate) method: Method,
    pub(crate) params: Option<Payload>,
    pub(crate) permit: Taken,
}

/// What one call settled in place needs for its reply.
#[derive(Debug)]
struct Call {
    id: WireId,
    /// The number of the router it was placed through ([`Routers`]).
    router: u64,
    /// Its upstream, as that router finds it ([`Router::upstream_at`]):
    /// the session's table keeps the router while the call is out.
    upstream: usize,
    started: std::time::Instant,
    /// The client's in-flight slot (`max_in_flight`).
    permit: Taken,
    /// Closed (ended) when the call settles; none while spans are not
    /// exported.
    spans: Option<Box<Spans>>,
}

/// The spans of a call settled in place, while spans are exported: boxed,
/// so that the call (moved into the session's table and out of it) stays
/// small when they are not, which is when nothing else allocates per call.
#[derive(Debug)]
struct Spans {
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
            who: std::sync::OnceLock::new(),
        })
    }

    /// Records the client's identity (once, before its first request).
    pub(crate) fn identify(&self, who: crate::limits::identity::Identity) {
        // Set once per connection; a second call changes nothing.
        let _ = self.who.set(who);
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
        let who = self.who.get().and_then(|w| w.client());
        let Some((series, upstream)) = router.routed_at(&req.method, who) else {
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
        // Spans exist only while they are exported: a disabled one gets no
        // fields and no child (each would cost a call into `tracing`), and
        // the call does not keep it.
        let spans = if span.is_disabled() {
            None
        } else {
            span.record("switchyard.upstream", upstream.name());
            let client_span = upstream.client_span_under(&span, &method);
            Some(Box::new(Spans { span, client_span }))
        };
        let count = self.next.fetch_add(1, Ordering::Relaxed);
        let mut call = Call {
            id,
            router: 0,
            upstream: series,
            started: now.into_std(),
            permit,
            spans,
        };
        let at = At::Waiting;
        let (token, unused) = {
            let mut calls = self.calls.lock();
            let (number, unused) = calls.routers.hold(router);
            call.router = number;
            let entry = calls.out.vacant_entry();
            let token = token_of(entry.key(), count);
            entry.insert((token, Out { at, call }));
            (token, unused)
        };
        drop(unused);
        let submission = Submission {
            method,
            params,
            done: Settle {
                caller: self.clone(),
                token,
                deadline: now + router.cfg.request_timeout,
            },
            placed: now.into_std(),
        };
        match upstream.submit(submission) {
            Ok(Some(receipt)) => self.record_written(token, receipt),
            Ok(None) => {}
            // `settles_in_place` said yes a moment ago.
            Err(back) => {
                back.done
                    .complete(Err(GatewayError::new(ErrorKind::Internal)));
            }
        }
        Ok(())
    }

    /// The client left: abandon every call out (late replies are stale;
    /// parked calls are dropped unsent when their upstream comes to them).
    pub(crate) fn abandon_all(&self) {
        self.gone.store(true, Ordering::Release);
        let (out, routers) = {
            let mut calls = self.calls.lock();
            calls.ended = Some(Ended::Gone);
            (
                std::mem::take(&mut calls.out),
                std::mem::take(&mut calls.routers),
            )
        };
        drop(routers);
        for (_, (_, out)) in out {
            if let At::Written(receipt) = out.at {
                // Dropped unanswered: nobody is there to read it.
                receipt.abandon();
            }
        }
    }

    /// Shutdown grace is over: answer every call out with `unavailable`,
    /// parked ones included.
    pub(crate) fn fail_all(self: &Arc<Self>) {
        let (out, routers) = {
            let mut calls = self.calls.lock();
            calls.ended = Some(Ended::Failed);
            (
                std::mem::take(&mut calls.out),
                std::mem::take(&mut calls.routers),
            )
        };
        // Taken out of the upstreams first, parked calls before written
        // ones: the room that abandoning written calls frees must not
        // write them. Each call is then answered from the table: a reply
        // or a write that comes meanwhile finds its call gone.
        let mut parked_on: Vec<Arc<Upstream>> = Vec::new();
        let mut written = Vec::new();
        let mut calls = Vec::with_capacity(out.len());
        for (_, (_, out)) in out {
            match out.at {
                At::Written(receipt) => written.push(receipt),
                At::Waiting => {
                    let call = &out.call;
                    let up = routers
                        .get(call.router)
                        .and_then(|r| r.upstream_at(call.upstream));
                    if let Some(up) = up {
                        if !parked_on.iter().any(|u| Arc::ptr_eq(u, up)) {
                            parked_on.push(up.clone());
                        }
                    }
                }
            }
            calls.push(out.call);
        }
        let me: Arc<dyn Caller> = self.clone();
        for up in parked_on {
            drop(up.withdraw(&me));
        }
        for receipt in written {
            receipt.abandon();
        }
        for call in calls {
            let Call {
                id,
                router,
                upstream,
                started,
                permit,
                spans,
            } = call;
            let Some(router) = routers.get(router) else {
                // Never: the table kept the router of each of its calls.
                continue;
            };
            let at = Settled::at(std::time::Instant::now());
            let msg = router.finish_at(id, upstream, at.since(started), Err(shutting_down()));
            self.answer(&msg, permit, spans);
        }
    }

    /// Records where call `token` was written, unless it settled already
    /// or the session ended (then the call is taken back unanswered).
    fn record_written(&self, token: u64, receipt: Receipt) {
        let ended = {
            let mut calls = self.calls.lock();
            if let Some((of, entry)) = calls.out.get_mut(slot_of(token)) {
                if *of == token {
                    entry.at = At::Written(receipt);
                    return;
                }
            }
            calls.ended
        };
        // Settled already, or the session ended while it was being written
        // (and answered it, if it failed its calls): taken back unanswered.
        if ended.is_some() {
            receipt.abandon();
        }
    }

    /// Queues a call's reply without waiting (see `Outbox::settle`) and
    /// ends its spans, if it has any; the request's in-flight slot is
    /// freed once the reply is queued, as on the waiting path. Returns
    /// false when the client is gone.
    fn answer(&self, msg: &Message, permit: Taken, spans: Option<Box<Spans>>) -> bool {
        let Some(spans) = spans else {
            return self.outbox.settle(msg, permit);
        };
        let Spans { span, client_span } = *spans;
        drop(client_span);
        record_outcome(&span, msg);
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

    fn written(&self, token: u64, receipt: Receipt) {
        self.record_written(token, receipt);
    }

    fn complete(&self, token: u64, reply: ReplyResult, settled: Settled) -> bool {
        let mut calls = self.calls.lock();
        let Calls { out, routers, .. } = &mut *calls;
        // Answered by the session already (it ended), or never its call.
        let Some(Out { at, call }) = take(out, token) else {
            return false;
        };
        let Call {
            id,
            router: number,
            upstream,
            started,
            permit,
            spans,
        } = call;
        let Some(router) = routers.get(number) else {
            // Never: the table keeps the router of each of its calls.
            return false;
        };
        // The reply is made under the lock, with the router the table keeps
        // (a handle of its own would be a shared count written twice per
        // call), where it stays; it is rendered and queued after.
        let msg = router.finish_at(id, upstream, settled.since(started), reply);
        let unused = routers.release(number);
        drop(calls);
        // Dropped after the lock: a last link handle may free room, which
        // writes parked calls (and tells their sessions); a router no call
        // needs any more is let go.
        drop(at);
        drop(unused);
        self.answer(&msg, permit, spans)
    }
}

/// Takes call `token` out of a session's table; a table left empty keeps
/// room for `2 * CALLS_KEPT` calls at most (for `CALLS_KEPT` once it held
/// more).
fn take<V>(out: &mut Slab<(u64, V)>, token: u64) -> Option<V> {
    let slot = slot_of(token);
    if out.get(slot)?.0 != token {
        return None;
    }
    let taken = out.try_remove(slot).map(|(_, v)| v);
    if out.is_empty() && out.capacity() > 2 * CALLS_KEPT {
        *out = Slab::with_capacity(CALLS_KEPT);
    }
    taken
}

fn shutting_down() -> GatewayError {
    GatewayError::with_detail(ErrorKind::Unavailable, "switchyard is shutting down")
        .on(crate::error::Side::Internal)
}

// === impl Routers ===

impl<R> Default for Routers<R> {
    fn default() -> Self {
        Routers {
            list: Vec::new(),
            next: 0,
        }
    }
}

impl<R> Routers<R> {
    /// Counts one more call placed through `router`; returns its number,
    /// and the router it replaces if no call needs that one any more (to
    /// be dropped after the table's lock).
    fn hold(&mut self, router: &Arc<R>) -> (u64, Option<Arc<R>>) {
        if let Some(last) = self.list.last_mut() {
            if Arc::ptr_eq(&last.router, router) {
                last.calls += 1;
                return (last.number, None);
            }
        }
        // A new router (a reload): the newest before it goes unless a call
        // still needs it (the others went when their last call did).
        let unused = match self.list.last() {
            Some(last) if last.calls == 0 => self.list.pop().map(|r| r.router),
            _ => None,
        };
        let number = self.next;
        self.next += 1;
        self.list.push(Through {
            number,
            router: router.clone(),
            calls: 1,
        });
        (number, unused)
    }

    /// The router numbered `number`, while a call placed through it is out.
    fn get(&self, number: u64) -> Option<&Arc<R>> {
        self.list
            .iter()
            .find(|r| r.number == number)
            .map(|r| &r.router)
    }

    /// Counts one call through router `number` less; gives back that
    /// router when no call needs it any more and a newer one is there (to
    /// be dropped after the table's lock).
    fn release(&mut self, number: u64) -> Option<Arc<R>> {
        let at = self.list.iter().position(|r| r.number == number)?;
        let through = self.list.get_mut(at)?;
        through.calls = through.calls.saturating_sub(1);
        if through.calls > 0 || at + 1 == self.list.len() {
            return None;
        }
        Some(self.list.remove(at).router)
    }
}

#[cfg(test)]
mod tests;
