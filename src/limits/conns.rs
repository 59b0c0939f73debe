//! Connection caps, global and per client IP, as RAII permits: a
//! connection holds its [`ConnPermit`] for its whole life and releases it
//! on every path by dropping it. Over a cap the caller refuses at once; it
//! never queues.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The connection caps of one listener.
#[derive(Debug)]
pub struct ConnLimits {
    total: Option<Arc<Semaphore>>,
    per_ip_max: usize,
    per_ip: PerIp,
}

/// Open connections per client IP.
type PerIp = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// One admitted connection; dropping it frees its places.
#[derive(Debug)]
pub struct ConnPermit {
    _total: Option<OwnedSemaphorePermit>,
    ip: Option<(IpAddr, PerIp)>,
}

// === impl ConnLimits ===

impl ConnLimits {
    /// Caps of `max` connections (0 = none) and `per_ip_max` per IP (0 = none).
    pub fn new(max: usize, per_ip_max: usize) -> Self {
        ConnLimits {
            total: (max > 0).then(|| Arc::new(Semaphore::new(max))),
            per_ip_max,
            per_ip: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Admits a connection from `ip`, or `None` when a cap is reached.
    pub fn admit(&self, ip: IpAddr) -> Option<ConnPermit> {
        let total = match &self.total {
            Some(sem) => Some(sem.clone().try_acquire_owned().ok()?),
            None => None,
        };
        let ip = if self.per_ip_max > 0 {
            let mut counts = self.per_ip.lock();
            let n = counts.entry(ip).or_insert(0);
            if *n >= self.per_ip_max {
                return None;
            }
            *n += 1;
            Some((ip, self.per_ip.clone()))
        } else {
            None
        };
        Some(ConnPermit { _total: total, ip })
    }
}

// === impl ConnPermit ===

impl Drop for ConnPermit {
    fn drop(&mut self) {
        if let Some((ip, counts)) = self.ip.take() {
            let mut counts = counts.lock();
            if let Some(n) = counts.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&ip);
                }
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
        assert!(limits.admit(a).is_some(), "released on drop");
    }
}
