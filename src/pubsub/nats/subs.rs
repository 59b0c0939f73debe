//! The backbone's NATS subscriptions: one per distinct pattern held on
//! this instance, opened and closed by one task as the broker's interest
//! changes, and one reading task each.
//!
//! The broker reports changes under its lock ([`Subs::want`]: a map
//! insert and a wake-up, never a wait); the task applies the latest wish
//! for each pattern.
//!
//! # Per-pattern delivery
//!
//! Several subscriptions of this instance may match one subject: NATS then
//! delivers the message to each, with no order between their streams. So
//! no subscription serves another's holders: what the subscription of a
//! pattern receives goes only to the connections holding that very
//! pattern ([`Broker::through`]), and, for a connection holding several
//! patterns that match, only through its oldest one. Opening or closing
//! one subscription therefore never loses nor repeats anything for the
//! holders of other patterns; a message that crosses NATS once per
//! matching subscription is decoded only by those with someone to
//! deliver it to. What a connection gives up by unsubscribing one of its
//! own overlapping patterns is in `docs/pubsub.md`.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use async_nats::{Client, Message, Subscriber};
use futures_util::StreamExt;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::meters::{Loss, Meters};
use super::{wire, Settings};
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

/// Subscribes and unsubscribes as the changes come, until `stop`. Each
/// open subscription's reading task: aborting it drops the subscriber,
/// which unsubscribes.
async fn apply(subs: Arc<Subs>, client: Client, reader: Arc<Reader>, stop: CancellationToken) {
    let mut open: HashMap<Box<str>, AbortHandle> = HashMap::new();
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
                        let task = tokio::spawn(read(pattern.clone(), subscriber, reader.clone()));
                        open.insert(pattern, task.abort_handle());
                        reader.meters.subscriptions.inc();
                    }
                    Err(e) => {
                        tracing::warn!(target: "switchyard::pubsub", error = %e, "NATS subscribe");
                    }
                }
            } else if !on {
                if let Some(task) = open.remove(&pattern) {
                    task.abort();
                    reader.meters.subscriptions.dec();
                }
            }
        }
    }
    for (_, task) in open.drain() {
        task.abort();
        reader.meters.subscriptions.dec();
    }
}

/// Hands what the subscription of `pattern` receives to the broker.
async fn read(pattern: Box<str>, mut subscriber: Subscriber, reader: Arc<Reader>) {
    while let Some(message) = subscriber.next().await {
        reader.receive(&pattern, &message);
    }
}

// === impl Reader ===

impl Reader {
    fn receive(&self, pattern: &str, message: &Message) {
        let settings = &self.settings;
        let Ok(topic) = wire::topic_of(&settings.subject_prefix, message.subject.as_str()) else {
            self.meters.drop(Loss::Invalid);
            return;
        };
        let Some(broker) = self.broker.upgrade() else {
            return;
        };
        // This pattern's holders that get the event through it; none when
        // each gets it through an older pattern of theirs (another
        // subscription's copy), so nothing is decoded or counted here.
        let targets = broker.through(pattern, topic);
        if targets.is_empty() {
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
        Broker::deliver(&targets, topic, &data);
        self.meters.received.inc();
    }
}
