//! One open subscription's session: what it has sent, what waits for an
//! acknowledgement (and when it is sent again), and the task that moves
//! messages from the log into the subscription's delivery channel.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::persist::local::{Log, Position};
use crate::persist::{PersistError, Stored, DELIVERY_QUEUE};
use crate::throttle::Throttle;

/// How long a session waits to read again after a read failed.
const READ_RETRY: Duration = Duration::from_secs(1);

/// Rate-limits the warning of a failed read (every session meets it when
/// the store fails).
static READ_FAILED: LazyLock<Throttle> = LazyLock::new(|| Throttle::new(Duration::from_secs(10)));

/// One open subscription's delivery state (not persisted).
#[derive(Debug)]
pub(super) struct Session {
    pub(super) id: u64,
    /// The highest sequence this session has sent or passed over.
    pub(super) cursor: u64,
    /// Sequences above this were never sent by any session: at open, the
    /// lower of the topic's last sequence and floor + window.
    pub(super) owed: u64,
    /// Sent and unacknowledged: sequence → when it is sent again.
    pub(super) in_flight: BTreeMap<u64, Instant>,
    pub(super) ack_timeout: Duration,
    pub(super) wake: Arc<Notify>,
    pub(super) stop: CancellationToken,
}

/// What one step of a session sends, and when it must look again.
pub(super) struct Step {
    pub(super) send: Vec<Stored>,
    pub(super) next_deadline: Option<Instant>,
}

// === impl Shared ===

impl<L: Log> Shared<L> {
    /// What session `session` of `id` sends now: due redeliveries, then
    /// new messages within the window. `None` when the session is over.
    pub(super) fn step(
        &self,
        id: &str,
        session: u64,
        now: Instant,
    ) -> Result<Option<Step>, PersistError> {
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
        self.due(&state.log, p, s, now, &mut send)?;
        self.fresh(&state.log, p, s, now, &mut send)?;
        Ok(Some(Step {
            send,
            next_deadline: s.in_flight.values().min().copied(),
        }))
    }

    /// Sends again what waited for its acknowledgement past its deadline
    /// (what was evicted meanwhile was counted then, and is dropped).
    fn due(
        &self,
        log: &L,
        p: &Position,
        s: &mut Session,
        now: Instant,
        send: &mut Vec<Stored>,
    ) -> Result<(), PersistError> {
        let due: Vec<u64> = s
            .in_flight
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in due {
            let again = log.read(&p.topic, seq - 1, 1)?.pop();
            match again.filter(|m| m.seq == seq) {
                Some(m) => {
                    s.in_flight.insert(seq, now + s.ack_timeout);
                    self.meters.redelivered.inc();
                    send.push(m);
                }
                None => {
                    s.in_flight.remove(&seq);
                }
            }
        }
        Ok(())
    }

    /// Sends what comes after the cursor, up to floor + window (skipping
    /// what was acknowledged out of order), at most a channel's worth.
    fn fresh(
        &self,
        log: &L,
        p: &Position,
        s: &mut Session,
        now: Instant,
        send: &mut Vec<Stored>,
    ) -> Result<(), PersistError> {
        let limit = p.floor.saturating_add(self.window);
        if s.cursor >= limit {
            return Ok(());
        }
        let room = usize::try_from(limit - s.cursor)
            .unwrap_or(usize::MAX)
            .min(DELIVERY_QUEUE);
        for m in log.read(&p.topic, s.cursor, room)? {
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
        Ok(())
    }

    /// Session `session` of `id` ended (detached, replaced or deleted).
    pub(super) fn end(&self, id: &str, session: u64) {
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
pub(super) struct Run<L> {
    pub(super) shared: Arc<Shared<L>>,
    pub(super) id: String,
    pub(super) session: u64,
    pub(super) tx: mpsc::Sender<Stored>,
    pub(super) wake: Arc<Notify>,
    pub(super) stop: CancellationToken,
    pub(super) live: watch::Receiver<u64>,
}

impl<L: Log> Run<L> {
    pub(super) async fn run(mut self) {
        loop {
            self.live.borrow_and_update();
            let step = match self.step().await {
                Ok(Some(step)) => step,
                Ok(None) => break,
                Err(e) => {
                    // The store is failing (the embedded one reopens its
                    // file): the session stays, and reads again later.
                    if let Some(held) = READ_FAILED.admit("read") {
                        tracing::warn!(error = %e, held_back = held, "persistent delivery: store read failed; retrying");
                    }
                    tokio::select! {
                        () = self.stop.cancelled() => break,
                        () = self.tx.closed() => break,
                        () = tokio::time::sleep(READ_RETRY) => {}
                    }
                    continue;
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

    /// One step, on the blocking pool when the log blocks.
    async fn step(&self) -> Result<Option<Step>, PersistError> {
        let now = Instant::now();
        if !L::BLOCKING {
            return self.shared.step(&self.id, self.session, now);
        }
        let (shared, id, session) = (self.shared.clone(), self.id.clone(), self.session);
        super::blocking(move || shared.step(&id, session, now)).await
    }

    pub(super) fn end(&self) {
        self.shared.end(&self.id, self.session);
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
