//! The engine of the single-instance backends: delivery windows, ack
//! timeouts and retention kept in this process, over a [`Log`] that holds
//! the messages and positions (in memory, or on disk in the embedded
//! database).
//!
//! - [`Engine`] (`engine.rs`): implements [`super::Store`] over any
//!   [`Log`]; its bounds are in its module doc.
//! - [`change`]: what the engine stages into a [`Log`] ([`Change`]) and
//!   the [`Ticket`] that resolves once it is durable.
//! - [`memory::MemoryLog`]: the log kept in this process only.
//! - [`embedded::EmbeddedLog`]: the log in a redb database file, every
//!   change on disk before its ticket resolves, the changes staged
//!   meanwhile in one commit (its durability contract, its writer and the
//!   choice of redb are in its module doc).
//! - [`Health`]: whether a log can write now, read by readiness without
//!   the engine's lock.
//! - `conformance` (tests only): the suite every [`Log`] must pass,
//!   generic over `L: Log`; call `conformance::run` from a log's tests.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;

use super::{PersistError, Retention, Stored};
use crate::envelope::Payload;

pub mod change;
#[cfg(test)]
pub mod conformance;
pub mod embedded;
mod engine;
pub mod memory;

pub use change::{Applied, Change, Ticket};
pub use engine::{Engine, SWEEP_EVERY};

/// A subscription's durable position: its topic, where it started, the
/// floor (every message ≤ floor is acknowledged) and the acknowledged
/// messages above it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    /// The topic it follows.
    pub topic: String,
    /// The topic's last sequence when the subscription was created: no
    /// message at or below it was ever delivered to it, so acknowledging
    /// one is -32602 (jsonrpc-ws.md §7.3). Never changes.
    pub start: u64,
    /// Every message ≤ `floor` is acknowledged.
    pub floor: u64,
    /// Acknowledged messages above `floor`.
    pub acked: BTreeSet<u64>,
}

/// Messages per topic and positions per subscription id. Called from the
/// engine with its own lock held, so one call at a time.
///
/// Changes are *staged* ([`Log::stage`]): applied in the order staged,
/// each batch atomically, and durable (as the log promises: the embedded
/// log, on disk) once the batch's [`Ticket`] resolves, never before. A
/// log may put several batches into one commit (group commit). Reads see
/// what is durable (the memory log, which has no disk, applies each batch
/// in place and resolves its ticket at once); what a staged change did is
/// known from its ticket, not from a read.
pub trait Log: Send + 'static {
    /// True when calls block on I/O (the embedded database): the engine
    /// then makes them from tokio's blocking pool, never from an async
    /// worker. False (the memory log): called in place.
    const BLOCKING: bool = false;

    /// Stages `changes`, after everything staged before: the ticket
    /// resolves once they are durable, with what each did, in order, or
    /// with the error that failed them all. An empty batch is a barrier:
    /// its ticket resolves once everything staged before it is durable.
    /// May wait (blocking the caller) while the log's bounded queue of
    /// staged changes is full.
    fn stage(&mut self, changes: Vec<Change>) -> Ticket;

    /// Up to `limit` retained messages of `topic` with sequence > `after`,
    /// in order.
    fn read(&self, topic: &str, after: u64, limit: usize) -> Result<Vec<Stored>, PersistError>;

    /// The last sequence of `topic` ever stored (0 when none), evicted or
    /// not.
    fn last_seq(&self, topic: &str) -> Result<u64, PersistError>;

    /// The position of subscription `id`.
    fn position(&self, id: &str) -> Result<Option<Position>, PersistError>;

    /// Every topic with stored messages (for age eviction after a restart).
    fn topics(&self) -> Result<Vec<String>, PersistError>;

    /// Every subscription and its position (the engine caches them when
    /// it starts: a restarted embedded store resumes them).
    fn positions(&self) -> Result<Vec<(String, Position)>, PersistError>;

    /// Messages and bytes of data retained now, over all topics, as of
    /// the last durable change. Called after every append and expiry, so
    /// kept as running totals.
    fn stats(&self) -> Result<Usage, PersistError>;

    /// Releases what the log holds outside this process's memory (the
    /// embedded database file and its lock), at shutdown, once what was
    /// staged is durable; later calls fail. The default does nothing.
    fn close(&mut self) {}

    /// Whether it can write now, as a handle readable without the
    /// engine's lock (readiness reads it). The default: always.
    fn health(&self) -> Health {
        Health::default()
    }

    /// Appends `data` to `topic` ([`Change::Append`]) and waits until it
    /// is durable, blocking this thread: for tools and tests; the engine
    /// stages. Returns the stored message and the sequences evicted.
    fn append(
        &mut self,
        topic: &str,
        data: &Payload,
        at: SystemTime,
        retention: &Retention,
    ) -> Result<(Stored, Vec<u64>), PersistError> {
        let change = Change::Append {
            topic: topic.to_owned(),
            data: data.clone(),
            at,
            retention: *retention,
        };
        change::single(self.stage(vec![change]).wait_blocking())?.into_appended()
    }

    /// Applies [`Change::Expire`] and waits until it is durable (blocking);
    /// returns the sequences evicted.
    fn expire(
        &mut self,
        topic: &str,
        now: SystemTime,
        retention: &Retention,
    ) -> Result<Vec<u64>, PersistError> {
        let change = Change::Expire {
            topic: topic.to_owned(),
            now,
            retention: *retention,
        };
        change::single(self.stage(vec![change]).wait_blocking())?.into_expired()
    }

    /// Writes the position of `id` (creating it) and waits until it is
    /// durable (blocking).
    fn set_position(&mut self, id: &str, position: &Position) -> Result<(), PersistError> {
        let change = Change::SetPosition {
            id: id.to_owned(),
            position: position.clone(),
        };
        match change::single(self.stage(vec![change]).wait_blocking())? {
            Applied::PositionSet => Ok(()),
            other => Err(change::mismatch(&other)),
        }
    }

    /// Removes `id` and waits until it is durable (blocking); `false` if
    /// it did not exist.
    fn remove_position(&mut self, id: &str) -> Result<bool, PersistError> {
        let change = Change::RemovePosition { id: id.to_owned() };
        match change::single(self.stage(vec![change]).wait_blocking())? {
            Applied::PositionRemoved(existed) => Ok(existed),
            other => Err(change::mismatch(&other)),
        }
    }
}

/// Whether a log can write now: `None`, or why not (the embedded store
/// between a failed commit and the reopening of its file). Shared between
/// the part that writes and readiness; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<Mutex<Option<String>>>);

// === impl Health ===

impl Health {
    /// Why it cannot write now, if it cannot.
    pub fn failure(&self) -> Option<String> {
        self.0.lock().clone()
    }

    /// Records that it cannot write (`Some(why)`) or can again (`None`).
    pub fn set(&self, failure: Option<String>) {
        *self.0.lock() = failure;
    }
}

/// What a log retains.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Messages retained.
    pub messages: u64,
    /// Bytes of data retained (as [`super::data_size`] counts them).
    pub bytes: u64,
}
