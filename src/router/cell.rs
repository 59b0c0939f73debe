//! A listener's current [`Route`], swapped whole by a configuration reload.
//!
//! Connections hold the cell, not a route: every request reads the route
//! once, when it is admitted, and keeps that `Arc` until it is answered, so
//! a reload changes what the *next* request sees (routes, policy, limits,
//! timeouts) without touching calls in flight or closing anything. A
//! request thus never mixes two generations, and the old route (with the
//! upstreams it names) is freed once its last request is answered, which
//! is what a drained upstream waits for.

use std::sync::Arc;

use parking_lot::RwLock;

use super::Route;

/// The route a listener serves now.
#[derive(Debug)]
pub struct RouteCell {
    /// Read per request (an uncontended read lock and an `Arc` clone);
    /// written once per reload.
    current: RwLock<Arc<Route>>,
}

// === impl RouteCell ===

impl RouteCell {
    /// A cell serving `route`.
    pub fn new(route: Arc<Route>) -> Arc<Self> {
        Arc::new(RouteCell {
            current: RwLock::new(route),
        })
    }

    /// The route to use for what is being admitted now.
    pub fn load(&self) -> Arc<Route> {
        self.current.read().clone()
    }

    /// Serves `route` from now on; returns the one it replaces.
    pub fn store(&self, route: Arc<Route>) -> Arc<Route> {
        std::mem::replace(&mut *self.current.write(), route)
    }
}

// === impl Route ===

impl Route {
    /// This route, taking over what `old` (the same listener's previous
    /// generation) keeps across a reload: its rate-limit buckets when the
    /// rates are unchanged (changed rates start with full buckets), and
    /// its open-connection counts under the new caps.
    pub fn succeeding(mut self, old: &Route) -> Self {
        let (p, q) = (&self.cfg.protection, &old.cfg.protection);
        let same_rates = p.rate == q.rate
            && p.ip_rate == q.ip_rate
            && p.global_rate == q.global_rate
            && p.method_weights == q.method_weights
            && p.abuse_threshold == q.abuse_threshold;
        if same_rates {
            self.rate = old.rate.clone();
        }
        self.conns = old
            .conns
            .with_caps(p.max_connections, p.max_connections_per_ip);
        self
    }
}
