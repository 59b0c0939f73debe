//! The backbone's NATS subscriptions: one per distinct pattern held on
//! this instance, opened and closed by one task as the broker's interest
//! changes, and one reading task each.
//!
//! The broker reports changes under its lock ([`Subs::want`]: a map
//! insert and a wake-up, never a wait); the task applies the latest wish
//! for each pattern. Several subscriptions of this instance may match one
//! subject: NATS then delivers a message to each, and only the oldest
//! matching one (lowest id, in an index of the open ones) fans it out. A
//! newer subscription never takes a subject over from an older one, so
//! one subject's events keep one path and their order.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use async_nats::{Client, Message, Subscriber};
use futures_util::StreamExt;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::meters::{Loss, Meters};
use super::{wire, Settings};
use crate::pubsub::index::Index;
use crate::pubsub::Broker;

/// Interest changes not applied yet.
pub(super) struct Subs {
    /// The latest wish per pattern (true: subscribe); at most one entry
    /// per distinct pattern, bounded with them by the broker's limits.
    changes: Mutex<HashMap<Box<str>, bool>>,
    wake: Notify,
}

/// What every reading task shares.
struct Reader {
    settings: Settings,
    broker: Weak<Broker>,
    meters: Meters,
    /// The open subscriptions' patterns → ids, to find the oldest one
    /// matching a subject.
    open: RwLock<Index<u64>>,
}

/// One open subscription.
struct Open {
    id: u64,
    /// Its reading task; aborting it drops the subscriber, which
    /// unsubscribes.
    task: AbortHandle,
}

// === impl Subs ===

impl Subs {
    /// Starts the task that applies interest changes until `stop`.
    pub(super) fn start(
        client: Client,
        settings: Settings,
        broker: Weak<Broker>,
        meters: Meters,
        stop: CancellationToken,
    ) -> Arc<Subs> {
        let subs = Arc::new(Subs {
            changes: Mutex::new(HashMap::new()),
            wake: Notify::new(),
        });
        let reader = Arc::new(Reader {
            settings,
            broker,
            meters,
            open: RwLock::new(Index::new()),
        });
        tokio::spawn(apply(subs.clone(), client, reader, stop));
        subs
    }

    /// `pattern` gained its first local holder (`on`) or lost its last.
    pub(super) fn want(&self, pattern: &str, on: bool) {
        self.changes.lock().insert(Box::from(pattern), on);
        self.wake.notify_one();
    }
}

/// Subscribes and unsubscribes as the changes come, until `stop`.
async fn apply(subs: Arc<Subs>, client: Client, reader: Arc<Reader>, stop: CancellationToken) {
    let mut open: HashMap<Box<str>, Open> = HashMap::new();
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = subs.wake.notified() => {}
        }
        let changes = std::mem::take(&mut *subs.changes.lock());
        for (pattern, on) in changes {
            if on && !open.contains_key(&pattern) {
                let subject = wire::subject(&reader.settings.subject_prefix, &pattern);
                match client.subscribe(subject).await {
                    Ok(subscriber) => {
                        next_id += 1;
                        reader.open.write().insert(&pattern, next_id);
                        let task = tokio::spawn(read(next_id, subscriber, reader.clone()));
                        let entry = Open {
                            id: next_id,
                            task: task.abort_handle(),
                        };
                        open.insert(pattern, entry);
                        reader.meters.subscriptions.inc();
                    }
                    Err(e) => {
                        tracing::warn!(target: "switchyard::pubsub", error = %e, "NATS subscribe");
                    }
                }
            } else if !on {
                if let Some(gone) = open.remove(&pattern) {
                    reader.open.write().remove(&pattern, gone.id);
                    gone.task.abort();
                    reader.meters.subscriptions.dec();
                }
            }
        }
    }
    for (_, gone) in open.drain() {
        gone.task.abort();
        reader.meters.subscriptions.dec();
    }
}

/// Hands what subscription `id` receives to the broker.
async fn read(id: u64, mut subscriber: Subscriber, reader: Arc<Reader>) {
    let mut ids = Vec::new();
    while let Some(message) = subscriber.next().await {
        reader.receive(id, &message, &mut ids);
    }
}

// === impl Reader ===

impl Reader {
    fn receive(&self, id: u64, message: &Message, ids: &mut Vec<u64>) {
        let settings = &self.settings;
        let Ok(topic) = wire::topic_of(&settings.subject_prefix, message.subject.as_str()) else {
            self.meters.drop(Loss::Invalid);
            return;
        };
        // The oldest matching subscription delivers; the others skip.
        self.open.read().matches(topic, ids);
        if ids.first() != Some(&id) {
            return;
        }
        let cbor = message
            .headers
            .as_ref()
            .and_then(|h| h.get(wire::ENCODING_HEADER))
            .is_some_and(|v| v.as_str() == "cbor");
        let data = match wire::decode(&message.payload, cbor, settings.max_payload_bytes) {
            Ok(data) => data,
            Err(wire::WireError::Oversize) => return self.meters.drop(Loss::Oversize),
            Err(_) => return self.meters.drop(Loss::Invalid),
        };
        let Some(broker) = self.broker.upgrade() else {
            return;
        };
        broker.fan_out(topic, &data);
        self.meters.received.inc();
    }
}
