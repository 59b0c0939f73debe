//! The backbone's NATS subscriptions: one per distinct pattern held on
//! this instance, opened and closed by one task as the broker's interest
//! changes, and one reading task each.
//!
//! The broker reports changes under its lock ([`Subs::want`]: a map
//! insert and a wake-up, never a wait); the task applies the latest wish
//! for each pattern. Several subscriptions of this instance may match one
//! subject: NATS then delivers a message to each, and only the oldest
//! matching one (lowest id, in an index of the open ones) fans it out. A
//! newer subscription never takes a subject over from an older one while
//! that one is open, so one subject's events keep one path and their
//! order.
//!
//! # Closing a subscription that overlaps others
//!
//! Messages of one subject reach this instance through several
//! subscriptions, each read by its own task, so at any moment the newer
//! one may be ahead of the older (it skipped messages the older one has
//! not fanned out yet) or behind it. Closing the older one must neither
//! lose the first kind nor repeat the second. So a subscription whose last
//! local holder leaves is not cut off: it *drains* (async-nats
//! `Subscriber::drain`: NATS unsubscribe, then the messages the client
//! already holds for it, at most `pending_messages`) and goes on fanning
//! out everything it received, staying the oldest in the index until its
//! stream ends. Meanwhile a newer subscription does not guess: a message
//! whose oldest match is a draining subscription is *held*, and so is any
//! message behind a held one. When the draining one has ended, each newer
//! one hands over. NATS sent the messages both match to both, in the same
//! order per publisher, until the unsubscribe; after it, only to the
//! newer one. The drained one kept the fingerprints (topic and payload
//! hash) of the last `pending_messages` messages it fanned out that
//! another subscription also matched; the newer one kept those it skipped
//! for it. What the drained one delivered that the newer one has not
//! received yet is its record (filtered by the newer pattern) after the
//! first occurrence of that skipped run; the newer one, going on in order
//! through what it holds and then what comes, skips a message found in
//! that rest (dropping the entries before it: sent before the newer
//! subscription existed) and delivers one not found (it came after the
//! unsubscribe: nothing of the rest is still to come).
//!
//! Bounds, per subscription: the record, the skipped run and the held
//! messages are each at most `pending_messages` long (a message to hold
//! past it is dropped, counted as `slow_consumer`). Identical messages
//! (same subject and payload) are interchangeable here: a run of them at
//! the cut can be matched further than it was delivered.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use async_nats::{Client, Message, Subscriber};
use futures_util::StreamExt;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{watch, Notify};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::meters::{Loss, Meters};
use super::{wire, Settings};
use crate::pubsub::index::Index;
use crate::pubsub::topic;
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
    /// The subscriptions open or draining: patterns → ids, to find the
    /// oldest one matching a subject, and ids → their shared state.
    open: RwLock<Open>,
    /// Bumped when a draining subscription has ended, so that the
    /// newer ones hand over what they hold.
    ended: watch::Sender<u64>,
}

#[derive(Default)]
struct Open {
    index: Index<u64>,
    subs: HashMap<u64, Arc<Sub>>,
}

/// One subscription, as its reading task and the others see it.
struct Sub {
    id: u64,
    pattern: Box<str>,
    /// Cancelled when its last local holder left: it drains.
    leaving: CancellationToken,
    /// Set once it drained: out of the index, all it received fanned out.
    ended: AtomicBool,
    /// Fingerprints of the last `pending_messages` messages it fanned out
    /// that another subscription also matched, oldest first.
    shared: Mutex<VecDeque<(Box<str>, u64)>>,
}

/// A message held by a newer subscription while an older matching one
/// drains.
struct Held {
    topic: Box<str>,
    message: Message,
    fingerprint: u64,
    /// The draining subscription it waits for.
    wait: Arc<Sub>,
}

/// What a reading task keeps besides its subscription.
struct Local {
    ids: Vec<u64>,
    /// Messages waiting for draining subscriptions, in arrival order; at
    /// most `pending_messages`.
    held: VecDeque<Held>,
    /// The last `pending_messages` messages skipped because an older
    /// subscription delivers them: (its id, fingerprint).
    skipped: VecDeque<(u64, u64)>,
    /// Per older subscription that ended: the fingerprints of what it
    /// delivered that this one has not received yet (see the module docs).
    handovers: Vec<Handover>,
}

struct Handover {
    id: u64,
    pattern: Box<str>,
    rest: VecDeque<u64>,
}

/// The task of one subscription.
struct Task {
    sub: Arc<Sub>,
    abort: AbortHandle,
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
            open: RwLock::new(Open::default()),
            ended: watch::Sender::new(0),
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
    let mut open: HashMap<Box<str>, Task> = HashMap::new();
    // Draining tasks, until they end (at most one per pattern closed
    // while its messages were still being fanned out).
    let mut draining: Vec<AbortHandle> = Vec::new();
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = subs.wake.notified() => {}
        }
        draining.retain(|task| !task.is_finished());
        let changes = std::mem::take(&mut *subs.changes.lock());
        for (pattern, on) in changes {
            if on && !open.contains_key(&pattern) {
                next_id += 1;
                let sub = Arc::new(Sub {
                    id: next_id,
                    pattern: pattern.clone(),
                    leaving: CancellationToken::new(),
                    ended: AtomicBool::new(false),
                    shared: Mutex::new(VecDeque::new()),
                });
                // In the index before NATS sends it anything, so that an
                // older subscription records every message it shares.
                reader.insert(&sub);
                let subject = wire::subject(&reader.settings.subject_prefix, &pattern);
                match client.subscribe(subject).await {
                    Ok(subscriber) => {
                        let task = tokio::spawn(read(sub.clone(), subscriber, reader.clone()));
                        let abort = task.abort_handle();
                        open.insert(pattern, Task { sub, abort });
                        reader.meters.subscriptions.inc();
                    }
                    Err(e) => {
                        reader.remove(&sub);
                        tracing::warn!(target: "switchyard::pubsub", error = %e, "NATS subscribe");
                    }
                }
            } else if !on {
                if let Some(gone) = open.remove(&pattern) {
                    gone.sub.leaving.cancel();
                    draining.push(gone.abort);
                    reader.meters.subscriptions.dec();
                }
            }
        }
    }
    for (_, gone) in open.drain() {
        gone.abort.abort();
        reader.meters.subscriptions.dec();
    }
    for task in draining {
        task.abort();
    }
}

/// Hands what subscription `sub` receives to the broker; when it leaves,
/// drains it, and ends once nothing it holds waits for another one.
async fn read(sub: Arc<Sub>, mut subscriber: Subscriber, reader: Arc<Reader>) {
    let mut local = Local {
        ids: Vec::new(),
        held: VecDeque::new(),
        skipped: VecDeque::new(),
        handovers: Vec::new(),
    };
    let mut ended = reader.ended.subscribe();
    let mut draining = false;
    let mut done = false;
    while !done || !local.held.is_empty() {
        tokio::select! {
            message = subscriber.next(), if !done => match message {
                Some(message) => reader.receive(&sub, message, &mut local),
                None => done = true,
            },
            () = sub.leaving.cancelled(), if !draining && !done => {
                draining = true;
                if let Err(e) = subscriber.drain().await {
                    tracing::warn!(target: "switchyard::pubsub", error = %e, "NATS drain");
                    done = true;
                }
            }
            changed = ended.changed(), if !local.held.is_empty() => {
                if changed.is_err() {
                    break;
                }
                reader.hand_over(&sub, &mut local);
            }
        }
    }
    reader.remove(&sub);
    sub.ended.store(true, Ordering::Release);
    reader.ended.send_modify(|n| *n = n.wrapping_add(1));
}

/// Identifies a message among those of its subject (see the module
/// docs): subject, encoding and payload.
fn fingerprint(topic: &str, message: &Message) -> u64 {
    let mut hasher = DefaultHasher::new();
    topic.hash(&mut hasher);
    is_cbor(message).hash(&mut hasher);
    message.payload.as_ref().hash(&mut hasher);
    hasher.finish()
}

fn is_cbor(message: &Message) -> bool {
    message
        .headers
        .as_ref()
        .and_then(|h| h.get(wire::ENCODING_HEADER))
        .is_some_and(|v| v.as_str() == "cbor")
}

/// Where the first occurrence of `part` in `whole` ends (0 if `part` is
/// empty or absent); Knuth–Morris–Pratt, linear in both.
fn end_of(part: &[u64], whole: &[u64]) -> usize {
    if part.is_empty() {
        return 0;
    }
    let mut fail = vec![0usize; part.len()];
    let mut k = 0;
    for i in 1..part.len() {
        while k > 0 && part[i] != part[k] {
            k = fail[k - 1];
        }
        if part[i] == part[k] {
            k += 1;
        }
        fail[i] = k;
    }
    let mut q = 0;
    for (i, &x) in whole.iter().enumerate() {
        while q > 0 && x != part[q] {
            q = fail[q - 1];
        }
        if x == part[q] {
            q += 1;
        }
        if q == part.len() {
            return i + 1;
        }
    }
    0
}

// === impl Reader ===

impl Reader {
    fn insert(&self, sub: &Arc<Sub>) {
        let mut open = self.open.write();
        open.index.insert(&sub.pattern, sub.id);
        open.subs.insert(sub.id, sub.clone());
    }

    fn remove(&self, sub: &Sub) {
        let mut open = self.open.write();
        open.index.remove(&sub.pattern, sub.id);
        open.subs.remove(&sub.id);
    }

    /// The oldest subscription matching `topic` (`ids`: all of them).
    fn oldest(&self, topic: &str, ids: &mut Vec<u64>) -> Option<Arc<Sub>> {
        let open = self.open.read();
        open.index.matches(topic, ids);
        ids.first().and_then(|id| open.subs.get(id).cloned())
    }

    fn receive(&self, sub: &Sub, message: Message, local: &mut Local) {
        let Ok(topic) = wire::topic_of(&self.settings.subject_prefix, message.subject.as_str())
        else {
            self.meters.drop(Loss::Invalid);
            return;
        };
        if !local.held.is_empty() {
            self.hand_over(sub, local);
        }
        let Some(oldest) = self.oldest(topic, &mut local.ids) else {
            return;
        };
        // First matched by a draining subscription, or behind held
        // messages (to keep their order): wait for the hand-over.
        let wait = if oldest.id != sub.id && oldest.leaving.is_cancelled() {
            Some(oldest)
        } else {
            local.held.front().map(|h| h.wait.clone())
        };
        let fingerprint = fingerprint(topic, &message);
        if let Some(wait) = wait {
            if local.held.len() >= self.settings.pending_messages {
                return self.meters.drop(Loss::SlowConsumer);
            }
            local.held.push_back(Held {
                topic: Box::from(topic),
                fingerprint,
                message,
                wait,
            });
            return;
        }
        self.decide(sub, topic, &message, fingerprint, local);
    }

    /// Delivers a message if `sub` is its oldest match and no older,
    /// drained subscription delivered it; else skips it.
    fn decide(
        &self,
        sub: &Sub,
        topic: &str,
        message: &Message,
        fingerprint: u64,
        local: &mut Local,
    ) {
        let Some(oldest) = self.oldest(topic, &mut local.ids) else {
            return;
        };
        let delivered = local
            .handovers
            .iter_mut()
            .any(|h| topic::matches(&h.pattern, topic) && h.take(fingerprint));
        local.handovers.retain(|h| !h.rest.is_empty());
        if delivered {
            return;
        }
        if oldest.id == sub.id {
            self.deliver(sub, topic, message, local.ids.len() > 1);
        } else {
            if local.skipped.len() >= self.settings.pending_messages {
                local.skipped.pop_front();
            }
            local.skipped.push_back((oldest.id, fingerprint));
        }
    }

    /// Takes over, in order, what `sub` holds for draining subscriptions
    /// that have ended.
    fn hand_over(&self, sub: &Sub, local: &mut Local) {
        while let Some(front) = local.held.front() {
            let gone = front.wait.clone();
            if !gone.ended.load(Ordering::Acquire) {
                break;
            }
            if !local.handovers.iter().any(|h| h.id == gone.id) {
                local
                    .handovers
                    .push(Handover::new(sub, &gone, &local.skipped));
                local.skipped.retain(|(id, _)| *id != gone.id);
            }
            let Some(item) = local.held.pop_front() else {
                break;
            };
            let oldest = self.oldest(&item.topic, &mut local.ids);
            if let Some(oldest) = oldest.filter(|o| o.id != sub.id && o.leaving.is_cancelled()) {
                // Another draining subscription matches it: wait for that one.
                local.held.push_front(Held {
                    wait: oldest,
                    ..item
                });
                break;
            }
            self.decide(sub, &item.topic, &item.message, item.fingerprint, local);
        }
    }

    /// Fans out one message `sub` is the oldest match of; `shared`:
    /// another subscription matches it too.
    fn deliver(&self, sub: &Sub, topic: &str, message: &Message, shared: bool) {
        if shared {
            let mut record = sub.shared.lock();
            if record.len() >= self.settings.pending_messages {
                record.pop_front();
            }
            record.push_back((Box::from(topic), fingerprint(topic, message)));
        }
        let settings = &self.settings;
        let data = match wire::decode(
            &message.payload,
            is_cbor(message),
            settings.max_payload_bytes,
        ) {
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

// === impl Handover ===

impl Handover {
    /// What `gone` delivered that `sub` shares with it, minus what `sub`
    /// skipped for it already: `gone`'s record (filtered by `sub`'s
    /// pattern) after the first occurrence of that skipped run.
    fn new(sub: &Sub, gone: &Sub, skipped: &VecDeque<(u64, u64)>) -> Handover {
        let record: Vec<u64> = gone
            .shared
            .lock()
            .iter()
            .filter(|(topic, _)| topic::matches(&sub.pattern, topic))
            .map(|(_, fingerprint)| *fingerprint)
            .collect();
        let seen: Vec<u64> = skipped
            .iter()
            .filter(|(id, _)| *id == gone.id)
            .map(|(_, fingerprint)| *fingerprint)
            .collect();
        let start = end_of(&seen, &record);
        Handover {
            id: gone.id,
            pattern: gone.pattern.clone(),
            rest: record
                .get(start..)
                .unwrap_or_default()
                .iter()
                .copied()
                .collect(),
        }
    }

    /// Whether the drained subscription delivered this message (then it
    /// is consumed); entries before it were never sent to this
    /// subscription. A message it did not deliver came after all it did.
    fn take(&mut self, fingerprint: u64) -> bool {
        match self.rest.iter().position(|&f| f == fingerprint) {
            Some(at) => {
                self.rest.drain(..=at);
                true
            }
            None => {
                self.rest.clear();
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::end_of;

    #[test]
    fn end_of_finds_the_first_occurrence() {
        assert_eq!(end_of(&[3, 4], &[1, 2, 3, 4, 3, 4]), 4);
        assert_eq!(end_of(&[], &[1]), 0);
        assert_eq!(end_of(&[9], &[1, 2]), 0);
        assert_eq!(end_of(&[1, 1, 2], &[1, 1, 1, 2, 5]), 4);
    }
}
