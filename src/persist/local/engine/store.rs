//! The engine as a [`Store`]: each call stages its changes on the engine
//! (on tokio's blocking pool, one at a time, when its log blocks on the
//! disk), waits for the log's ticket without the engine's lock (so the
//! embedded log puts everything staged meanwhile into one commit), then
//! brings the outcome into memory (a position, an ack, a removal counts
//! only once written: a failed write changes nothing) and only then
//! answers; appends are delivered only once durable.

use std::time::Instant as StdInstant;

use super::*;

impl<L: Log> Store for Engine<L> {
    async fn publish(&self, topic: &str, data: &Payload) -> Result<Stored, PersistError> {
        let mut stored = self
            .publish_batch(vec![(topic.to_owned(), data.clone())])
            .await?;
        stored
            .pop()
            .ok_or_else(|| PersistError::Store("an append without an outcome".to_owned()))
    }

    async fn publish_batch(
        &self,
        events: Vec<(String, Payload)>,
    ) -> Result<Vec<Stored>, PersistError> {
        let started = StdInstant::now();
        let at = SystemTime::now();
        let mut changes = Vec::with_capacity(events.len());
        for (topic, data) in events {
            let retention = self.policy(&topic)?.retention;
            changes.push(Change::Append {
                topic,
                data,
                at,
                retention,
            });
        }
        let ticket = self.call(move |e| Ok(e.stage(changes))).await?;
        let appended = ticket
            .wait()
            .await?
            .into_iter()
            .map(Applied::into_appended)
            .collect::<Result<Vec<_>, _>>()?;
        let took = started.elapsed().as_secs_f64();
        for _ in &appended {
            self.shared.meters.write_seconds.observe(took);
        }
        self.call(move |e| e.published(appended)).await
    }

    async fn open(&self, id: &str, topic: &str) -> Result<Opened, PersistError> {
        let (id, topic) = (id.to_owned(), topic.to_owned());
        let key = id.clone();
        let (ticket, write) = self.call(move |e| e.open_now(&key, &topic)).await?;
        let outcome = ticket.wait().await;
        if let Some(snapshot) = write {
            let (key, ok) = (id.clone(), outcome.is_ok());
            self.call(move |e| {
                e.written(&key, &snapshot, ok);
                Ok(())
            })
            .await?;
        }
        outcome?;
        self.call(move |e| e.start(&id)).await
    }

    async fn ack(&self, id: &str, seq: u64) -> Result<Acked, PersistError> {
        let id = id.to_owned();
        let key = id.clone();
        let acked = match self.call(move |e| e.ack_now(&key, seq)).await? {
            AckStep::Done(acked) => acked,
            AckStep::Recheck(barrier) => {
                let outcome = barrier.wait().await;
                if !self.call(move |e| Ok(e.covers(&id, seq))).await? {
                    outcome?;
                    // What staged it failed to write it.
                    return Err(PersistError::Store(format!(
                        "the write of the acknowledgement of {seq} failed"
                    )));
                }
                Acked::Yes
            }
            AckStep::Write(ticket, snapshot) => {
                let outcome = ticket.wait().await;
                let ok = outcome.is_ok();
                self.call(move |e| {
                    e.written(&id, &snapshot, ok);
                    Ok(())
                })
                .await?;
                outcome?;
                Acked::Yes
            }
        };
        if acked == Acked::Yes {
            self.shared.meters.acks.inc();
        }
        Ok(acked)
    }

    async fn delete(&self, id: &str) -> Result<bool, PersistError> {
        let id = id.to_owned();
        let key = id.clone();
        let Some(ticket) = self.call(move |e| e.delete_now(&key)).await? else {
            return Ok(false);
        };
        let outcome = ticket.wait().await;
        let ok = outcome.is_ok();
        self.call(move |e| {
            e.deleted(&id, ok);
            Ok(())
        })
        .await?;
        outcome.map(|_| true)
    }

    async fn position(&self, id: &str) -> Result<Option<(String, u64)>, PersistError> {
        let id = id.to_owned();
        let key = id.clone();
        let ticket = self.call(move |e| e.position_now(&key)).await?;
        ticket.wait().await?;
        self.call(move |e| Ok(e.found(&id))).await
    }

    async fn owned(&self, prefix: &str) -> Result<usize, PersistError> {
        // Every id is in memory: a scan of at most `max_subscriptions`.
        let state = self.shared.state.lock();
        Ok(state
            .subs
            .keys()
            .filter(|id| id.starts_with(prefix))
            .count())
    }
}

impl<L: Log> Engine<L> {
    /// Runs `f` here, or on tokio's blocking pool when the log blocks
    /// ([`Log::BLOCKING`]: disk I/O must not hold up the async workers).
    pub(super) async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Self) -> Result<T, PersistError> + Send + 'static,
    ) -> Result<T, PersistError> {
        if !L::BLOCKING {
            return f(self);
        }
        let engine = self.clone();
        blocking(move || f(&engine)).await
    }
}

/// Blocking store calls running at once. They take the engine's lock in
/// turn anyway, and none waits for a commit (they stage and return);
/// without this bound every waiting call (10 pipelining subscribers keep
/// thousands of acks in flight) held a blocking-pool thread of its own,
/// up to tokio's 512, each with its own allocator heap (500 MiB RSS in
/// the persist benchmark). Callers past it wait here, as futures.
static DISK_CALLS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Runs `f` on tokio's blocking pool, one call at a time.
pub(in crate::persist::local) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, PersistError> + Send + 'static,
) -> Result<T, PersistError> {
    let _turn = DISK_CALLS
        .acquire()
        .await
        .map_err(|e| PersistError::Store(format!("store closed: {e}")))?;
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(PersistError::Store(format!("store task failed: {e}"))))
}
