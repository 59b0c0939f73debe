//! A bounded record of the lines the daemon read and wrote, for the demo's
//! playground: it shows the upstream leg (with the gateway's ids) next to
//! what the browser sent.
//!
//! Only the demo attaches a tap ([`super::Daemon::start_tapped`]); a daemon
//! without one records nothing. The ring keeps the last [`TAP_LINES`] lines,
//! each cut to [`TAP_LINE_BYTES`]: what a viewer missed is gone, never
//! buffered.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;

/// Lines kept; older ones are dropped as new ones arrive.
pub const TAP_LINES: usize = 256;

/// Bytes kept of one line (cut at a character boundary, marked `…`).
pub const TAP_LINE_BYTES: usize = 2048;

/// The recorder a tapped daemon writes to; shared with whoever reads it.
#[derive(Debug, Default)]
pub struct Tap {
    ring: Mutex<Ring>,
    /// Numbers the daemon's connections, so a viewer can tell pool members
    /// apart.
    next_conn: AtomicU64,
}

#[derive(Debug, Default)]
struct Ring {
    lines: VecDeque<TapLine>,
    /// Sequence number of the next line (the first is 1).
    next_seq: u64,
}

/// One recorded line.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TapLine {
    /// Increases by one per line; readers ask for lines after the last
    /// one they saw.
    pub seq: u64,
    /// The daemon connection it travelled on.
    pub conn: u64,
    /// `"in"`: the daemon read it (from switchyard); `"out"`: it wrote it.
    pub dir: &'static str,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The line without its `\n`, lossily decoded, cut to [`TAP_LINE_BYTES`].
    pub text: String,
}

// === impl Tap ===

impl Tap {
    /// An empty tap.
    pub fn new() -> Self {
        Self::default()
    }

    /// A number for a new connection.
    pub(super) fn connection(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records a line the daemon read.
    pub(super) fn read(&self, conn: u64, line: &[u8]) {
        self.record(conn, "in", line);
    }

    /// Records what the daemon wrote: one or more `\n`-terminated lines.
    pub(super) fn wrote(&self, conn: u64, bytes: &[u8]) {
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            self.record(conn, "out", line);
        }
    }

    /// The kept lines with `seq > after`, oldest first.
    pub fn since(&self, after: u64) -> Vec<TapLine> {
        let ring = self.ring.lock();
        ring.lines
            .iter()
            .filter(|l| l.seq > after)
            .cloned()
            .collect()
    }

    fn record(&self, conn: u64, dir: &'static str, line: &[u8]) {
        let text = cut(&String::from_utf8_lossy(line));
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut ring = self.ring.lock();
        ring.next_seq += 1;
        let seq = ring.next_seq;
        if ring.lines.len() == TAP_LINES {
            ring.lines.pop_front();
        }
        ring.lines.push_back(TapLine {
            seq,
            conn,
            dir,
            at_ms,
            text,
        });
    }
}

/// `text` cut to at most [`TAP_LINE_BYTES`] (plus the `…` marker).
fn cut(text: &str) -> String {
    if text.len() <= TAP_LINE_BYTES {
        return text.to_owned();
    }
    let mut end = TAP_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_lines_in_order_and_cuts_long_ones() {
        let tap = Tap::new();
        let conn = tap.connection();
        for i in 0..TAP_LINES + 10 {
            tap.read(conn, format!("{{\"id\":{i}}}").as_bytes());
        }
        let all = tap.since(0);
        assert_eq!(all.len(), TAP_LINES);
        assert_eq!(all[0].seq, 11);
        assert_eq!(all.last().map(|l| l.seq), Some((TAP_LINES + 10) as u64));
        assert_eq!(tap.since(all[TAP_LINES - 2].seq).len(), 1);

        tap.wrote(conn, b"{\"a\":1}\n{\"b\":2}\n");
        let last = tap.since(all[TAP_LINES - 1].seq);
        assert_eq!(last.len(), 2);
        assert_eq!((last[0].dir, last[1].text.as_str()), ("out", "{\"b\":2}"));

        tap.read(conn, "é".repeat(TAP_LINE_BYTES).as_bytes());
        let long = tap.since(last[1].seq);
        assert!(long[0].text.ends_with('…'));
        assert!(long[0].text.len() <= TAP_LINE_BYTES + '…'.len_utf8());
    }
}
