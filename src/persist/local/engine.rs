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
//! Durability: changes are *staged* into the log with the lock held, and
//! the caller waits for the log's [`Ticket`] after releasing it, so that
//! the embedded log commits everything staged meanwhile at once (group
//! commit). A publish is answered, and its topic's sessions woken, only
//! once its ticket resolved (sessions read only what is durable); an ack,
//! an open, a delete and a position are answered once theirs did (a
//! repeated ack waits for what is staged before it: a barrier). The
//! floors moved over evicted messages are staged and not waited for.
//!
//! Files: `session.rs` (one open subscription: what it sent, what waits
//! for an ack, its task), `floor.rs` (positions: made, and their floors
//! moved over acks and evictions), `store.rs` (the [`Store`] calls: stage,
//! wait for the ticket, answer), `sweep.rs` (retention by age).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use tokio_util::sync::CancellationToken;

use super::{Applied, Change, Log, Position, Ticket};
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

    /// Closes the log (at shutdown, once nothing more is published):
    /// the embedded store's file is released even while tasks that hold
    /// the engine are still ending. Later calls fail.
    pub fn close(&self) {
        self.shared.state.lock().log.close();
    }

    /// Runs `f` on the log (tests: its counters).
    #[cfg(test)]
    pub(crate) fn with_log<R>(&self, f: impl FnOnce(&L) -> R) -> R {
        f(&self.shared.state.lock().log)
    }

    /// The number of subscription ids kept.
    pub fn subscriptions(&self) -> usize {
        self.shared.state.lock().subs.len()
    }

    /// Opens `id`, staging its new or moved position: the caller waits
    /// for the ticket before it answers.
    fn open_now(&self, id: &str, topic: &str) -> Result<(Opened, Ticket), PersistError> {
        let policy = self.policy(topic)?;
        let shared = &self.shared;
        let mut guard = shared.state.lock();
        let state = &mut *guard;
        let last = state.log.last_seq(topic)?;
        let changes: Vec<Change> = match shared.position_for(state, id, topic, last)? {
            Some(created) => vec![created],
            None => shared.compact(state, id, false)?.into_iter().collect(),
        };
        let ticket = state.log.stage(changes);
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
        let opened = Opened {
            resumed_from: floor,
            deliveries: rx,
        };
        Ok((opened, ticket))
    }

    /// Records the acknowledgement of `seq` by `id`, staging its
    /// position: `Yes` may be answered once the ticket resolves, never
    /// before.
    fn ack_now(&self, id: &str, seq: u64) -> Result<(Acked, Option<Ticket>), PersistError> {
        let shared = &self.shared;
        let mut guard = shared.state.lock();
        let state = &mut *guard;
        let Some(sub) = state.subs.get_mut(id) else {
            return Err(PersistError::NotFound);
        };
        let position = &mut sub.position;
        if seq == 0 {
            return Ok((Acked::NeverDelivered, None));
        }
        if seq <= position.floor || position.acked.contains(&seq) {
            // Recorded already, but perhaps staged and not yet durable
            // (a repeated ack): answered after what is staged.
            return Ok((Acked::Yes, Some(state.log.stage(Vec::new()))));
        }
        let sent = sub
            .session
            .as_ref()
            .map_or(position.floor, |s| s.cursor.max(s.owed));
        if seq > sent {
            return Ok((Acked::NeverDelivered, None));
        }
        position.acked.insert(seq);
        if let Some(session) = sub.session.as_mut() {
            session.in_flight.remove(&seq);
        }
        let changes = shared.compact(state, id, true)?.into_iter().collect();
        Ok((Acked::Yes, Some(state.log.stage(changes))))
    }

    /// Deletes `id`, staging the removal of its position (the caller
    /// waits for the ticket).
    fn delete_now(&self, id: &str) -> Result<Option<Ticket>, PersistError> {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        let Some(sub) = state.subs.remove(id) else {
            return Ok(None);
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
        let remove = Change::RemovePosition { id: id.to_owned() };
        Ok(Some(state.log.stage(vec![remove])))
    }

    /// The topic and floor of `id`, with a ticket to wait for before
    /// reporting it (the floor may rest on acks still on their way to
    /// disk).
    fn position_now(&self, id: &str) -> Result<(Option<(String, u64)>, Ticket), PersistError> {
        let mut guard = self.shared.state.lock();
        let state = &mut *guard;
        let changes = if state.subs.contains_key(id) {
            self.shared.compact(state, id, false)?.into_iter().collect()
        } else {
            Vec::new()
        };
        let ticket = state.log.stage(changes);
        let found = state
            .subs
            .get(id)
            .map(|s| (s.position.topic.clone(), s.position.floor));
        Ok((found, ticket))
    }

    /// Stages `changes` (with the lock: in the engine's order).
    fn stage(&self, changes: Vec<Change>) -> Ticket {
        self.shared.state.lock().log.stage(changes)
    }

    /// What durable appends did: evictions accounted for, then the
    /// sessions of their topics woken (they read only what is durable).
    fn published(&self, appended: Vec<(Stored, Vec<u64>)>) -> Result<Vec<Stored>, PersistError> {
        let shared = &self.shared;
        let mut guard = shared.state.lock();
        let state = &mut *guard;
        let mut out = Vec::with_capacity(appended.len());
        for (stored, evicted) in appended {
            shared.meters.published.inc();
            shared.evicted(state, &stored.topic, &evicted)?;
            if let Some(live) = state.live.get(&stored.topic) {
                // Batches are answered in any order: the watch only rises.
                live.send_if_modified(|last| {
                    let newer = stored.seq > *last;
                    *last = (*last).max(stored.seq);
                    newer
                });
            }
            out.push(stored);
        }
        Ok(out)
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
mod sweep;

use session::{Run, Session};
use store::blocking;

#[cfg(test)]
mod tests;
