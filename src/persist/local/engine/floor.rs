//! A subscription's position: made after the topic's last sequence, and
//! how its floor moves: over acknowledged sequences, and
//! over what retention evicted (counted per subscription that had not
//! acknowledged it).

use super::{gauge, Shared, State, Sub};
use crate::persist::local::{Change, Log, Position};
use crate::persist::PersistError;

// === impl Shared ===

impl<L: Log> Shared<L> {
    /// Finds the position of `id` on `topic`, or creates it after `last`
    /// (not stored yet: its write counted as pending) and returns it for
    /// the caller to stage; `Conflict` for an id of another topic, `Full`
    /// past the cap on ids.
    pub(super) fn position_for(
        &self,
        state: &mut State<L>,
        id: &str,
        topic: &str,
        last: u64,
    ) -> Result<Option<Position>, PersistError> {
        match state.subs.get(id) {
            Some(sub) if sub.position.topic != topic => Err(PersistError::Conflict(format!(
                "subscription {id:?} exists with topic {:?}",
                sub.position.topic
            ))),
            Some(_) => Ok(None),
            None if state.subs.len() >= self.max_subscriptions => Err(PersistError::Full(format!(
                "at most {} persistent subscriptions",
                self.max_subscriptions
            ))),
            None => {
                let position = Position {
                    topic: topic.to_owned(),
                    start: last,
                    floor: last,
                    acked: Default::default(),
                };
                let ids = state.by_topic.entry(topic.to_owned()).or_default();
                ids.insert(id.to_owned());
                let sub = Sub {
                    position: position.clone(),
                    staged: Some(position.clone()),
                    pending: 1,
                    stored: false,
                    deleting: false,
                    session: None,
                };
                state.subs.insert(id.to_owned(), sub);
                Ok(Some(position))
            }
        }
    }

    /// Moves the floors of `id` (durable and staged) over evicted
    /// sequences, and returns the change that writes the position if it
    /// moved, for the caller to stage: made from the staged position, so
    /// that it undoes no write staged before it; not counted as pending
    /// (nobody is answered on it). Nothing is written for an id not yet
    /// stored or being deleted.
    pub(super) fn compact(
        &self,
        state: &mut State<L>,
        id: &str,
    ) -> Result<Option<Change>, PersistError> {
        let Some(sub) = state.subs.get_mut(id) else {
            return Ok(None);
        };
        let before = sub.base().clone();
        let floor = sub.position.floor;
        settle(&state.log, &mut sub.position)?;
        if let Some(staged) = sub.staged.as_mut() {
            settle(&state.log, staged)?;
        }
        sub.moved(floor);
        let changed = *sub.base() != before;
        Ok((changed && sub.stored && !sub.deleting).then(|| sub.base().write(id)))
    }

    /// Forgets `id`: its session ends.
    pub(super) fn forget(&self, state: &mut State<L>, id: &str) {
        let Some(sub) = state.subs.remove(id) else {
            return;
        };
        if let Some(session) = sub.session {
            session.stop.cancel();
            self.meters.attached.dec();
        }
        if let Some(ids) = state.by_topic.get_mut(&sub.position.topic) {
            ids.remove(id);
            if ids.is_empty() {
                state.by_topic.remove(&sub.position.topic);
            }
        }
    }

    /// Counts the unacknowledged `evicted` messages of `topic` per
    /// subscription and moves the floors over them. The moved positions
    /// are staged and not waited for: nobody is answered on them, and a
    /// floor lost to a crash is moved over the evicted messages again when
    /// its subscription is next opened.
    pub(super) fn evicted(
        &self,
        state: &mut State<L>,
        topic: &str,
        evicted: &[u64],
    ) -> Result<(), PersistError> {
        let usage = state.log.stats()?;
        self.meters.stored_messages.set(gauge(usage.messages));
        self.meters.stored_bytes.set(gauge(usage.bytes));
        let Some(&highest) = evicted.iter().max() else {
            return Ok(());
        };
        let ids: Vec<String> = state
            .by_topic
            .get(topic)
            .map(|ids| ids.iter().cloned().collect())
            .unwrap_or_default();
        let mut lagging = Vec::new();
        for id in ids {
            let Some(sub) = state.subs.get(&id) else {
                continue;
            };
            let p = sub.base();
            let lost = evicted
                .iter()
                .filter(|seq| **seq > p.floor && !p.acked.contains(seq))
                .count();
            self.meters
                .evicted_unacked
                .inc_by(u64::try_from(lost).unwrap_or(u64::MAX));
            if p.floor < highest {
                lagging.push(id);
            }
        }
        let mut moved = Vec::new();
        for id in lagging {
            moved.extend(self.compact(state, &id)?);
        }
        if !moved.is_empty() {
            // Not waited for (above); a failed commit is logged by the log.
            drop(state.log.stage(moved));
        }
        Ok(())
    }
}

/// Moves the floor of `position` over acknowledged sequences and over
/// what retention evicted (the first retained message above the floor
/// tells: what lies between is gone, and was counted then).
fn settle<L: Log>(log: &L, position: &mut Position) -> Result<(), PersistError> {
    let last = log.last_seq(&position.topic)?;
    loop {
        position.settle_acks();
        if position.floor >= last {
            return Ok(());
        }
        let first = log
            .read(&position.topic, position.floor, 1)?
            .first()
            .map_or(last + 1, |m| m.seq);
        if first <= position.floor + 1 {
            return Ok(());
        }
        position.floor = first - 1;
    }
}
