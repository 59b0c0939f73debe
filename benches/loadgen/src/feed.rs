//! The daemon feed that the `fanout` and `persist` scenarios read: its
//! configuration (the daemon's `Subscribe` at 1,000 events/s of about
//! 256 B, published under [`TOPIC`]), reading its events without parsing
//! them (the daemon's `seq`, a persistent delivery's `sequence_id`, the
//! daemon's `timestamp`), and the delivery latency both record.
//!
//! The latency of an event is its receipt time minus the daemon's
//! `timestamp` (RFC 3339, nanoseconds, the same host clock).

use std::time::SystemTime;

use hdrhistogram::Histogram;

/// The topic the feed publishes under.
pub(crate) const TOPIC: &str = "daemon.events";
/// One event per millisecond: 1,000 events/s.
const INTERVAL_MS: u64 = 1;
/// Size of the published data (the `result` of the daemon's event line).
pub(crate) const EVENT_BYTES: usize = 256;

/// The feed's configuration: the daemon's `Subscribe` at 1,000 events/s of
/// [`EVENT_BYTES`], published under [`TOPIC`].
pub(crate) fn feed_toml() -> String {
    format!(
        "[[upstreams.daemon.feeds]]\nmethod = \"Subscribe\"\n\
         params = {{ interval_ms = {INTERVAL_MS}, pad_bytes = {}, catch_up = true }}\n\
         topic = \"{TOPIC}\"\n",
        pad_bytes()
    )
}

/// The pad that makes the published data [`EVENT_BYTES`] long for a
/// six-digit `seq` (the daemon's event without a pad, measured).
fn pad_bytes() -> usize {
    let bare = r#"{"event":{"type":"new_approval","timestamp":"2026-01-01T00:00:00.000000000Z","data":{"seq":100000,"pad":""}}}"#;
    EVENT_BYTES.saturating_sub(bare.len())
}

/// The unsigned number after `key` in `text`, found without parsing.
pub(crate) fn number(text: &str, key: &str) -> Option<u64> {
    let at = text.find(key)? + key.len();
    let rest = &text[at..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The event's daemon timestamp.
pub(crate) fn published_at(text: &str) -> Option<SystemTime> {
    let key = r#""timestamp":""#;
    let at = text.find(key)? + key.len();
    let end = text[at..].find('"')?;
    humantime::parse_rfc3339(&text[at..at + end]).ok()
}

/// Records in `hist` the delivery latency in ns of the event in `text`,
/// received at `wall`; false when the event carries no timestamp.
pub(crate) fn record_latency(hist: &mut Histogram<u32>, text: &str, wall: SystemTime) -> bool {
    match published_at(text).map(|at| wall.duration_since(at)) {
        Some(Ok(latency)) => {
            let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
            hist.saturating_record(nanos);
        }
        // The clock stepped back between publish and receipt: 0.
        Some(Err(_)) => hist.saturating_record(0),
        None => return false,
    }
    true
}

/// `range` widened to take in `lo..=hi`.
pub(crate) fn widen(range: Option<(u64, u64)>, (lo, hi): (u64, u64)) -> Option<(u64, u64)> {
    Some(range.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_timestamps_are_read_without_parsing() {
        let frame = r#"{"method":"rpc.notification.persistent","params":{"sequence_id":42,"data":{"event":{"timestamp":"2026-11-25T16:00:00.123456789Z","data":{"seq":7}}}}}"#;
        assert_eq!(number(frame, r#""sequence_id":"#), Some(42));
        assert_eq!(number(frame, r#""seq":"#), Some(7));
        assert_eq!(number(frame, r#""nope":"#), None);
        let at = published_at(frame).expect("timestamp");
        let want = humantime::parse_rfc3339("2026-11-25T16:00:00.123456789Z").expect("time");
        assert_eq!(at, want);
    }

    #[test]
    fn the_pad_makes_256_byte_events() {
        let data = format!(
            r#"{{"event":{{"type":"new_approval","timestamp":"2026-11-25T16:00:00.123456789Z","data":{{"seq":123456,"pad":"{}"}}}}}}"#,
            "x".repeat(pad_bytes())
        );
        assert_eq!(data.len(), EVENT_BYTES);
        assert!(feed_toml().contains("catch_up = true"));
    }
}
