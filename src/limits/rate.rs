//! Rate limits (GCRA, via governor): per connection, per named client (one
//! bucket for all of its connections), per client IP and global, each
//! with a rate and a burst; optional per-method weights;
//! every batch item counts. A message over a limit gets the dialect's
//! `rate_limited` error, not a disconnect, until a client keeps going past
//! the abuse threshold: then the connection is closed (1008).
//!
//! The per-IP state is a map keyed by client address. Its bound: every
//! [`PRUNE_INTERVAL`] the listener drops the entries whose bucket is full
//! again (they limit nothing), so the map holds the addresses seen within
//! about one interval, plus those still being limited. The per-client
//! state is one bucket per configured client with a rate (at most
//! [`crate::config::clients::MAX_CLIENTS`] per listener), made with the
//! limits.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio_util::sync::CancellationToken;

/// How often a listener prunes its per-IP rate state.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(30);

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
    /// The named client's rate, shared by its connections.
    Client,
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
    /// One bucket per named client with a rate of its own.
    clients: HashMap<Arc<str>, DefaultDirectRateLimiter>,
    weights: HashMap<String, NonZeroU32>,
    abuse_threshold: u32,
    /// Set once a pruning task runs for `per_ip` (one per listener).
    pruning: AtomicBool,
}

/// One connection's view of the limits.
#[derive(Debug)]
pub struct ConnectionRate {
    shared: Arc<RateLimits>,
    own: Option<DefaultDirectRateLimiter>,
    ip: IpAddr,
    /// The named client whose bucket this connection is charged to.
    client: Option<Arc<str>>,
    /// Refusals in a row; reset by any allowed message.
    strikes: u32,
}

// === impl Limited ===

impl Limited {
    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Limited::Connection => "rate_connection",
            Limited::Client => "rate_client",
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
        Self::with_clients(
            connection,
            per_ip,
            global,
            Vec::new(),
            weights,
            abuse_threshold,
        )
    }

    /// Limits from config, with a bucket for each named client in
    /// `clients` (its name and its rate).
    pub fn with_clients(
        connection: Option<Rate>,
        per_ip: Option<Rate>,
        global: Option<Rate>,
        clients: Vec<(Arc<str>, Rate)>,
        weights: HashMap<String, NonZeroU32>,
        abuse_threshold: u32,
    ) -> Arc<Self> {
        Arc::new(RateLimits {
            connection,
            per_ip: per_ip.map(|r| RateLimiter::keyed(quota(r))),
            global: global.map(|r| RateLimiter::direct(quota(r))),
            clients: clients
                .into_iter()
                .map(|(name, r)| (name, RateLimiter::direct(quota(r))))
                .collect(),
            weights,
            abuse_threshold,
            pruning: AtomicBool::new(false),
        })
    }

    /// Forgets the client IPs whose per-IP bucket is full again (their
    /// state limits nothing) and returns the memory; returns how many IPs
    /// are still tracked.
    pub fn prune(&self) -> usize {
        let Some(per_ip) = &self.per_ip else { return 0 };
        per_ip.retain_recent();
        per_ip.shrink_to_fit();
        per_ip.len()
    }

    /// Client IPs with per-IP state.
    pub fn tracked_ips(&self) -> usize {
        self.per_ip.as_ref().map_or(0, |l| l.len())
    }

    /// Prunes the per-IP state every `every` until `stop` is cancelled or
    /// the limits are dropped. Only the first call starts a task, and none
    /// is needed without a per-IP rate.
    pub fn start_pruning(self: &Arc<Self>, every: Duration, stop: CancellationToken) {
        if self.per_ip.is_none() || self.pruning.swap(true, Ordering::AcqRel) {
            return;
        }
        let limits = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(limits) = limits.upgrade() else {
                    return;
                };
                let left = limits.prune();
                tracing::trace!(tracked_ips = left, "per-IP rate state pruned");
            }
        });
    }

    /// True once [`start_pruning`](Self::start_pruning) has started a task.
    pub fn is_pruning(&self) -> bool {
        self.pruning.load(Ordering::Acquire)
    }

    /// True when no limit is configured.
    pub fn is_off(&self) -> bool {
        self.connection.is_none()
            && self.per_ip.is_none()
            && self.global.is_none()
            && self.clients.is_empty()
    }

    /// The limiter of a new connection from `ip`.
    pub fn connection(self: &Arc<Self>, ip: IpAddr) -> ConnectionRate {
        self.connection_of(ip, None)
    }

    /// The limiter of a new connection from `ip` of named client `client`
    /// (`None`: the unnamed client): charged to that client's bucket too,
    /// when it has a rate.
    pub fn connection_of(self: &Arc<Self>, ip: IpAddr, client: Option<&str>) -> ConnectionRate {
        let client = client.and_then(|name| {
            self.clients
                .get_key_value(name)
                .map(|(name, _)| name.clone())
        });
        ConnectionRate {
            own: self.connection.map(|r| RateLimiter::direct(quota(r))),
            shared: self.clone(),
            ip,
            client,
            strikes: 0,
        }
    }
}

// === impl ConnectionRate ===

impl ConnectionRate {
    /// True when this connection's state was made from `limits` (a reload
    /// that changed the rates makes new ones).
    pub fn follows(&self, limits: &Arc<RateLimits>) -> bool {
        Arc::ptr_eq(&self.shared, limits)
    }

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
        let client = self
            .client
            .as_ref()
            .and_then(|c| self.shared.clients.get(c));
        if let Some(client) = client {
            if !matches!(client.check_n(weight), Ok(Ok(()))) {
                return Some(Limited::Client);
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
    fn a_named_clients_connections_share_its_bucket() {
        let reader: Arc<str> = Arc::from("reader");
        let clients = vec![(reader.clone(), rate(1, 3).expect("rate"))];
        let limits = RateLimits::with_clients(None, None, None, clients, HashMap::new(), 0);
        assert!(!limits.is_off());
        let mut a = limits.connection_of(IP, Some("reader"));
        let mut b = limits.connection_of(IP, Some("reader"));
        assert_eq!(a.check("m"), Verdict::Allow);
        assert_eq!(b.check("m"), Verdict::Allow);
        assert_eq!(a.check("m"), Verdict::Allow);
        assert_eq!(b.check("m"), Verdict::Limit(Limited::Client));
        assert_eq!(a.check("m"), Verdict::Limit(Limited::Client));
        // Another client, the unnamed one and a client with no rate of
        // its own are not charged to it.
        assert_eq!(
            limits.connection_of(IP, Some("operator")).check("m"),
            Verdict::Allow
        );
        assert_eq!(limits.connection(IP).check("m"), Verdict::Allow);
    }

    #[test]
    fn pruning_forgets_ips_that_limit_nothing() {
        // 1,000 per second, burst 1: a bucket is full again 1 ms after use.
        let limits = RateLimits::new(None, rate(1000, 1), None, HashMap::new(), 0);
        for i in 0..100_000u32 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(i));
            assert_eq!(limits.connection(ip).check("m"), Verdict::Allow);
        }
        assert_eq!(limits.tracked_ips(), 100_000);
        // Wait on the state, not on a clock: every bucket refills.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while limits.prune() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(limits.tracked_ips(), 0);
    }

    #[test]
    fn pruning_keeps_ips_still_limited() {
        // 1 per second, burst 3,600, all used: the bucket is full again
        // only an hour later, however slow the machine is meanwhile.
        const BURST: u32 = 3600;
        let limits = RateLimits::new(None, rate(1, BURST), None, HashMap::new(), 0);
        let mut c = limits.connection(IP);
        for _ in 0..BURST {
            assert_eq!(c.check("m"), Verdict::Allow);
        }
        assert_eq!(limits.prune(), 1, "a used bucket is kept");
        assert_eq!(limits.tracked_ips(), 1);
        // The kept state still limits: only the cells refilled since (one
        // a second) are allowed, not a fresh burst.
        let mut c = limits.connection(IP);
        let allowed = (0..BURST)
            .filter(|_| c.check("m") == Verdict::Allow)
            .count();
        assert!(
            allowed < BURST as usize / 2,
            "{allowed} allowed: the state was forgotten"
        );
    }

    #[tokio::test]
    async fn the_pruning_task_prunes_until_stopped() {
        let limits = RateLimits::new(None, rate(1000, 1), None, HashMap::new(), 0);
        for i in 0..1_000u32 {
            let _ = limits
                .connection(IpAddr::V4(std::net::Ipv4Addr::from(i)))
                .check("m");
        }
        let stop = CancellationToken::new();
        assert!(!limits.is_pruning());
        limits.start_pruning(Duration::from_millis(10), stop.clone());
        assert!(limits.is_pruning());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while limits.tracked_ips() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(limits.tracked_ips(), 0);
        // The task holds the limits weakly; cancelling `stop` ends it, and
        // with it that reference.
        assert_eq!(Arc::weak_count(&limits), 1, "the task is running");
        stop.cancel();
        while Arc::weak_count(&limits) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(Arc::weak_count(&limits), 0, "the task stopped");
        // Without a per-IP rate there is nothing to prune: no task.
        let none = RateLimits::new(rate(1, 1), None, None, HashMap::new(), 0);
        none.start_pruning(Duration::from_millis(10), CancellationToken::new());
        assert!(!none.is_pruning());
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
