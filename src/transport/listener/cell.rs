//! A listener's current [`Listener`], swapped whole by a configuration
//! reload.
//!
//! Connections hold the cell, not a listener: a request reads the
//! listener while it is admitted (its batch limit, its rate limits, then
//! its router) and keeps that router until it is answered, so a reload
//! changes what the *next* request sees (routes, policy, limits,
//! timeouts) without touching calls in flight or closing anything. The
//! request's trip (policy, route, upstream, timeout) is one generation's
//! router; only a reload landing between the admission reads can give a
//! request the limits of one generation and the router of the next. The
//! old router (with the upstreams it names) is freed once its last request
//! is answered, which is what a drained upstream waits for.

use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use super::Listener;

/// The listener as it serves now.
#[derive(Debug)]
pub struct ListenerCell {
    /// Read several times per request, from every worker thread; written
    /// once per reload. `ArcSwap` reads write nothing shared (no lock, no
    /// reference count), so the readers of one listener do not bounce a
    /// cache line between cores.
    current: ArcSwap<Listener>,
}

// === impl ListenerCell ===

impl ListenerCell {
    /// A cell serving `listener`.
    pub fn new(listener: Arc<Listener>) -> Arc<Self> {
        Arc::new(ListenerCell {
            current: ArcSwap::new(listener),
        })
    }

    /// The listener to use for what is being admitted now, to keep.
    pub fn load(&self) -> Arc<Listener> {
        self.current.load_full()
    }

    /// The listener as of now, to read at once (a request's hot path):
    /// no reference count is taken unless the guard is cloned.
    pub fn now(&self) -> Guard<Arc<Listener>> {
        self.current.load()
    }

    /// Serves `listener` from now on; returns the one it replaces.
    pub fn store(&self, listener: Arc<Listener>) -> Arc<Listener> {
        self.current.swap(listener)
    }
}
