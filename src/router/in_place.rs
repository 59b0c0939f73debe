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
//! 200 bytes each): a table that runs empty now and then under a steady
//! load is not made again each time.

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

/// A session's calls out (each with its token), and whether it ended.
#[derive(Debug, Default)]
struct Calls {
    out: Slab<(u64, Out)>,
    ended: Option<Ended>,
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
    router: Arc<Router>,
    /// Its upstream, as the router finds it ([`Router::upstream_at`]):
    /// the router the call holds keeps it.
    upstream: usize,
    started: std::time::Instant,
    /// The client's in-flight slot (`max_in_flight`).
    permit: Taken,
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
        // fields and no child (each would cost a call into `tracing`).
        let client_span = if span.is_disabled() {
            tracing::Span::none()
        } else {
            span.record("switchyard.upstream", upstream.name());
            upstream.client_span_under(&span, &method)
        };
        let count = self.next.fetch_add(1, Ordering::Relaxed);
        let call = Call {
            id,
            router: router.clone(),
            upstream: series,
            started: now.into_std(),
            permit,
            span,
            client_span,
        };
        let at = At::Waiting;
        let token = {
            let mut calls = self.calls.lock();
            let entry = calls.out.vacant_entry();
            let token = token_of(entry.key(), count);
            entry.insert((token, Out { at, call }));
            token
        };
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
        let out = {
            let mut calls = self.calls.lock();
            calls.ended = Some(Ended::Gone);
            std::mem::take(&mut calls.out)
        };
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
        let out = {
            let mut calls = self.calls.lock();
            calls.ended = Some(Ended::Failed);
            std::mem::take(&mut calls.out)
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
                    if let Some(up) = call.router.upstream_at(call.upstream) {
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
            call.finish(
                self,
                Err(shutting_down()),
                Settled::at(std::time::Instant::now()),
            );
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

    /// Queues a settled reply without waiting (see `Outbox::settle`); the
    /// request's in-flight slot is freed once the reply is queued, as on
    /// the waiting path. Returns false when the client is gone.
    fn deliver(&self, msg: &Message, permit: Taken) -> bool {
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
        let out = take(&mut self.calls.lock().out, token);
        // Answered by the session already (it ended), or never its call.
        let Some(Out { at, call }) = out else {
            return false;
        };
        // Dropped after the lock: a last link handle may free room, which
        // writes parked calls (and tells their sessions).
        drop(at);
        call.finish(self, reply, settled)
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

// === impl Call ===

impl Call {
    /// Renders the reply into `to`'s outbox, records its outcome (settled
    /// `at`) and ends its spans. Returns false when the client is gone.
    fn finish(self, to: &InPlace, reply: ReplyResult, at: Settled) -> bool {
        let Call {
            id,
            router,
            upstream,
            started,
            permit,
            span,
            client_span,
        } = self;
        drop(client_span);
        let msg = router.finish_at(id, upstream, at.since(started), reply);
        if !span.is_disabled() {
            record_outcome(&span, &msg);
        }
        to.deliver(&msg, permit)
    }
}

#[cfg(test)]
mod tests {
    use super::{take, token_of, Slab, CALLS_KEPT};

    /// Records `v` as call number `count`, as `InPlace::place` does.
    fn record(out: &mut Slab<(u64, [u8; 200])>, count: u64, v: [u8; 200]) -> u64 {
        let entry = out.vacant_entry();
        let token = token_of(entry.key(), count);
        entry.insert((token, v));
        token
    }

    /// A table that ran empty after a burst keeps room for `CALLS_KEPT`
    /// calls, not for the burst; one that never held more keeps its room
    /// (taking calls out of it allocates nothing).
    #[test]
    fn an_empty_table_keeps_room_for_a_few_calls_only() {
        let mut out = Slab::new();
        let tokens: Vec<u64> = (0..256).map(|n| record(&mut out, n, [0; 200])).collect();
        assert!(out.capacity() >= 256);
        for (n, token) in tokens.iter().enumerate() {
            assert!(take(&mut out, *token).is_some());
            if n < 255 {
                assert!(out.capacity() >= 256, "shrunk before it ran empty");
            }
        }
        let kept = out.capacity();
        assert!((CALLS_KEPT..2 * CALLS_KEPT).contains(&kept), "{kept}");
        for round in 0..3 {
            let tokens: Vec<u64> = (0..CALLS_KEPT as u64)
                .map(|n| record(&mut out, 1000 + n, [round; 200]))
                .collect();
            for token in tokens {
                assert_eq!(take(&mut out, token).map(|v| v[0]), Some(round));
            }
            assert_eq!(out.capacity(), kept);
        }
        assert!(take(&mut out, 7).is_none());
    }

    /// A table that never held more than `2 * CALLS_KEPT` calls keeps its
    /// room when it runs empty: it is not made again at each lull.
    #[test]
    fn a_table_of_a_steady_load_keeps_its_room() {
        let mut out = Slab::new();
        for round in 0..3 {
            let tokens: Vec<u64> = (0..2 * CALLS_KEPT as u64)
                .map(|n| record(&mut out, n, [round; 200]))
                .collect();
            let room = out.capacity();
            assert!((2 * CALLS_KEPT..=4 * CALLS_KEPT).contains(&room), "{room}");
            for token in tokens {
                assert!(take(&mut out, token).is_some());
            }
            if round == 0 {
                assert!(room <= 2 * CALLS_KEPT, "{room}");
            }
            assert_eq!(out.capacity(), room, "kept when it ran empty");
        }
    }

    /// A token names its call, not only its slot: once the slot holds a
    /// later call, the earlier call's token takes nothing out.
    #[test]
    fn a_token_takes_out_its_own_call_only() {
        let mut out = Slab::new();
        let first = record(&mut out, 0, [1; 200]);
        assert_eq!(take(&mut out, first).map(|v| v[0]), Some(1));
        let second = record(&mut out, 1, [2; 200]);
        assert_ne!(first, second);
        assert!(take(&mut out, first).is_none(), "an earlier call's token");
        assert_eq!(take(&mut out, second).map(|v| v[0]), Some(2));
        assert!(take(&mut out, second).is_none(), "taken once");
    }
}
