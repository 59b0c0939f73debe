//! Rate limits (GCRA, via governor): per connection, per client IP and
//! global, each with a rate and a burst; optional per-method weights;
//! every batch item counts. A message over a limit gets the dialect's
//! `rate_limited` error, not a disconnect, until a client keeps going past
//! the abuse threshold: then the connection is closed (1008).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

/// A rate with its burst, in messages per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Sustained messages per second.
    pub per_second: NonZeroU32,
    /// Messages allowed at once above the sustained rate.
    pub burst: NonZeroU32,
}

/// Which limit refused a message (a closed set: also a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limited {
    /// The connection's own rate.
    Connection,
    /// The client IP's rate, shared by its connections.
    Ip,
    /// The listener-wide rate.
    Global,
}

/// What the caller must do with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within every limit.
    Allow,
    /// Over a limit: answer `rate_limited`.
    Limit(Limited),
    /// Over a limit once too often in a row: close the connection (1008).
    Abuse(Limited),
}

/// The limits of one listener, shared by its connections.
#[derive(Debug)]
pub struct RateLimits {
    connection: Option<Rate>,
    per_ip: Option<DefaultKeyedRateLimiter<IpAddr>>,
    global: Option<DefaultDirectRateLimiter>,
    weights: HashMap<String, NonZeroU32>,
    abuse_threshold: u32,
}

/// One connection's view of the limits.
#[derive(Debug)]
pub struct ConnectionRate {
    shared: Arc<RateLimits>,
    own: Option<DefaultDirectRateLimiter>,
    ip: IpAddr,
    /// Refusals in a row; reset by any allowed message.
    strikes: u32,
}

// === impl Limited ===

impl Limited {
    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Limited::Connection => "rate_connection",
            Limited::Ip => "rate_ip",
            Limited::Global => "rate_global",
        }
    }
}

// === impl RateLimits ===

impl RateLimits {
    /// Limits from config; `None` rates are off.
    pub fn new(
        connection: Option<Rate>,
        per_ip: Option<Rate>,
        global: Option<Rate>,
        weights: HashMap<String, NonZeroU32>,
        abuse_threshold: u32,
    ) -> Arc<Self> {
        Arc::new(RateLimits {
            connection,
            per_ip: per_ip.map(|r| RateLimiter::keyed(quota(r))),
            global: global.map(|r| RateLimiter::direct(quota(r))),
            weights,
            abuse_threshold,
        })
    }

    /// True when no limit is configured.
    pub fn is_off(&self) -> bool {
        self.connection.is_none() && self.per_ip.is_none() && self.global.is_none()
    }

    /// The limiter of a new connection from `ip`.
    pub fn connection(self: &Arc<Self>, ip: IpAddr) -> ConnectionRate {
        ConnectionRate {
            own: self.connection.map(|r| RateLimiter::direct(quota(r))),
            shared: self.clone(),
            ip,
            strikes: 0,
        }
    }
}

// === impl ConnectionRate ===

impl ConnectionRate {
    /// Charges one message (`method`'s weight) against every limit.
    pub fn check(&mut self, method: &str) -> Verdict {
        let weight = self
            .shared
            .weights
            .get(method)
            .copied()
            .unwrap_or(NonZeroU32::MIN);
        let refused = self.refusal(weight);
        match refused {
            None => {
                self.strikes = 0;
                Verdict::Allow
            }
            Some(limit) => {
                self.strikes = self.strikes.saturating_add(1);
                if self.shared.abuse_threshold > 0 && self.strikes > self.shared.abuse_threshold {
                    Verdict::Abuse(limit)
                } else {
                    Verdict::Limit(limit)
                }
            }
        }
    }

    fn refusal(&self, weight: NonZeroU32) -> Option<Limited> {
        // A weight above the burst can never pass: governor reports it as
        // an error, which counts as over the limit.
        if let Some(own) = &self.own {
            if !matches!(own.check_n(weight), Ok(Ok(()))) {
                return Some(Limited::Connection);
            }
        }
        if let Some(per_ip) = &self.shared.per_ip {
            if !matches!(per_ip.check_key_n(&self.ip, weight), Ok(Ok(()))) {
                return Some(Limited::Ip);
            }
        }
        if let Some(global) = &self.shared.global {
            if !matches!(global.check_n(weight), Ok(Ok(()))) {
                return Some(Limited::Global);
            }
        }
        None
    }
}

fn quota(rate: Rate) -> Quota {
    Quota::per_second(rate.per_second).allow_burst(rate.burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_second: u32, burst: u32) -> Option<Rate> {
        Some(Rate {
            per_second: NonZeroU32::new(per_second)?,
            burst: NonZeroU32::new(burst)?,
        })
    }

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn burst_then_limited_then_abuse() {
        let limits = RateLimits::new(rate(1, 3), None, None, HashMap::new(), 2);
        let mut c = limits.connection(IP);
        for _ in 0..3 {
            assert_eq!(c.check("m"), Verdict::Allow);
        }
        assert_eq!(c.check("m"), Verdict::Limit(Limited::Connection));
        assert_eq!(c.check("m"), Verdict::Limit(Limited::Connection));
        assert_eq!(c.check("m"), Verdict::Abuse(Limited::Connection));
    }

    #[test]
    fn connections_are_independent_but_share_the_ip_limit() {
        let limits = RateLimits::new(rate(1, 2), rate(1, 3), None, HashMap::new(), 0);
        let mut a = limits.connection(IP);
        let mut b = limits.connection(IP);
        assert_eq!(a.check("m"), Verdict::Allow);
        assert_eq!(a.check("m"), Verdict::Allow);
        assert_eq!(a.check("m"), Verdict::Limit(Limited::Connection));
        assert_eq!(b.check("m"), Verdict::Allow);
        assert_eq!(b.check("m"), Verdict::Limit(Limited::Ip));
        let other = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(limits.connection(other).check("m"), Verdict::Allow);
    }

    #[test]
    fn weights_charge_more() {
        let mut weights = HashMap::new();
        weights.insert("heavy".to_owned(), NonZeroU32::new(3).expect("3"));
        let limits = RateLimits::new(None, None, rate(1, 4), weights, 0);
        let mut c = limits.connection(IP);
        assert_eq!(c.check("heavy"), Verdict::Allow);
        assert_eq!(c.check("heavy"), Verdict::Limit(Limited::Global));
        assert_eq!(c.check("light"), Verdict::Allow);
    }
}
