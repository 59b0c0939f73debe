//! A listener's current [`Listener`], swapped whole by a configuration
//! reload.
//!
//! Connections hold the cell, not a listener: every request reads the
//! listener once, when it is admitted, and keeps its router until it is
//! answered, so a reload changes what the *next* request sees (routes,
//! policy, limits, timeouts) without touching calls in flight or closing
//! anything. A request thus never mixes two generations, and the old
//! router (with the upstreams it names) is freed once its last request is
//! answered, which is what a drained upstream waits for.

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
