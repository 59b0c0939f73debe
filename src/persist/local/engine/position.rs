//! What the engine keeps of one subscription id ([`Sub`]): the durable
//! position, the newest one staged while its writes are unresolved, and
//! its session; and the engine's view of a [`Position`].

use super::session::Session;
use crate::persist::local::{Change, Position};

/// One subscription id. Memory follows the log: a staged change shows in
/// `position` only once its ticket resolved without error, so what is
/// answered, reported and delivered by is what a restart would find
/// (floors moved over evicted messages aside: those need no disk).
///
/// Its fields are the engine's: it reads and changes them under its state
/// lock, in `engine.rs` and its other modules.
#[derive(Debug)]
pub(super) struct Sub {
    /// What is durable: acks are answered, resumes report and sessions
    /// deliver by it.
    pub(super) position: Position,
    /// The newest position staged while writes of it are unresolved
    /// (`pending` > 0); every newer write is made from it, so a write
    /// never undoes one staged before it. Dropped once none is pending
    /// (then it held only writes that failed).
    pub(super) staged: Option<Position>,
    /// Writes of the position staged whose outcome is not yet known.
    pub(super) pending: u32,
    /// The position is in the log (false: created by an open whose write
    /// has not succeeded; forgotten if it fails).
    pub(super) stored: bool,
    /// Its removal is staged: nothing more is written for it, and acks
    /// and opens are refused until the removal resolves.
    pub(super) deleting: bool,
    pub(super) session: Option<Session>,
}

// === impl Sub ===

impl Sub {
    /// A position read from the log.
    pub(super) fn stored(position: Position) -> Self {
        Sub {
            position,
            staged: None,
            pending: 0,
            stored: true,
            deleting: false,
            session: None,
        }
    }

    /// What new writes are made from: the newest staged position, else
    /// the durable one.
    pub(super) fn base(&self) -> &Position {
        self.staged.as_ref().unwrap_or(&self.position)
    }

    /// Counts one more write of the base (written again as it is).
    pub(super) fn stage_from_base(&mut self) -> Position {
        let again = self.base().clone();
        self.staged = Some(again.clone());
        self.pending += 1;
        again
    }

    /// The durable floor moved from `before` (or acks above it were
    /// added): the session forgets what is acknowledged and, if the floor
    /// moved, looks at its window again.
    pub(super) fn moved(&mut self, before: u64) {
        let position = &self.position;
        let Some(session) = self.session.as_mut() else {
            return;
        };
        session
            .in_flight
            .retain(|seq, _| *seq > position.floor && !position.acked.contains(seq));
        if position.floor != before {
            session.cursor = session.cursor.max(position.floor);
            session.wake.notify_one();
        }
    }
}

// === impl Position (the engine's view) ===

impl Position {
    /// Whether `seq` is acknowledged in it.
    pub(super) fn covers(&self, seq: u64) -> bool {
        seq <= self.floor || self.acked.contains(&seq)
    }

    /// Moves the floor over the acknowledged sequences just above it.
    pub(super) fn settle_acks(&mut self) {
        while self.acked.remove(&(self.floor + 1)) {
            self.floor += 1;
        }
        self.acked = self.acked.split_off(&(self.floor + 1));
    }

    /// Adds what `other` acknowledges (positions only grow).
    pub(super) fn merge(&mut self, other: &Position) {
        self.floor = self.floor.max(other.floor);
        self.acked.extend(other.acked.iter().copied());
        self.settle_acks();
    }

    /// The change that writes it as `id`'s position.
    pub(super) fn write(&self, id: &str) -> Change {
        Change::SetPosition {
            id: id.to_owned(),
            position: self.clone(),
        }
    }
}
