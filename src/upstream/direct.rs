//! Calls settled in place: the path of every request to a pooled
//! (shared-mode, non-streaming) upstream.
//!
//! A request needs no task of its own: it is registered with a
//! [`Completion`] that the link's reader (or its deadline sweeper, or its
//! failure) runs when the call settles, and which renders the reply
//! straight into the client's outbox. Replies that arrive together then
//! leave together, in one write. When the upstream has no room, the call
//! is parked in the upstream's queue (see `parking`) and written by
//! whoever frees room next, still without a task.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::admission::{Admission, Held};
use super::link::{Caller, Completion, Link, Waiter};
use crate::envelope::Payload;

/// Longest sleep of a link's deadline sweeper while calls are pending, so a
/// call with an earlier deadline than the ones seen is late by at most this.
const SWEEP_AT_LEAST_EVERY: Duration = Duration::from_millis(50);

/// What a call settled in place holds until it settles: its admission
/// slots, and its place in the upstream's `upstream_in_flight` gauge.
///
/// The metrics are reached through the admission the slots already hold,
/// rather than through handles of their own: cloning those handles would
/// write two reference counts that every worker thread shares, per call.
#[derive(Debug)]
pub(crate) struct Slots {
    /// When the call was written (for `upstream_request_duration`).
    started: std::time::Instant,
    /// Still counted in `upstream_in_flight`.
    counted: bool,
    /// Its pending and link slots; the room goes to the next parked call.
    held: Held,
}

/// One request to settle in place: what to send, who gets the outcome,
/// and the client it belongs to.
#[derive(Debug)]
pub(crate) struct Submission {
    /// The method, as sent upstream.
    pub(crate) method: String,
    /// Its params, as the client sent them.
    pub(crate) params: Option<Payload>,
    /// Gets the outcome (and knows the call's deadline).
    pub(crate) done: Box<dyn Completion>,
    /// The client, told where the call was written.
    pub(crate) caller: Arc<dyn Caller>,
    /// The client's name for the call (see [`Caller::written`]).
    pub(crate) token: u64,
}

// === impl Admission ===

impl Admission {
    /// Writes `call` on a link with room now, or parks it until there is
    /// room (behind the calls parked before it), or refuses it when the
    /// queue is full.
    pub(super) fn submit(self: &Arc<Self>, call: Submission) {
        // Parked calls came first: a new one only jumps in when none waits.
        let why = if self.parked_len.load(std::sync::atomic::Ordering::Acquire) == 0 {
            match self.try_room() {
                Ok((link, held)) => return self.place(link, held, call),
                Err(why) => why,
            }
        } else {
            super::admission::NoRoom::Full
        };
        self.park(call, why);
    }

    /// Writes `call` on `link`, in the room `held`.
    pub(super) fn place(&self, link: Arc<Link>, held: Held, call: Submission) {
        let Submission {
            method,
            params,
            done,
            caller,
            token,
        } = call;
        // Held inline (about 64 bytes in the correlator's entry) rather than
        // boxed: one allocation per call fewer.
        let slots = Slots::start(held);
        match link.send_request(&method, params.as_ref(), Waiter::Direct(done, slots)) {
            Ok(gid) => caller.written(token, link, gid),
            Err((e, Some(waiter))) => {
                waiter.complete(Err(e));
            }
            Err((e, None)) => {
                // Abandoned (its client left, or the link failed) between
                // its registration and the failed write: whoever abandoned
                // it has settled it already.
                tracing::debug!(upstream = %self.shared.cfg.name, error = %e, "in-place call abandoned before it was written");
            }
        }
    }
}

// === impl Slots ===

impl Slots {
    /// Marks a call in flight on the upstream of `held`, from now.
    fn start(held: Held) -> Self {
        held.upstream().calls.0.inc();
        Slots {
            started: std::time::Instant::now(),
            counted: true,
            held,
        }
    }

    /// The call settled: no longer in flight; a reply (`timed_out` false)
    /// also records the upstream-only duration.
    pub(super) fn settled(&mut self, timed_out: bool) {
        let calls = &self.held.upstream().calls;
        if !timed_out {
            calls.1.observe_duration(self.started.elapsed());
        }
        if std::mem::take(&mut self.counted) {
            calls.0.dec();
        }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // Abandoned unsettled (the client left, the link closed).
        if self.counted {
            self.held.upstream().calls.0.dec();
        }
    }
}

/// Times out a link's in-place calls at their deadlines until the link
/// closes. Sleeps while none is pending.
pub(super) async fn sweep(link: Arc<Link>) {
    loop {
        let next = link.expire_due(Instant::now());
        let wake = match next {
            Some(at) => at.min(Instant::now() + SWEEP_AT_LEAST_EVERY),
            None => {
                // Registrations signal only while the flag is set. It is
                // set before looking again (under the correlator lock), so
                // a call registered meanwhile is either seen here or sees
                // the flag and signals (the permit waits for `notified`).
                link.sweeper_idle.store(true, Ordering::SeqCst);
                if link.expire_due(Instant::now()).is_some() {
                    link.sweeper_idle.store(false, Ordering::SeqCst);
                    continue;
                }
                tokio::select! {
                    () = link.direct_added.notified() => {}
                    () = link.closed.cancelled() => return,
                }
                link.sweeper_idle.store(false, Ordering::SeqCst);
                continue;
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = link.closed.cancelled() => return,
        }
    }
}
