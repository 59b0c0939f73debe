//! Since when an upstream's pool has had no live connection, and the last
//! error a connection attempt gave: what an operator asks first when an
//! upstream is down. Written by the pool supervisors (`pool.rs`), read by
//! the status page. One small record per upstream; nothing accumulates.

use std::time::SystemTime;

use parking_lot::Mutex;

/// Longest connect error kept, in bytes (cut at a character boundary).
const MAX_ERROR_BYTES: usize = 512;

/// An upstream's connection health, shared by its pool slots.
#[derive(Debug)]
pub(crate) struct LinkHealth {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Pool slots with a live connection.
    up: usize,
    /// Set while `up` is 0: since the start, or since the last one dropped.
    down_since: Option<SystemTime>,
    last_error: Option<(SystemTime, String)>,
}

/// A copy of the record, for display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSnapshot {
    /// No live connection since then; `None` while one is up.
    pub down_since: Option<SystemTime>,
    /// When the last connection attempt failed, and why.
    pub last_error: Option<(SystemTime, String)>,
}

// === impl LinkHealth ===

impl LinkHealth {
    /// Down (nothing connected yet) since now.
    pub(crate) fn new() -> Self {
        LinkHealth {
            inner: Mutex::new(Inner {
                up: 0,
                down_since: Some(SystemTime::now()),
                last_error: None,
            }),
        }
    }

    /// A slot connected.
    pub(crate) fn connected(&self) {
        let mut inner = self.inner.lock();
        inner.up += 1;
        inner.down_since = None;
    }

    /// A slot's connection became unusable.
    pub(crate) fn disconnected(&self) {
        let mut inner = self.inner.lock();
        inner.up = inner.up.saturating_sub(1);
        if inner.up == 0 && inner.down_since.is_none() {
            inner.down_since = Some(SystemTime::now());
        }
    }

    /// A connection attempt failed with `error`.
    pub(crate) fn connect_failed(&self, error: &dyn std::fmt::Display) {
        let mut text = error.to_string();
        if text.len() > MAX_ERROR_BYTES {
            let mut end = MAX_ERROR_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push('…');
        }
        self.inner.lock().last_error = Some((SystemTime::now(), text));
    }

    /// The current record.
    pub(crate) fn snapshot(&self) -> HealthSnapshot {
        let inner = self.inner.lock();
        HealthSnapshot {
            down_since: inner.down_since,
            last_error: inner.last_error.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_from_the_start_until_a_slot_connects_and_again_when_the_last_drops() {
        let h = LinkHealth::new();
        assert!(h.snapshot().down_since.is_some());
        h.connect_failed(&"connection refused");
        let first = h.snapshot();
        assert_eq!(
            first.last_error.as_ref().map(|(_, e)| e.as_str()),
            Some("connection refused")
        );
        h.connected();
        h.connected();
        assert_eq!(h.snapshot().down_since, None);
        h.disconnected();
        assert_eq!(h.snapshot().down_since, None, "one slot is still up");
        h.disconnected();
        assert!(h.snapshot().down_since.is_some());
        assert!(h.snapshot().last_error.is_some(), "the last error is kept");
        h.connect_failed(&"é".repeat(MAX_ERROR_BYTES));
        let (_, long) = h.snapshot().last_error.expect("error");
        assert!(long.ends_with('…') && long.len() <= MAX_ERROR_BYTES + 3);
    }
}
