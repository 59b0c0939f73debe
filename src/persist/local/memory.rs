//! [`MemoryLog`]: messages and positions kept in this process only. They
//! survive a client's reconnect but not a switchyard restart
//! (jsonrpc-ws.md §7.3, last bullet).
//!
//! Each staged batch is applied in place, in order, and its ticket is
//! resolved at once: there is no disk to wait for.
//!
//! Bounds: each topic keeps what its retention allows (a topic without
//! any limit keeps everything: configure one), plus its last sequence once
//! it is empty (one entry per topic ever stored, so that sequences go on);
//! positions are bounded by the engine's cap on subscription ids.

use std::collections::{HashMap, VecDeque};
use std::time::SystemTime;

use super::{Applied, Change, Log, Position, Ticket, Usage};
use crate::envelope::Payload;
use crate::persist::{PersistError, Retention, Stored};

/// The in-memory log.
#[derive(Debug, Default)]
pub struct MemoryLog {
    topics: HashMap<String, TopicLog>,
    positions: HashMap<String, Position>,
    usage: Usage,
}

/// One topic: its retained messages in sequence order.
#[derive(Debug, Default)]
struct TopicLog {
    /// The last sequence ever stored (evicted or not).
    last: u64,
    messages: VecDeque<Stored>,
    bytes: u64,
}

// === impl MemoryLog ===

impl MemoryLog {
    /// An empty log.
    pub fn new() -> Self {
        MemoryLog::default()
    }

    /// Applies one change in place.
    fn apply(&mut self, change: Change) -> Applied {
        match change {
            Change::Append {
                topic,
                data,
                at,
                retention,
            } => {
                let (stored, evicted) = self.append_now(&topic, data, at, &retention);
                Applied::Appended(stored, evicted)
            }
            Change::Expire {
                topic,
                now,
                retention,
            } => Applied::Expired(
                self.evict_while(&topic, |_, front| too_old(front, now, &retention)),
            ),
            Change::SetPosition { id, position } => {
                self.positions.insert(id, position);
                Applied::PositionSet
            }
            Change::RemovePosition { id } => {
                Applied::PositionRemoved(self.positions.remove(&id).is_some())
            }
        }
    }

    fn append_now(
        &mut self,
        topic: &str,
        data: Payload,
        at: SystemTime,
        retention: &Retention,
    ) -> (Stored, Vec<u64>) {
        let log = self.topics.entry(topic.to_owned()).or_default();
        log.last += 1;
        let stored = Stored {
            topic: topic.to_owned(),
            seq: log.last,
            stored_at: at,
            data,
        };
        let size = stored.size();
        log.bytes += size;
        log.messages.push_back(stored.clone());
        self.usage.messages += 1;
        self.usage.bytes += size;
        let retention = *retention;
        let evicted = self.evict_while(topic, |log, front| {
            let count = u64::try_from(log.messages.len()).unwrap_or(u64::MAX);
            retention.max_count.is_some_and(|max| count > max)
                || retention.max_bytes.is_some_and(|max| log.bytes > max)
                || too_old(front, at, &retention)
        });
        (stored, evicted)
    }

    /// Evicts from the front of `topic` while `evict` says so.
    fn evict_while(
        &mut self,
        topic: &str,
        mut evict: impl FnMut(&TopicLog, &Stored) -> bool,
    ) -> Vec<u64> {
        let Some(log) = self.topics.get_mut(topic) else {
            return Vec::new();
        };
        let mut evicted = Vec::new();
        while let Some(front) = log.messages.front() {
            if !evict(log, front) {
                break;
            }
            if let Some(gone) = log.messages.pop_front() {
                let size = gone.size();
                log.bytes = log.bytes.saturating_sub(size);
                self.usage.messages = self.usage.messages.saturating_sub(1);
                self.usage.bytes = self.usage.bytes.saturating_sub(size);
                evicted.push(gone.seq);
            }
        }
        evicted
    }
}

fn too_old(stored: &Stored, now: SystemTime, retention: &Retention) -> bool {
    retention.max_age.is_some_and(|max| {
        now.duration_since(stored.stored_at)
            .is_ok_and(|age| age >= max)
    })
}

impl Log for MemoryLog {
    fn stage(&mut self, changes: Vec<Change>) -> Ticket {
        // Nothing to wait for: each change is applied here, in order.
        let applied = changes.into_iter().map(|c| self.apply(c)).collect();
        Ticket::ready(Ok(applied))
    }

    fn read(&self, topic: &str, after: u64, limit: usize) -> Result<Vec<Stored>, PersistError> {
        let Some(log) = self.topics.get(topic) else {
            return Ok(Vec::new());
        };
        let start = log.messages.partition_point(|m| m.seq <= after);
        Ok(log.messages.range(start..).take(limit).cloned().collect())
    }

    fn last_seq(&self, topic: &str) -> Result<u64, PersistError> {
        Ok(self.topics.get(topic).map_or(0, |log| log.last))
    }

    fn position(&self, id: &str) -> Result<Option<Position>, PersistError> {
        Ok(self.positions.get(id).cloned())
    }

    fn topics(&self) -> Result<Vec<String>, PersistError> {
        Ok(self
            .topics
            .iter()
            .filter(|(_, log)| !log.messages.is_empty())
            .map(|(topic, _)| topic.clone())
            .collect())
    }

    fn positions(&self) -> Result<Vec<(String, Position)>, PersistError> {
        Ok(self
            .positions
            .iter()
            .map(|(id, p)| (id.clone(), p.clone()))
            .collect())
    }

    fn stats(&self) -> Result<Usage, PersistError> {
        Ok(self.usage)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn conforms() {
        super::super::conformance::run(super::MemoryLog::new);
    }
}
