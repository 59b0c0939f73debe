//! Connection caps, global and per client IP, as RAII permits: a
//! connection holds its [`ConnPermit`] for its whole life and releases it
//! on every path by dropping it. Over a cap the caller refuses at once; it
//! never queues.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;

/// The connection caps of one listener.
///
/// The counts live apart from the caps, so that a configuration reload can
/// give the listener new caps ([`ConnLimits::with_caps`]) while the
/// connections already open keep counting against them.
#[derive(Debug)]
pub struct ConnLimits {
    /// Largest number of open connections; 0 = no cap.
    max: usize,
    /// Largest number of open connections per client IP; 0 = no cap.
    per_ip_max: usize,
    counts: Counts,
}

/// Open connections, in all and per client IP (an entry per IP with an
/// open connection: bounded by the open connections).
type Counts = Arc<Mutex<Open>>;

#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// One admitted connection; dropping it frees its places.
#[derive(Debug)]
pub struct ConnPermit {
    ip: IpAddr,
    counts: Counts,
}

// === impl ConnLimits ===

impl ConnLimits {
    /// Caps of `max` connections (0 = none) and `per_ip_max` per IP (0 = none).
    pub fn new(max: usize, per_ip_max: usize) -> Self {
        ConnLimits {
            max,
            per_ip_max,
            counts: Counts::default(),
        }
    }

    /// New caps over the same open connections (a reload).
    pub fn with_caps(&self, max: usize, per_ip_max: usize) -> Self {
        ConnLimits {
            max,
            per_ip_max,
            counts: self.counts.clone(),
        }
    }

    /// Admits a connection from `ip`, or `None` when a cap is reached.
    pub fn admit(&self, ip: IpAddr) -> Option<ConnPermit> {
        let mut open = self.counts.lock();
        if self.max > 0 && open.total >= self.max {
            return None;
        }
        let n = open.per_ip.get(&ip).copied().unwrap_or(0);
        if self.per_ip_max > 0 && n >= self.per_ip_max {
            return None;
        }
        open.total += 1;
        open.per_ip.insert(ip, n + 1);
        Some(ConnPermit {
            ip,
            counts: self.counts.clone(),
        })
    }
}

// === impl ConnPermit ===

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut open = self.counts.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_release() {
        let limits = ConnLimits::new(3, 2);
        let a: IpAddr = [127, 0, 0, 1].into();
        let b: IpAddr = [127, 0, 0, 2].into();
        let p1 = limits.admit(a).expect("first");
        let _p2 = limits.admit(a).expect("second");
        assert!(limits.admit(a).is_none(), "per-IP cap");
        let _p3 = limits.admit(b).expect("other IP");
        assert!(limits.admit(b).is_none(), "global cap");
        drop(p1);
        let p4 = limits.admit(a).expect("released on drop");
        let wider = limits.with_caps(4, 3);
        let _p5 = wider.admit(a).expect("new caps over the same count");
        assert!(wider.admit(a).is_none(), "the open ones still count");
        drop(p4);
    }
}
