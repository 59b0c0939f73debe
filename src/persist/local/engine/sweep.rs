//! Retention by age: every [`SWEEP_EVERY`], the expiry of every stored
//! topic kept by age is staged as one batch, and what it evicted is
//! accounted for once durable.

use super::*;

impl<L: Log> Engine<L> {
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
                if let Err(e) = engine.sweep(SystemTime::now()).await {
                    tracing::warn!(error = %e, "persistent store: retention sweep failed");
                }
            }
        });
    }

    /// Applies retention by age at `now` to every stored topic: the
    /// expiries staged as one batch, their evictions accounted for once
    /// durable.
    pub async fn sweep(&self, now: SystemTime) -> Result<(), PersistError> {
        let (topics, ticket) = self.call(move |e| e.stage_expiry(now)).await?;
        let applied = ticket.wait().await?;
        self.call(move |e| e.expired(&topics, applied)).await
    }

    /// Stages the expiry of every stored topic kept by age.
    fn stage_expiry(&self, now: SystemTime) -> Result<(Vec<String>, Ticket), PersistError> {
        let mut state = self.shared.state.lock();
        let mut topics = Vec::new();
        let mut changes = Vec::new();
        for topic in state.log.topics()? {
            let Some(policy) = self.shared.topics.policy(&topic).copied() else {
                continue;
            };
            if policy.retention.max_age.is_none() {
                continue;
            }
            changes.push(Change::Expire {
                topic: topic.clone(),
                now,
                retention: policy.retention,
            });
            topics.push(topic);
        }
        Ok((topics, state.log.stage(changes)))
    }

    /// Accounts for what the expiry of `topics` evicted.
    fn expired(&self, topics: &[String], applied: Vec<Applied>) -> Result<(), PersistError> {
        let mut state = self.shared.state.lock();
        for (topic, applied) in topics.iter().zip(applied) {
            let evicted = applied.into_expired()?;
            self.shared.evicted(&mut state, topic, &evicted)?;
        }
        Ok(())
    }
}
