//! The subscriptions open on this instance: one pull task each, and what
//! each has been sent and may acknowledge. An entry leaves when its
//! deliveries end (the receiver dropped, the consumer deleted) or when the
//! id is opened again or deleted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_nats::jetstream::consumer::pull::Stream as Pull;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::delivery::{self, Held};
use crate::persist::{Meters, Stored, DELIVERY_QUEUE};

/// Open subscriptions by id.
#[derive(Default)]
pub(super) struct OpenSubs {
    map: Arc<Mutex<HashMap<String, OpenSub>>>,
    /// Tells one opening of an id from the next.
    openings: AtomicU64,
}

/// One subscription open on this instance.
struct OpenSub {
    opening: u64,
    holding: Holding,
    task: AbortHandle,
}

/// What an open subscription may acknowledge, shared by its pump and its
/// acknowledgements.
#[derive(Clone)]
pub(super) struct Holding {
    /// Its deliveries and acknowledgements.
    pub(super) held: Arc<Mutex<Held>>,
    /// Taken while its acknowledgement state is saved: one write at a
    /// time, each of the state as it is when the write starts, so that an
    /// older state never lands after a newer one.
    pub(super) saving: Arc<tokio::sync::Mutex<()>>,
}

/// Counts an attached subscription down when its task ends.
struct Attached(prometheus::IntGauge);

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.dec();
    }
}

// === impl OpenSubs ===

impl OpenSubs {
    /// Starts the task pulling `messages` of subscription `id` into the
    /// returned receiver (ending a previous opening of `id`).
    pub(super) fn attach(
        &self,
        id: &str,
        topic: &str,
        messages: Pull,
        held: Held,
        meters: &Meters,
    ) -> mpsc::Receiver<Stored> {
        let held = Arc::new(Mutex::new(held));
        let (tx, rx) = mpsc::channel(DELIVERY_QUEUE);
        let opening = self.openings.fetch_add(1, Ordering::Relaxed);
        let pump = delivery::pump(topic.to_owned(), messages, tx, held.clone(), meters.clone());
        let map = self.map.clone();
        let key = id.to_owned();
        let attached = meters.attached.clone();
        attached.inc();
        // Hold the map's lock while spawning, so that the task's own
        // removal comes after the insertion below.
        let mut subs = self.map.lock();
        let task = tokio::spawn(async move {
            // Counted down however the task ends (aborted included).
            let _attached = Attached(attached);
            pump.await;
            let mut map = map.lock();
            if map.get(&key).is_some_and(|s| s.opening == opening) {
                map.remove(&key);
            }
        });
        let sub = OpenSub {
            opening,
            holding: Holding {
                held,
                saving: Arc::default(),
            },
            task: task.abort_handle(),
        };
        if let Some(old) = subs.insert(id.to_owned(), sub) {
            old.task.abort();
        }
        rx
    }

    /// Ends the deliveries of `id` on this instance, if open.
    pub(super) fn close(&self, id: &str) {
        if let Some(old) = self.map.lock().remove(id) {
            old.task.abort();
        }
    }

    /// Ends every delivery on this instance.
    pub(super) fn close_all(&self) {
        for (_, sub) in self.map.lock().drain() {
            sub.task.abort();
        }
    }

    /// What `id` holds, if it is open here.
    pub(super) fn holding(&self, id: &str) -> Option<Holding> {
        self.map.lock().get(id).map(|s| s.holding.clone())
    }
}

impl std::fmt::Debug for OpenSubs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenSubs")
            .field("open", &self.map.lock().len())
            .finish()
    }
}
