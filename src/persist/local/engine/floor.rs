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
    /// (then returns the change that writes it, for the caller to stage);
    /// `Conflict` for an id of another topic, `Full` past the cap on ids.
    pub(super) fn position_for(
        &self,
        state: &mut State<L>,
        id: &str,
        topic: &str,
        last: u64,
    ) -> Result<Option<Change>, PersistError> {
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
                    floor: last,
                    acked: Default::default(),
                };
                let write = Change::SetPosition {
                    id: id.to_owned(),
                    position: position.clone(),
                };
                let ids = state.by_topic.entry(topic.to_owned()).or_default();
                ids.insert(id.to_owned());
                let sub = Sub {
                    position,
                    session: None,
                };
                state.subs.insert(id.to_owned(), sub);
                Ok(Some(write))
            }
        }
    }

    /// Moves the floor of `id` over acknowledged and evicted sequences,
    /// returns the change that writes the position if it changed (or
    /// `dirty`: changed by the caller), for the caller to stage, and wakes
    /// its session if the floor moved.
    pub(super) fn compact(
        &self,
        state: &mut State<L>,
        id: &str,
        dirty: bool,
    ) -> Result<Option<Change>, PersistError> {
        let Some(sub) = state.subs.get_mut(id) else {
            return Ok(None);
        };
        let position = &mut sub.position;
        let before = position.clone();
        let last = state.log.last_seq(&position.topic)?;
        loop {
            if position.acked.remove(&(position.floor + 1)) {
                position.floor += 1;
                continue;
            }
            if position.floor >= last {
                break;
            }
            // The first retained message above the floor: what lies
            // between was evicted (and counted then).
            let first = state
                .log
                .read(&position.topic, position.floor, 1)?
                .first()
                .map_or(last + 1, |m| m.seq);
            if first > position.floor + 1 {
                position.floor = first - 1;
                continue;
            }
            break;
        }
        let floor = position.floor;
        position.acked = position.acked.split_off(&(floor + 1));
        let write = (dirty || *position != before).then(|| Change::SetPosition {
            id: id.to_owned(),
            position: position.clone(),
        });
        if floor != before.floor {
            if let Some(session) = sub.session.as_mut() {
                session.in_flight = session.in_flight.split_off(&(floor + 1));
                session.cursor = session.cursor.max(floor);
                session.wake.notify_one();
            }
        }
        Ok(write)
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
            let p = &sub.position;
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
            moved.extend(self.compact(state, &id, false)?);
        }
        if !moved.is_empty() {
            // Not waited for (above); a failed commit is logged by the log.
            drop(state.log.stage(moved));
        }
        Ok(())
    }
}
