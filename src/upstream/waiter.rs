//! Who receives a call's outcome: a task awaiting a oneshot, or a
//! [`Completion`] run in place by whoever settles the call (the link's
//! reader, its deadline sweeper, or its failure). A link's correlator maps
//! each gateway id to one of these.

use tokio::sync::oneshot;

use crate::envelope::Message;
use crate::error::GatewayError;

/// What a waiting call receives.
pub(crate) type ReplyResult = Result<Message, GatewayError>;

/// Who gets a call's outcome: a task awaiting it, or a [`Completion`]
/// that delivers it straight to its client (no task per request).
#[derive(Debug)]
pub(crate) enum Waiter {
    /// A task awaits the outcome on the other end of this channel.
    Task(oneshot::Sender<ReplyResult>),
    /// Delivered in place by whoever settles the call (the link's reader,
    /// its deadline sweeper, or its failure).
    Direct(Box<dyn Completion>),
}

/// A call settled in place, without a task waiting for it.
pub(crate) trait Completion: Send + Sync + std::fmt::Debug {
    /// Delivers the outcome. Returns false when nobody wanted it any more.
    fn complete(self: Box<Self>, reply: ReplyResult) -> bool;
    /// When the call times out.
    fn deadline(&self) -> tokio::time::Instant;
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
        match self {
            Waiter::Task(tx) => tx.send(reply).is_ok(),
            Waiter::Direct(c) => c.complete(reply),
        }
    }

    /// The deadline of a call settled in place (tasks keep their own).
    pub(super) fn deadline(&self) -> Option<tokio::time::Instant> {
        match self {
            Waiter::Task(_) => None,
            Waiter::Direct(c) => Some(c.deadline()),
        }
    }
}
