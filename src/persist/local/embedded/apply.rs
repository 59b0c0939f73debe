//! One [`Change`] applied to the tables of an open write transaction: the
//! writer applies a whole queue of them, in order, before its one commit,
//! so each change sees the ones before it (sequences, retention, the
//! retained totals).

use redb::{ReadableTable, Table, WriteTransaction};

use super::rows::{
    age_cutoff, change, encode, evict, from_millis, millis, read_meta, MESSAGES, POSITIONS, STARTS,
    TOPICS,
};
use crate::envelope::Payload;
use crate::persist::local::change::{Applied, Change};
use crate::persist::local::{Position, Usage};
use crate::persist::{Retention, Stored};

/// The tables, open in one write transaction.
pub(super) struct Tables<'t> {
    messages: Table<'t, (&'static str, u64), (u64, u8, &'static [u8])>,
    topics: Table<'t, &'static str, (u64, u64, u64)>,
    positions: Table<'t, &'static str, (&'static str, u64, Vec<u64>)>,
    starts: Table<'t, &'static str, u64>,
}

// === impl Tables ===

impl<'t> Tables<'t> {
    /// Opens the tables of `txn`.
    pub(super) fn open(txn: &'t WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Tables {
            messages: txn.open_table(MESSAGES)?,
            topics: txn.open_table(TOPICS)?,
            positions: txn.open_table(POSITIONS)?,
            starts: txn.open_table(STARTS)?,
        })
    }

    /// Applies `change`, keeping `usage` up to date.
    pub(super) fn apply(
        &mut self,
        change: &Change,
        usage: &mut Usage,
    ) -> Result<Applied, redb::Error> {
        match change {
            Change::Append {
                topic,
                data,
                at,
                retention,
            } => {
                let (stored, evicted) = self.append(topic, data, millis(*at), retention, usage)?;
                Ok(Applied::Appended(stored, evicted))
            }
            Change::Expire {
                topic,
                now,
                retention,
            } => Ok(Applied::Expired(self.expire(
                topic,
                millis(*now),
                retention,
                usage,
            )?)),
            Change::SetPosition { id, position } => {
                self.set_position(id, position)?;
                Ok(Applied::PositionSet)
            }
            Change::RemovePosition { id } => {
                self.starts.remove(id.as_str())?;
                Ok(Applied::PositionRemoved(
                    self.positions.remove(id.as_str())?.is_some(),
                ))
            }
        }
    }

    fn append(
        &mut self,
        topic: &str,
        data: &Payload,
        at_ms: u64,
        retention: &Retention,
        usage: &mut Usage,
    ) -> Result<(Stored, Vec<u64>), redb::Error> {
        let (tag, bytes) = encode(data);
        let mut meta = read_meta(&self.topics, topic)?;
        let before = meta;
        let seq = meta.last + 1;
        self.messages.insert((topic, seq), (at_ms, tag, bytes))?;
        meta.last = seq;
        meta.count += 1;
        meta.bytes += bytes.len() as u64;
        let too_old = age_cutoff(at_ms, retention);
        let evicted = evict(&mut self.messages, topic, &mut meta, |meta, stored_at| {
            retention.max_count.is_some_and(|max| meta.count > max)
                || retention.max_bytes.is_some_and(|max| meta.bytes > max)
                || too_old.is_some_and(|cutoff| stored_at <= cutoff)
        })?;
        self.topics
            .insert(topic, (meta.last, meta.count, meta.bytes))?;
        change(usage, &before, &meta);
        let stored = Stored {
            topic: topic.to_owned(),
            seq,
            stored_at: from_millis(at_ms),
            data: data.clone(),
        };
        Ok((stored, evicted))
    }

    fn expire(
        &mut self,
        topic: &str,
        now_ms: u64,
        retention: &Retention,
        usage: &mut Usage,
    ) -> Result<Vec<u64>, redb::Error> {
        let Some(cutoff) = age_cutoff(now_ms, retention) else {
            return Ok(Vec::new());
        };
        if self.topics.get(topic)?.is_none() {
            return Ok(Vec::new());
        }
        let mut meta = read_meta(&self.topics, topic)?;
        let before = meta;
        let evicted = evict(&mut self.messages, topic, &mut meta, |_, at| at <= cutoff)?;
        if !evicted.is_empty() {
            self.topics
                .insert(topic, (meta.last, meta.count, meta.bytes))?;
            change(usage, &before, &meta);
        }
        Ok(evicted)
    }

    fn set_position(&mut self, id: &str, position: &Position) -> Result<(), redb::Error> {
        let acked: Vec<u64> = position.acked.iter().copied().collect();
        let created = self
            .positions
            .insert(id, (position.topic.as_str(), position.floor, acked))?
            .is_none();
        // The start never changes: written once, with the first row (an
        // ack rewrites the position, not this).
        if created {
            self.starts.insert(id, position.start)?;
        }
        Ok(())
    }
}
