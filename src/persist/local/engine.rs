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
//!   they are a no-op; at or below where the subscription started
//!   ([`Position::start`]: sequence 0 included) or above what it can have
//!   been sent they are [`Acked::NeverDelivered`];
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
//! an open, a delete and a position are answered once theirs did.
//!
//! Memory follows the log: an ack, a new position or a removal shows in
//! the engine's state only once its ticket resolved without error, so a
//! write that failed (-32009 to the client) changes nothing: a retried
//! ack is written again rather than answered from memory, a resume
//! reports the durable floor, an id whose removal failed is kept, and an
//! id whose creation failed does not exist. Writes of one position are
//! made from the newest one staged (`Sub::staged`), never from an older
//! one, so that a later write cannot undo an earlier ack that succeeded.
//! The floors moved over evicted messages need no disk: they change
//! memory at once, and are staged and not waited for.
//!
//! Files: `session.rs` (one open subscription: what it sent, what waits
//! for an ack, its task), `floor.rs` (positions: made, forgotten, and
//! their floors moved over acks and evictions), `store.rs` (the [`Store`]
//! calls: stage, wait for the ticket, bring its outcome into memory,
//! answer), `sweep.rs` (retention by age).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use tokio_util::sync::CancellationToken;

use super::{Applied, Change, Health, Log, Position, Ticket};
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
    /// Whether the log can write now (read by readiness without the
    /// lock).
    health: Health,
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
            subs.insert(id, Sub::stored(position));
        }
        let usage = log.stats()?;
        let health = log.health();
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
                health,
            }),
        })
    }

    /// Closes the log (at shutdown, once nothing more is published):
    /// the embedded store's file is released even while tasks that hold
    /// the engine are still ending. Later calls fail.
    pub fn close(&self) {
        self.shared.state.lock().log.close();
    }

    /// Whether the log can write now; why not if it cannot (the
    /// embedded store between a failed commit and its reopening).
    pub fn ready(&self) -> Result<(), String> {
        self.shared.health.failure().map_or(Ok(()), Err)
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

    /// Stages the opening of `id`: the write of a new position (returned,
    /// its outcome for [`Engine::written`]), of one whose first write has
    /// not succeeded yet, or of a floor moved over evicted messages; else
    /// a barrier. The session starts once the ticket resolved
    /// ([`Engine::start`]).
    fn open_now(&self, id: &str, topic: &str) -> Result<(Ticket, Option<Position>), PersistError> {
        self.policy(topic)?;
        let shared = &self.shared;
        let mut guard = shared.state.lock();
        let state = &mut *guard;
        let last = state.log.last_seq(topic)?;
        if let Some(created) = shared.position_for(state, id, topic, last)? {
            let ticket = state.log.stage(vec![created.write(id)]);
            return Ok((ticket, Some(created)));
        }
        let Some(sub) = state.subs.get_mut(id) else {
            return Err(PersistError::NotFound);
        };
        if sub.deleting {
            return Err(PersistError::Conflict(format!(
                "subscription {id:?} is being deleted"
            )));
        }
        if !sub.stored {
            // Its first write failed or is on its way: written again.
            let again = sub.stage_from_base();
            let ticket = state.log.stage(vec![again.write(id)]);
            return Ok((ticket, Some(again)));
        }
        let changes = shared.compact(state, id)?.into_iter().collect();
        Ok((state.log.stage(changes), None))
    }

    /// Starts a session of `id` (replacing one open elsewhere) once its
    /// opening is durable.
    fn start(&self, id: &str) -> Result<Opened, PersistError> {
        let shared = &self.shared;
        let mut guard = shared.state.lock();
        let state = &mut *guard;
        let topic = match state.subs.get(id) {
            Some(sub) if sub.stored && !sub.deleting => sub.position.topic.clone(),
            Some(_) => return Err(PersistError::Store("its position is not stored".to_owned())),
            None => return Err(PersistError::NotFound),
        };
        let policy = self.policy(&topic)?;
        let last = state.log.last_seq(&topic)?;
        let session_id = state.next_session;
        state.next_session += 1;
        if state.live.len() > state.subs.len() {
            // Topics nobody follows any more (bounds the map by the ids).
            state.live.retain(|_, tx| tx.receiver_count() > 0);
        }
        let live = state
            .live
            .entry(topic)
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

    /// Stages the acknowledgement of `seq` by `id` (see [`AckStep`]).
    fn ack_now(&self, id: &str, seq: u64) -> Result<AckStep, PersistError> {
        let shared = &self.shared;
        let mut guard = shared.state.lock();
        let state = &mut *guard;
        let Some(sub) = state.subs.get_mut(id).filter(|s| !s.deleting) else {
            return Err(PersistError::NotFound);
        };
        if seq <= sub.position.start {
            // Before the subscription began (0 included): never sent to it.
            return Ok(AckStep::Done(Acked::NeverDelivered));
        }
        if sub.position.covers(seq) {
            return Ok(AckStep::Done(Acked::Yes));
        }
        if sub.base().covers(seq) {
            // Staged by an earlier ack whose write is unresolved: answered
            // by its outcome, after what is staged.
            return Ok(AckStep::Recheck(state.log.stage(Vec::new())));
        }
        let sent = sub
            .session
            .as_ref()
            .map_or(sub.position.floor, |s| s.cursor.max(s.owed));
        if seq > sent {
            return Ok(AckStep::Done(Acked::NeverDelivered));
        }
        let mut next = sub.base().clone();
        next.acked.insert(seq);
        next.settle_acks();
        sub.staged = Some(next.clone());
        sub.pending += 1;
        let ticket = state.log.stage(vec![next.write(id)]);
        Ok(AckStep::Write(ticket, next))
    }

    /// Whether `seq` is acknowledged, durably, for `id`.
    fn covers(&self, id: &str, seq: u64) -> bool {
        let state = self.shared.state.lock();
        state.subs.get(id).is_some_and(|s| s.position.covers(seq))
    }

    /// The write of `snapshot` (a position of `id` staged and counted in
    /// `pending`) resolved: into `position` if `ok`, else dropped.
    fn written(&self, id: &str, snapshot: &Position, ok: bool) {
        let mut guard = self.shared.state.lock();
        let state = &mut *guard;
        let Some(sub) = state.subs.get_mut(id) else {
            return;
        };
        sub.pending = sub.pending.saturating_sub(1);
        if ok {
            sub.stored = true;
            let before = sub.position.floor;
            sub.position.merge(snapshot);
            if let Some(staged) = sub.staged.as_mut() {
                staged.merge(snapshot);
            }
            sub.moved(before);
        }
        if sub.pending == 0 {
            sub.staged = None;
            if !sub.stored && !sub.deleting {
                // Created by an open whose write failed: never existed.
                self.shared.forget(state, id);
            }
        }
    }

    /// Stages the removal of `id` (the caller waits for the ticket, then
    /// calls [`Engine::deleted`]); `None` if there is no such id.
    fn delete_now(&self, id: &str) -> Result<Option<Ticket>, PersistError> {
        let mut state = self.shared.state.lock();
        let Some(sub) = state.subs.get_mut(id) else {
            return Ok(None);
        };
        sub.deleting = true;
        let remove = Change::RemovePosition { id: id.to_owned() };
        Ok(Some(state.log.stage(vec![remove])))
    }

    /// The removal of `id` resolved: forgotten (its session ended) if
    /// `ok`, else kept as it was.
    fn deleted(&self, id: &str, ok: bool) {
        let mut guard = self.shared.state.lock();
        let state = &mut *guard;
        if ok {
            self.shared.forget(state, id);
        } else if let Some(sub) = state.subs.get_mut(id) {
            sub.deleting = false;
        }
    }

    /// Stages what reporting the position of `id` needs (a floor moved
    /// over evicted messages, or a barrier: it may rest on acks still on
    /// their way to disk); [`Engine::found`] reads it once durable.
    fn position_now(&self, id: &str) -> Result<Ticket, PersistError> {
        let mut guard = self.shared.state.lock();
        let state = &mut *guard;
        let changes = self.shared.compact(state, id)?.into_iter().collect();
        Ok(state.log.stage(changes))
    }

    /// The topic and floor of `id` if it is stored.
    fn found(&self, id: &str) -> Option<(String, u64)> {
        let state = self.shared.state.lock();
        state
            .subs
            .get(id)
            .filter(|s| s.stored)
            .map(|s| (s.position.topic.clone(), s.position.floor))
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

/// What an acknowledgement needs once staged.
#[derive(Debug)]
enum AckStep {
    /// Answered now: durable already, or refused.
    Done(Acked),
    /// Staged by an earlier ack: `Yes` if, after this barrier, it is
    /// durable.
    Recheck(Ticket),
    /// A new position staged: `Yes` once the ticket resolves without
    /// error (then [`Engine::written`] with it).
    Write(Ticket, Position),
}

/// A count as a gauge value.
fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

mod floor;
mod position;
mod session;
mod store;
mod sweep;

use position::Sub;
use session::{Run, Session};
use store::blocking;

#[cfg(test)]
mod tests;
