//! Calls settled in place: the path of every request to a pooled
//! (shared-mode, non-streaming) upstream.
//!
//! A request needs no task of its own: it is registered with a
//! [`Settle`] that the link's reader (or its deadline sweeper, or its
//! failure) hands the outcome to when the call settles: its client
//! renders the reply straight into its outbox. Replies that arrive together then
//! leave together, in one write. When the upstream has no room, the call
//! is parked in the upstream's queue (see `parking`) and written by
//! whoever frees room next, still without a task.

use std::sync::Arc;

use super::admission::{Admission, Held, Slots};
use super::link::Link;
use super::waiter::{Receipt, Settle, Waiter};
use crate::envelope::{Method, Payload};

/// One request to settle in place: what to send, who gets the outcome,
/// and the client it belongs to.
#[derive(Debug)]
pub(crate) struct Submission {
    /// The method, as sent upstream.
    pub(crate) method: Method,
    /// Its params, as the client sent them.
    pub(crate) params: Option<Payload>,
    /// Its client, which gets the outcome and is told where the call was
    /// written, and the call's deadline.
    pub(crate) done: Settle,
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
        } = call;
        let (caller, token) = (done.caller.clone(), done.token);
        // Held inline (about 64 bytes in the correlator's entry) rather than
        // boxed: one allocation per call fewer.
        let slots = Slots::start(held);
        match link.send_request(&method, params.as_ref(), Waiter::Direct(done, slots)) {
            Ok(gid) => caller.written(token, Receipt::new(link, gid)),
            Err((e, Some(waiter))) => {
                waiter.unsent(e);
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
