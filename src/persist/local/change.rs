//! What the engine hands a [`super::Log`] to write: a batch of
//! [`Change`]s, staged in order, and the [`Ticket`] that says when they
//! are durable and what each did ([`Applied`]).
//!
//! Staging and durability are apart so that a log can put everything
//! staged while it was busy into one commit (the embedded log's group
//! commit): the engine stages with its lock held (cheap: a queue push),
//! then waits for the ticket without it, and answers or delivers only
//! once the ticket resolves.

use std::time::SystemTime;

use tokio::sync::oneshot;

use super::Position;
use crate::envelope::Payload;
use crate::persist::{PersistError, Retention, Stored};

/// One change to a log.
#[derive(Debug, Clone)]
pub enum Change {
    /// Append `data` to `topic` as sequence `last + 1`, stored at `at`,
    /// then evict what `retention` no longer keeps.
    Append {
        /// The concrete topic.
        topic: String,
        /// The event's data.
        data: Payload,
        /// When it is stored.
        at: SystemTime,
        /// What the topic keeps.
        retention: Retention,
    },
    /// Evict messages of `topic` older than `retention.max_age` at `now`.
    Expire {
        /// The concrete topic.
        topic: String,
        /// The time ages are measured at.
        now: SystemTime,
        /// What the topic keeps.
        retention: Retention,
    },
    /// Write the position of `id` (creating it).
    SetPosition {
        /// The subscription id.
        id: String,
        /// Its position.
        position: Position,
    },
    /// Remove the position of `id`.
    RemovePosition {
        /// The subscription id.
        id: String,
    },
}

/// What one [`Change`] did, in the order staged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// [`Change::Append`]: the stored message and the sequences evicted.
    Appended(Stored, Vec<u64>),
    /// [`Change::Expire`]: the sequences evicted.
    Expired(Vec<u64>),
    /// [`Change::SetPosition`].
    PositionSet,
    /// [`Change::RemovePosition`]: whether it existed.
    PositionRemoved(bool),
}

/// What a batch of changes came to, once durable.
pub type Outcome = Result<Vec<Applied>, PersistError>;

/// The answer to one staged batch: resolves once the batch (and everything
/// staged before it) is as durable as the log promises.
#[derive(Debug)]
pub struct Ticket(Inner);

#[derive(Debug)]
enum Inner {
    Ready(Outcome),
    Waiting(oneshot::Receiver<Outcome>),
}

// === impl Ticket ===

impl Ticket {
    /// A ticket already resolved (a log that applies in place).
    pub fn ready(outcome: Outcome) -> Self {
        Ticket(Inner::Ready(outcome))
    }

    /// A ticket resolved later through the returned sender.
    pub fn waiting() -> (Self, oneshot::Sender<Outcome>) {
        let (tx, rx) = oneshot::channel();
        (Ticket(Inner::Waiting(rx)), tx)
    }

    /// Waits until the batch is durable.
    pub async fn wait(self) -> Outcome {
        match self.0 {
            Inner::Ready(outcome) => outcome,
            Inner::Waiting(rx) => rx.await.unwrap_or_else(|_| Err(gone())),
        }
    }

    /// Waits until the batch is durable, blocking this thread (never call
    /// it from an async task).
    pub fn wait_blocking(self) -> Outcome {
        match self.0 {
            Inner::Ready(outcome) => outcome,
            Inner::Waiting(rx) => rx.blocking_recv().unwrap_or_else(|_| Err(gone())),
        }
    }
}

/// The writer dropped a batch without answering (it stopped).
fn gone() -> PersistError {
    PersistError::Store("the store's writer stopped".to_owned())
}

// === impl Applied ===

impl Applied {
    /// The stored message and evictions of an [`Applied::Appended`].
    pub fn into_appended(self) -> Result<(Stored, Vec<u64>), PersistError> {
        match self {
            Applied::Appended(stored, evicted) => Ok((stored, evicted)),
            other => Err(mismatch(&other)),
        }
    }

    /// The evictions of an [`Applied::Expired`].
    pub fn into_expired(self) -> Result<Vec<u64>, PersistError> {
        match self {
            Applied::Expired(evicted) => Ok(evicted),
            other => Err(mismatch(&other)),
        }
    }
}

/// A log answered a change with the outcome of another kind (a bug in the
/// log, reported as a store failure rather than a panic).
pub fn mismatch(got: &Applied) -> PersistError {
    PersistError::Store(format!("the log answered a change with {got:?}"))
}

/// The single outcome of a one-change batch.
pub fn single(outcome: Outcome) -> Result<Applied, PersistError> {
    let mut applied = outcome?;
    match (applied.pop(), applied.is_empty()) {
        (Some(one), true) => Ok(one),
        _ => Err(PersistError::Store(
            "the log answered a change with another count of outcomes".to_owned(),
        )),
    }
}
