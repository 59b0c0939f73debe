//! The rows of the embedded store's tables: their definitions, how a
//! payload and a time are stored, and the retention walk over a topic's
//! oldest messages.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redb::{ReadableTable, Table, TableDefinition};
use serde_json::value::RawValue;

use crate::envelope::Payload;
use crate::persist::local::Usage;
use crate::persist::Retention;

/// Messages: (topic, seq) → (stored_at ms, encoding tag, data).
pub(super) const MESSAGES: TableDefinition<'static, (&str, u64), (u64, u8, &[u8])> =
    TableDefinition::new("messages");

/// Per topic: (last seq, retained count, retained bytes).
pub(super) const TOPICS: TableDefinition<'static, &str, (u64, u64, u64)> =
    TableDefinition::new("topics");

/// Per subscription id: (topic, floor, acknowledged above the floor).
pub(super) const POSITIONS: TableDefinition<'static, &str, (&str, u64, Vec<u64>)> =
    TableDefinition::new("positions");

/// Per subscription id: the topic's last sequence when it was created
/// ([`crate::persist::local::Position::start`]). A table of its own, so
/// that files written before it existed still open (an id without a row
/// started at 0).
pub(super) const STARTS: TableDefinition<'static, &str, u64> = TableDefinition::new("starts");

/// Encoding tag of a JSON payload.
const TAG_JSON: u8 = 0;
/// Encoding tag of a CBOR payload.
const TAG_CBOR: u8 = 1;

/// A topic's row in `topics`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Meta {
    pub(super) last: u64,
    pub(super) count: u64,
    pub(super) bytes: u64,
}

// === helpers ===

/// Applies a topic's change from `before` to `after` to the totals.
pub(super) fn change(usage: &mut Usage, before: &Meta, after: &Meta) {
    usage.messages = (usage.messages + after.count).saturating_sub(before.count);
    usage.bytes = (usage.bytes + after.bytes).saturating_sub(before.bytes);
}

/// A topic's meta row, or zeros for a topic never stored.
pub(super) fn read_meta(
    topics: &Table<'_, &'static str, (u64, u64, u64)>,
    topic: &str,
) -> Result<Meta, redb::Error> {
    Ok(topics.get(topic)?.map_or(Meta::default(), |row| {
        let (last, count, bytes) = row.value();
        Meta { last, count, bytes }
    }))
}

/// Removes the oldest messages of `topic` while `go(meta, stored_at ms)`
/// says so for the oldest one; keeps `meta` up to date. Returns the
/// sequences removed, oldest first.
pub(super) fn evict(
    messages: &mut Table<'_, (&'static str, u64), (u64, u8, &'static [u8])>,
    topic: &str,
    meta: &mut Meta,
    go: impl Fn(&Meta, u64) -> bool,
) -> Result<Vec<u64>, redb::Error> {
    let mut evicted = Vec::new();
    loop {
        let oldest = match messages.range((topic, 0)..=(topic, u64::MAX))?.next() {
            Some(entry) => {
                let (key, value) = entry?;
                let (at_ms, _, bytes) = value.value();
                (key.value().1, at_ms, bytes.len() as u64)
            }
            None => break,
        };
        let (seq, at_ms, len) = oldest;
        if !go(meta, at_ms) {
            break;
        }
        messages.remove((topic, seq))?;
        meta.count = meta.count.saturating_sub(1);
        meta.bytes = meta.bytes.saturating_sub(len);
        evicted.push(seq);
    }
    Ok(evicted)
}

/// Messages stored at or before this (ms) are `max_age` old at `now_ms`
/// (as the memory log counts: an age of exactly `max_age` is evicted).
pub(super) fn age_cutoff(now_ms: u64, retention: &Retention) -> Option<u64> {
    let max_age = u64::try_from(retention.max_age?.as_millis()).unwrap_or(u64::MAX);
    now_ms.checked_sub(max_age)
}

/// A payload as its tag and bytes.
pub(super) fn encode(data: &Payload) -> (u8, &[u8]) {
    match data {
        Payload::Json(raw) => (TAG_JSON, raw.get().as_bytes()),
        Payload::Cbor(bytes) => (TAG_CBOR, bytes),
    }
}

/// A stored tag and bytes as the payload; a bad row is a corrupt store.
pub(super) fn decode(tag: u8, bytes: &[u8]) -> Result<Payload, redb::Error> {
    let corrupt = |why: &str| redb::Error::Corrupted(format!("stored message: {why}"));
    match tag {
        TAG_JSON => {
            let text = String::from_utf8(bytes.to_vec()).map_err(|_| corrupt("not UTF-8"))?;
            RawValue::from_string(text)
                .map(|raw| Payload::Json(raw.into()))
                .map_err(|_| corrupt("not JSON"))
        }
        TAG_CBOR => Ok(Payload::Cbor(bytes::Bytes::copy_from_slice(bytes))),
        _ => Err(corrupt("unknown encoding tag")),
    }
}

/// Milliseconds since the epoch (0 before it, saturating far after).
pub(super) fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(super) fn from_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}
