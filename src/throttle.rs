//! Rate-limited log lines for events that can happen once per request or
//! per connection attempt (requests answered `unavailable`, refused
//! upgrades): an operator needs to see that they happen, and how often,
//! but a flood of identical lines would hide everything else.
//!
//! [`Throttle::admit`] lets one line per key through per period and counts
//! the ones it holds back, so the next line can say how many there were.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Keys tracked at most. Callers key on config names and closed reasons,
/// far fewer than this; should a map ever fill up, it is cleared, which at
/// worst lets a few extra lines through.
const MAX_KEYS: usize = 1024;

/// One line per key per period; see the module docs.
#[derive(Debug)]
pub struct Throttle {
    period: Duration,
    keys: Mutex<HashMap<String, Window>>,
}

/// The current period of one key.
#[derive(Debug)]
struct Window {
    /// When the last line for this key was let through.
    logged: Instant,
    /// Lines held back since then.
    suppressed: u64,
}

// === impl Throttle ===

impl Throttle {
    /// At most one line per key every `period`.
    pub fn new(period: Duration) -> Self {
        Throttle {
            period,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// `Some(n)` when a line for `key` may be written now, `n` being the
    /// lines held back since the last one; `None` (and counted) otherwise.
    pub fn admit(&self, key: &str) -> Option<u64> {
        let now = Instant::now();
        let mut keys = self.keys.lock();
        if let Some(w) = keys.get_mut(key) {
            if now.duration_since(w.logged) < self.period {
                w.suppressed += 1;
                return None;
            }
            let held = std::mem::take(&mut w.suppressed);
            w.logged = now;
            return Some(held);
        }
        if keys.len() >= MAX_KEYS {
            keys.clear();
        }
        let window = Window {
            logged: now,
            suppressed: 0,
        };
        keys.insert(key.to_owned(), window);
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_key_per_period_with_the_count_held_back() {
        let t = Throttle::new(Duration::from_secs(3600));
        assert_eq!(t.admit("a"), Some(0));
        assert_eq!(t.admit("a"), None);
        assert_eq!(t.admit("a"), None);
        assert_eq!(t.admit("b"), Some(0), "keys are independent");
        let t = Throttle::new(Duration::ZERO);
        assert_eq!(t.admit("a"), Some(0));
        assert_eq!(t.admit("a"), Some(0));
    }

    #[test]
    fn held_back_lines_are_reported_with_the_next_one() {
        let t = Throttle::new(Duration::from_millis(1));
        assert_eq!(t.admit("a"), Some(0));
        let mut held = 0;
        let reported = loop {
            match t.admit("a") {
                None => held += 1,
                Some(n) => break n,
            }
        };
        assert_eq!(reported, held);
    }
}
