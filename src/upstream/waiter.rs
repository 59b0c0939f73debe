//! Who receives a call's outcome: a task awaiting a oneshot, or the
//! client of a call settled in place ([`Settle`]), to which whoever
//! settles the call (the link's reader, its deadline sweeper, or its
//! failure) hands the outcome. A link's correlator maps each gateway id to
//! one of these. A [`Caller`] is the client a call settled in place
//! belongs to: it keeps the call's own state, so that handing a call over
//! costs no allocation; it is told where the call went as a [`Receipt`],
//! which takes the call back if the client leaves first.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::slots::Slots;
use crate::envelope::{Message, Method, Payload};
use crate::error::{ErrorKind, GatewayError};

/// What a waiting call receives.
pub(crate) type ReplyResult = Result<Message, GatewayError>;

/// Who gets a call's outcome: a task awaiting it, or a [`Settle`] that
/// delivers it straight to its client (no task per request).
#[derive(Debug)]
pub(crate) enum Waiter {
    /// A task awaits the outcome on the other end of this channel.
    Task(oneshot::Sender<ReplyResult>),
    /// Delivered in place by whoever settles the call (the link's reader,
    /// its deadline sweeper, or its failure), with the upstream's slots
    /// the call holds until then.
    Direct(Settle, Slots),
}

/// A call settled in place, without a task waiting for it: its client,
/// the client's name for it, and its deadline. Whoever holds it settles
/// the call, once.
#[derive(Debug)]
pub(crate) struct Settle {
    /// The client, which renders the outcome.
    pub(crate) caller: Arc<dyn Caller>,
    /// The client's name for the call.
    pub(crate) token: u64,
    /// When the call times out.
    pub(crate) deadline: tokio::time::Instant,
}

/// The client whose calls are settled in place: told where each call was
/// written (so that it can abandon them when it leaves), and asked whether
/// it is still there before a parked call of its is written.
pub(crate) trait Caller: Send + Sync + std::fmt::Debug {
    /// True once the client left: its parked calls are dropped unsent.
    fn gone(&self) -> bool;
    /// Set once the client's shutdown grace period is over: the answer to
    /// its calls still parked (they are never written then).
    fn closing(&self) -> Option<GatewayError>;
    /// Its call `token` was written: `receipt` takes it back
    /// ([`Receipt::abandon`]) should the client leave before its reply.
    fn written(&self, token: u64, receipt: Receipt);
    /// Delivers call `token`'s outcome. Returns false when nobody wanted
    /// it any more (the client left, or its calls were answered already).
    fn complete(&self, token: u64, reply: ReplyResult) -> bool;
}

/// One request to settle in place: what to send, who gets the outcome,
/// and the client it belongs to. Its fields are the router's to fill: it
/// builds one per call.
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

/// Where a call settled in place was written: all its client needs to
/// take it back, without knowing the link. Dropping it does nothing.
#[derive(Debug)]
pub(crate) struct Receipt {
    on: Arc<dyn TakeBack>,
    gid: u64,
}

/// What a call was written on (a link): takes a call back by gateway id.
pub(crate) trait TakeBack: Send + Sync + std::fmt::Debug {
    /// Gives up on call `gid`: nobody waits for it any more.
    fn take_back(&self, gid: u64);
}

// === impl Receipt ===

impl Receipt {
    /// Call `gid`, written on `on`.
    pub(super) fn new(on: Arc<dyn TakeBack>, gid: u64) -> Self {
        Receipt { on, gid }
    }

    /// Takes the call back: it is answered by nobody, and a late reply is
    /// counted as stale.
    pub(crate) fn abandon(self) {
        self.on.take_back(self.gid);
    }
}

// === impl Settle ===

impl Settle {
    /// Delivers the outcome. Returns false when nobody wanted it any more.
    pub(crate) fn complete(self, reply: ReplyResult) -> bool {
        self.caller.complete(self.token, reply)
    }
}

impl From<oneshot::Sender<ReplyResult>> for Waiter {
    fn from(tx: oneshot::Sender<ReplyResult>) -> Self {
        Waiter::Task(tx)
    }
}

// === impl Waiter ===

impl Waiter {
    /// Hands over the outcome. Returns false when the waiter is gone.
    pub(crate) fn complete(self, reply: ReplyResult) -> bool {
        // Timed-out calls have no upstream duration.
        let timed_out = matches!(&reply, Err(e) if e.kind == ErrorKind::Timeout);
        self.hand_over(reply, !timed_out)
    }

    /// Hands over the error of a call whose request was never written:
    /// the upstream never saw it, so it has no upstream duration. Returns
    /// false when the waiter is gone.
    pub(crate) fn unsent(self, error: GatewayError) -> bool {
        self.hand_over(Err(error), false)
    }

    fn hand_over(self, reply: ReplyResult, record_duration: bool) -> bool {
        match self {
            Waiter::Task(tx) => tx.send(reply).is_ok(),
            Waiter::Direct(c, mut slots) => {
                slots.settled(record_duration);
                let delivered = c.complete(reply);
                // The room it leaves goes to the next parked call.
                drop(slots);
                delivered
            }
        }
    }

    /// The deadline of a call settled in place (tasks keep their own).
    pub(crate) fn deadline(&self) -> Option<tokio::time::Instant> {
        match self {
            Waiter::Task(_) => None,
            Waiter::Direct(c, _) => Some(c.deadline),
        }
    }
}
