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
//! its channel holds as many; the per-topic notifiers are pruned to the
//! topics someone follows whenever they outnumber the ids. The log is
//! called with the lock held, one call at a time, from tokio's blocking
//! pool when it blocks on I/O ([`Log::BLOCKING`], the embedded log), in
//! place otherwise.
//!
//! Files: `session.rs` (one open subscription: what it sent, what waits
//! for an ack, its task), `floor.rs` (positions: made, and their floors
//! moved over acks and evictions).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant, SystemTime};

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
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
                let swept = if L::BLOCKING {
                    let engine = engine.clone();
                    blocking(move || engine.sweep(SystemTime::now())).await
                } else {
                    engine.sweep(SystemTime::now())
                };
                if let Err(e) = swept {
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

    /// Closes the log (at shutdown, once nothing more is published):
    /// the embedded store's file is released even while tasks that hold
    /// the engine are still ending. Later calls fail.
    pub fn close(&self) {
        self.shared.state.lock().log.close();
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
        if !shared.position_for(state, id, topic, last)? {
            shared.compact(state, id, false)?;
        }
        let session_id = state.next_session;
        state.next_session += 1;
        if state.live.len() > state.subs.len() {
            // Topics nobody follows any more (bounds the map by the ids).
            state.live.retain(|_, tx| tx.receiver_count() > 0);
        }
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
            if ids.is_empty() {
                state.by_topic.remove(&sub.position.topic);
            }
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

/// A count as a gauge value.
fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

mod floor;
mod session;
mod store;

use session::{Run, Session};
use store::blocking;

#[cfg(test)]
mod tests;
