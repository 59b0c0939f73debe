//! The listeners one WebSocket address serves, by HTTP path. A reload
//! adds and removes entries while the address keeps serving; each entry
//! has its own stop and grace tokens, so that a removed listener's
//! connections drain as on shutdown while its neighbours serve on.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::{ListenerCell, Serve};

/// One listener on the address. Its fields are open to the crate: a pair
/// the address's router hands to a connection as it is, nothing to keep
/// consistent between them.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The listener as it serves now.
    pub(crate) cell: Arc<ListenerCell>,
    /// Its connections' stop and grace tokens (children of the address's).
    pub(crate) ctx: Serve,
}

/// Path → listener (paths are unique per address: validation).
#[derive(Debug, Default)]
pub(crate) struct Paths(RwLock<HashMap<String, Entry>>);

// === impl Paths ===

impl Paths {
    /// The listener on `path`, if any.
    pub(crate) fn get(&self, path: &str) -> Option<Entry> {
        self.0.read().get(path).cloned()
    }

    /// Serves `entry` on `path` from now on.
    pub(crate) fn insert(&self, path: String, entry: Entry) {
        self.0.write().insert(path, entry);
    }

    /// Stops serving `path` (new upgrades get 404); returns its entry.
    pub(crate) fn remove(&self, path: &str) -> Option<Entry> {
        self.0.write().remove(path)
    }

    /// Every listener's cell.
    pub(crate) fn cells(&self) -> Vec<Arc<ListenerCell>> {
        self.0.read().values().map(|e| e.cell.clone()).collect()
    }
}
