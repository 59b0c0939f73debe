//! holon-rpc heartbeats of an upstream link: at most one `rpc.heartbeat`
//! (id `"h<n>"`) in flight per link; its reply, result or error, proves
//! the link alive, and one that waits too long gets the link closed (by the
//! WebSocket upstream's liveness loop).

use std::time::{Duration, Instant};

use super::link::{Link, LinkDialect};

// === impl Link ===

impl Link {
    /// The next holon heartbeat frame `h<n>`, or `None` while one is still
    /// in flight (a beat is skipped then).
    pub(crate) fn heartbeat_frame(&self, n: u64) -> Option<String> {
        let LinkDialect::Holon(hb) = &self.dialect else {
            return None;
        };
        let mut hb = hb.lock();
        if hb.is_some() {
            return None;
        }
        *hb = Some((n, Instant::now()));
        Some(format!(
            r#"{{"jsonrpc":"2.0","id":"h{n}","method":"rpc.heartbeat","params":{{}}}}"#
        ))
    }

    /// True when the heartbeat in flight has waited longer than `timeout`.
    pub(crate) fn heartbeat_overdue(&self, timeout: Duration) -> bool {
        let LinkDialect::Holon(hb) = &self.dialect else {
            return false;
        };
        hb.lock().is_some_and(|(_, sent)| sent.elapsed() > timeout)
    }

    /// Settles the heartbeat in flight if `token` is its raw id (`"h<n>"`);
    /// any reply, result or error, proves liveness.
    pub(super) fn heartbeat_acked(&self, token: &str) -> bool {
        let LinkDialect::Holon(hb) = &self.dialect else {
            return false;
        };
        let mut hb = hb.lock();
        match *hb {
            Some((n, _)) if token == format!("\"h{n}\"") => {
                *hb = None;
                true
            }
            _ => false,
        }
    }
}
