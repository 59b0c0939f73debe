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

use parking_lot::RwLock;

use super::Listener;

/// The listener as it serves now.
#[derive(Debug)]
pub struct ListenerCell {
    /// Read per request (an uncontended read lock and an `Arc` clone);
    /// written once per reload.
    current: RwLock<Arc<Listener>>,
}

// === impl ListenerCell ===

impl ListenerCell {
    /// A cell serving `listener`.
    pub fn new(listener: Arc<Listener>) -> Arc<Self> {
        Arc::new(ListenerCell {
            current: RwLock::new(listener),
        })
    }

    /// The listener to use for what is being admitted now.
    pub fn load(&self) -> Arc<Listener> {
        self.current.read().clone()
    }

    /// Serves `listener` from now on; returns the one it replaces.
    pub fn store(&self, listener: Arc<Listener>) -> Arc<Listener> {
        std::mem::replace(&mut *self.current.write(), listener)
    }
}
