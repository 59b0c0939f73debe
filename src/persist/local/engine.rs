//! [`Engine`]: the [`Store`] of the single-instance backends, over any
//! [`Log`].
//!
//! The log sits behind one lock with every subscription's position cached
//! beside it (loaded from the log when the engine starts, so a restarted
//! embedded store resumes them). Each topic has a live notifier (a watch
//! of its last sequence). Each open subscription has one session: a task
//! that reads what the subscription is owed from the log and sends it into
//! the [`Opened::deliveries`] channel, then waits for a new message, an
//! acknowledgement that moves the floor, the next ack deadline, or the end
//! of the session (the receiver dropped: detached; or deleted).
//!
//! Semantics (jsonrpc-ws.md §7.3):
//!
//! - a new subscription starts after the topic's last sequence
//!   (`resumed_from` = that sequence, 0 for an empty topic);
//! - a resumed one reports its floor (every message ≤ floor acknowledged)
//!   and is sent every retained, unacknowledged message above it, in
//!   order, then live ones;
//! - an unacknowledged message is sent again, same sequence, after the
//!   topic's ack timeout, on the same session;
//! - acknowledgements are per message; at or below the floor, or repeated,
//!   they are a no-op; above what the subscription can have been sent they
//!   are [`Acked::NeverDelivered`];
//! - retention runs on every append and every [`SWEEP_EVERY`] (by age);
//!   each message × subscription pair evicted unacknowledged is counted,
//!   and the floors move over what is gone.
//!
//! Bounds: a session sends only sequences ≤ floor + `window`, so at most
//! `window` are unacknowledged, and acknowledgements above the floor are
//! at most `window` per subscription; at most `max_subscriptions` ids;
//! each session reads at most [`DELIVERY_QUEUE`] messages per step and
//! its channel holds as many. The log is called with the lock held, one
//! call at a time.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant, SystemTime};

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Log, Position};
use crate::envelope::Payload;
use crate::persist::{
    Acked, Meters, Opened, PersistError, Store, Stored, TopicPolicy, Topics, DELIVERY_QUEUE,
};

/// How often retention by age is applied to every topic.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The local engine: cheap to clone, shared by every connection.
#[derive(Debug)]
pub struct Engine<L: Log> {
    shared: Arc<Shared<L>>,
}

#[derive(Debug)]
struct Shared<L> {
    state: Mutex<State<L>>,
    topics: Topics,
    window: u64,
    max_subscriptions: usize,
    meters: Meters,
}

#[derive(Debug)]
struct State<L> {
    log: L,
    /// Every subscription's position (and session, when open).
    subs: HashMap<String, Sub>,
    /// Subscription ids by topic, for retention's accounting.
    by_topic: HashMap<String, HashSet<String>>,
    /// Each topic's last sequence, watched by its sessions.
    live: HashMap<String, watch::Sender<u64>>,
    next_session: u64,
}

#[derive(Debug)]
struct Sub {
    position: Position,
    session: Option<Session>,
}

/// One open subscription's delivery state (not persisted).
#[derive(Debug)]
struct Session {
    id: u64,
    /// The highest sequence this session has sent or passed over.
    cursor: u64,
    /// Sequences above this were never sent by any session: at open, the
    /// lower of the topic's last sequence and floor + window.
    owed: u64,
    /// Sent and unacknowledged: sequence → when it is sent again.
    in_flight: BTreeMap<u64, Instant>,
    ack_timeout: Duration,
    wake: Arc<Notify>,
    stop: CancellationToken,
}

/// What one step of a session sends, and when it must look again.
struct Step {
    send: Vec<Stored>,
    next_deadline: Option<Instant>,
}

// === impl Engine ===

impl<L: Log> Clone for Engine<L> {
    fn clone(&self) -> Self {
        Engine {
            shared: self.shared.clone(),
        }
    }
}

impl<L: Log> Engine<L> {
    /// An engine over `log` (positions loaded from it), storing the
    /// `topics`, with at most `window` unacknowledged per subscription.
    pub fn new(
        log: L,
        topics: Topics,
        window: usize,
        max_subscriptions: usize,
        meters: Meters,
    ) -> Result<Self, PersistError> {
        let mut subs = HashMap::new();
        let mut by_topic: HashMap<String, HashSet<String>> = HashMap::new();
        for (id, position) in log.positions()? {
            by_topic
                .entry(position.topic.clone())
                .or_default()
                .insert(id.clone());
            subs.insert(
                id,
                Sub {
                    position,
                    session: None,
                },
            );
        }
        let usage = log.stats()?;
        meters.stored_messages.set(gauge(usage.messages));
        meters.stored_bytes.set(gauge(usage.bytes));
        let state = State {
            log,
            subs,
            by_topic,
            live: HashMap::new(),
            next_session: 1,
        };
        Ok(Engine {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                topics,
                window: u64::try_from(window.max(1)).unwrap_or(u64::MAX),
                max_subscriptions,
                meters,
            }),
        })
    }

    /// Applies retention by age every [`SWEEP_EVERY`] until `stop`.
    pub fn spawn_sweeper(&self, stop: CancellationToken) {
        if self.shared.topics.shortest_max_age().is_none() {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = stop.cancelled() => return,
                }
                if let Err(e) = engine.sweep(SystemTime::now()) {
                    tracing::warn!(error = %e, "persistent store: retention sweep failed");
                }
            }
        });
    }

    /// Applies retention by age at `now` to every stored topic.
    pub fn sweep(&self, now: SystemTime) -> Result<(), PersistError> {
        let mut state = self.shared.state.lock();
        for topic in state.log.topics()? {
            let Some(policy) = self.shared.topics.policy(&topic).copied() else {
                continue;
            };
            if policy.retention.max_age.is_none() {
                continue;
            }
            let evicted = state.log.expire(&topic, now, &policy.retention)?;
            self.shared.evicted(&mut state, &topic, &evicted)?;
        }
        Ok(())
    }

    /// The number of subscription ids kept.
    pub fn subscriptions(&self) -> usize {
        self.shared.state.lock().subs.len()
    }

    fn open_now(&self, id: &str, topic: &str) -> Result<Opened, PersistError> {
        let policy = self.policy(topic)?;
        let shared = &self.shared;
        let mut guard = shared.state.lock();
        let state = &mut *guard;
        let last = state.log.last_seq(topic)?;
        let created = match state.subs.get(id) {
            Some(sub) if sub.position.topic != topic => {
                return Err(PersistError::Conflict(format!(
                    "subscription {id:?} exists with topic {:?}",
                    sub.position.topic
                )));
            }
            Some(_) => false,
            None if state.subs.len() >= shared.max_subscriptions => {
                return Err(PersistError::Full(format!(
                    "at most {} persistent subscriptions",
                    shared.max_subscriptions
                )));
            }
            None => {
                let position = Position {
                    topic: topic.to_owned(),
                    floor: last,
                    acked: Default::default(),
                };
                state.log.set_position(id, &position)?;
                state
                    .by_topic
                    .entry(topic.to_owned())
                    .or_default()
                    .insert(id.to_owned());
                state.subs.insert(
                    id.to_owned(),
                    Sub {
                        position,
                        session: None,
                    },
                );
                true
            }
        };
        if !created {
            shared.compact(state, id, false)?;
        }
        let session_id = state.next_session;
        state.next_session += 1;
        let live = state
            .live
            .entry(topic.to_owned())
            .or_insert_with(|| watch::channel(last).0)
            .subscribe();
        let Some(sub) = state.subs.get_mut(id) else {
            return Err(PersistError::NotFound);
        };
        let floor = sub.position.floor;
        let session = Session {
            id: session_id,
            cursor: floor,
            owed: last.min(floor.saturating_add(shared.window)),
            in_flight: BTreeMap::new(),
            ack_timeout: policy.ack_timeout,
            wake: Arc::new(Notify::new()),
            stop: CancellationToken::new(),
        };
        let (wake, stop) = (session.wake.clone(), session.stop.clone());
        if let Some(old) = sub.session.replace(session) {
            old.stop.cancel();
        } else {
            shared.meters.attached.inc();
        }
        drop(guard);
        let (tx, rx) = mpsc::channel(DELIVERY_QUEUE);
        let run = Run {
            shared: shared.clone(),
            id: id.to_owned(),
            session: session_id,
            tx,
            wake,
            stop,
            live,
        };
        tokio::spawn(run.run());
        Ok(Opened {
            resumed_from: floor,
            deliveries: rx,
        })
    }

    fn ack_now(&self, id: &str, seq: u64) -> Result<Acked, PersistError> {
        let shared = &self.shared;
        let mut guard = shared.state.lock();
        let state = &mut *guard;
        let Some(sub) = state.subs.get_mut(id) else {
            return Err(PersistError::NotFound);
        };
        let position = &mut sub.position;
        if seq == 0 {
            return Ok(Acked::NeverDelivered);
        }
        if seq <= position.floor || position.acked.contains(&seq) {
            shared.meters.acks.inc();
            return Ok(Acked::Yes);
        }
        let sent = sub
            .session
            .as_ref()
            .map_or(position.floor, |s| s.cursor.max(s.owed));
        if seq > sent {
            return Ok(Acked::NeverDelivered);
        }
        position.acked.insert(seq);
        if let Some(session) = sub.session.as_mut() {
            session.in_flight.remove(&seq);
        }
        shared.compact(state, id, true)?;
        shared.meters.acks.inc();
        Ok(Acked::Yes)
    }

    fn delete_now(&self, id: &str) -> Result<bool, PersistError> {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        let Some(sub) = state.subs.remove(id) else {
            return Ok(false);
        };
        if let Some(session) = sub.session {
            session.stop.cancel();
            shared.meters.attached.dec();
        }
        if let Some(ids) = state.by_topic.get_mut(&sub.position.topic) {
            ids.remove(id);
        }
        state.log.remove_position(id)?;
        Ok(true)
    }

    fn position_now(&self, id: &str) -> Result<Option<(String, u64)>, PersistError> {
        let mut guard = self.shared.state.lock();
        let state = &mut *guard;
        if !state.subs.contains_key(id) {
            return Ok(None);
        }
        self.shared.compact(state, id, false)?;
        Ok(state
            .subs
            .get(id)
            .map(|s| (s.position.topic.clone(), s.position.floor)))
    }

    fn publish_now(&self, topic: &str, data: &Payload) -> Result<Stored, PersistError> {
        let policy = self.policy(topic)?;
        let shared = &self.shared;
        let started = StdInstant::now();
        let mut guard = shared.state.lock();
        let state = &mut *guard;
        let (stored, evicted) =
            state
                .log
                .append(topic, data, SystemTime::now(), &policy.retention)?;
        shared
            .meters
            .write_seconds
            .observe(started.elapsed().as_secs_f64());
        shared.meters.published.inc();
        shared.evicted(state, topic, &evicted)?;
        if let Some(live) = state.live.get(topic) {
            live.send_replace(stored.seq);
        }
        Ok(stored)
    }

    fn policy(&self, topic: &str) -> Result<TopicPolicy, PersistError> {
        self.shared
            .topics
            .policy(topic)
            .copied()
            .ok_or_else(|| PersistError::NotPersistent(topic.to_owned()))
    }
}

impl<L: Log> Store for Engine<L> {
    async fn publish(&self, topic: &str, data: &Payload) -> Result<Stored, PersistError> {
        self.publish_now(topic, data)
    }

    async fn open(&self, id: &str, topic: &str) -> Result<Opened, PersistError> {
        self.open_now(id, topic)
    }

    async fn ack(&self, id: &str, seq: u64) -> Result<Acked, PersistError> {
        self.ack_now(id, seq)
    }

    async fn delete(&self, id: &str) -> Result<bool, PersistError> {
        self.delete_now(id)
    }

    async fn position(&self, id: &str) -> Result<Option<(String, u64)>, PersistError> {
        self.position_now(id)
    }
}

// === impl Shared ===

impl<L: Log> Shared<L> {
    /// Moves the floor of `id` over acknowledged and evicted sequences,
    /// writes the position if it changed (or `dirty`: changed by the
    /// caller), and wakes its session if the floor moved.
    fn compact(&self, state: &mut State<L>, id: &str, dirty: bool) -> Result<(), PersistError> {
        let Some(sub) = state.subs.get_mut(id) else {
            return Ok(());
        };
        let position = &mut sub.position;
        let before = position.clone();
        let last = state.log.last_seq(&position.topic)?;
        loop {
            if position.acked.remove(&(position.floor + 1)) {
                position.floor += 1;
                continue;
            }
            if position.floor >= last {
                break;
            }
            // The first retained message above the floor: what lies
            // between was evicted (and counted then).
            let first = state
                .log
                .read(&position.topic, position.floor, 1)?
                .first()
                .map_or(last + 1, |m| m.seq);
            if first > position.floor + 1 {
                position.floor = first - 1;
                continue;
            }
            break;
        }
        let floor = position.floor;
        position.acked = position.acked.split_off(&(floor + 1));
        if dirty || *position != before {
            state.log.set_position(id, position)?;
        }
        if floor != before.floor {
            if let Some(session) = sub.session.as_mut() {
                session.in_flight = session.in_flight.split_off(&(floor + 1));
                session.cursor = session.cursor.max(floor);
                session.wake.notify_one();
            }
        }
        Ok(())
    }

    /// Counts the unacknowledged `evicted` messages of `topic` per
    /// subscription and moves the floors over them.
    fn evicted(
        &self,
        state: &mut State<L>,
        topic: &str,
        evicted: &[u64],
    ) -> Result<(), PersistError> {
        let usage = state.log.stats()?;
        self.meters.stored_messages.set(gauge(usage.messages));
        self.meters.stored_bytes.set(gauge(usage.bytes));
        let Some(&highest) = evicted.iter().max() else {
            return Ok(());
        };
        let ids: Vec<String> = state
            .by_topic
            .get(topic)
            .map(|ids| ids.iter().cloned().collect())
            .unwrap_or_default();
        let mut lagging = Vec::new();
        for id in ids {
            let Some(sub) = state.subs.get(&id) else {
                continue;
            };
            let p = &sub.position;
            let lost = evicted
                .iter()
                .filter(|seq| **seq > p.floor && !p.acked.contains(seq))
                .count();
            self.meters
                .evicted_unacked
                .inc_by(u64::try_from(lost).unwrap_or(u64::MAX));
            if p.floor < highest {
                lagging.push(id);
            }
        }
        for id in lagging {
            self.compact(state, &id, false)?;
        }
        Ok(())
    }

    /// What session `session` of `id` sends now: due redeliveries, then
    /// new messages within the window. `None` when the session is over.
    fn step(&self, id: &str, session: u64, now: Instant) -> Result<Option<Step>, PersistError> {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let Some(sub) = state.subs.get_mut(id) else {
            return Ok(None);
        };
        let Some(s) = sub.session.as_mut().filter(|s| s.id == session) else {
            return Ok(None);
        };
        let p = &sub.position;
        let mut send = Vec::new();
        let due: Vec<u64> = s
            .in_flight
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in due {
            let again = state.log.read(&p.topic, seq - 1, 1)?.pop();
            match again.filter(|m| m.seq == seq) {
                Some(m) => {
                    s.in_flight.insert(seq, now + s.ack_timeout);
                    self.meters.redelivered.inc();
                    send.push(m);
                }
                // Evicted meanwhile: counted then.
                None => {
                    s.in_flight.remove(&seq);
                }
            }
        }
        let limit = p.floor.saturating_add(self.window);
        if s.cursor < limit {
            let room = usize::try_from(limit - s.cursor)
                .unwrap_or(usize::MAX)
                .min(DELIVERY_QUEUE);
            for m in state.log.read(&p.topic, s.cursor, room)? {
                if m.seq > limit {
                    break;
                }
                s.cursor = m.seq;
                if p.acked.contains(&m.seq) {
                    continue;
                }
                s.in_flight.insert(m.seq, now + s.ack_timeout);
                send.push(m);
            }
        }
        Ok(Some(Step {
            send,
            next_deadline: s.in_flight.values().min().copied(),
        }))
    }

    /// Session `session` of `id` ended (detached, replaced or deleted).
    fn end(&self, id: &str, session: u64) {
        let mut state = self.state.lock();
        let Some(sub) = state.subs.get_mut(id) else {
            return;
        };
        if sub.session.as_ref().is_some_and(|s| s.id == session) {
            sub.session = None;
            self.meters.attached.dec();
        }
    }
}

/// One session's task.
struct Run<L> {
    shared: Arc<Shared<L>>,
    id: String,
    session: u64,
    tx: mpsc::Sender<Stored>,
    wake: Arc<Notify>,
    stop: CancellationToken,
    live: watch::Receiver<u64>,
}

impl<L: Log> Run<L> {
    async fn run(mut self) {
        loop {
            self.live.borrow_and_update();
            let step = match self.shared.step(&self.id, self.session, Instant::now()) {
                Ok(Some(step)) => step,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "persistent delivery: store read failed");
                    break;
                }
            };
            let sent_any = !step.send.is_empty();
            for m in step.send {
                tokio::select! {
                    sent = self.tx.send(m) => if sent.is_err() { return self.end() },
                    () = self.stop.cancelled() => return self.end(),
                }
            }
            if sent_any {
                // More may be ready (a step reads at most a channel's worth).
                continue;
            }
            let deadline = step.next_deadline;
            tokio::select! {
                () = self.stop.cancelled() => break,
                () = self.tx.closed() => break,
                changed = self.live.changed() => if changed.is_err() { break },
                () = self.wake.notified() => {}
                () = sleep_until(deadline) => {}
            }
        }
        self.end();
    }

    fn end(&self) {
        self.shared.end(&self.id, self.session);
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A count as a gauge value.
fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
