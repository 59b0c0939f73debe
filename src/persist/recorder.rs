//! [`Recorder`]: the hand-off from the broker's publishers (upstream
//! notifications on shared connections, streaming feeds) to the store.
//!
//! A publisher must never wait for the store: [`Recorder::record`] only
//! checks whether the topic is persistent and queues the event for the one
//! writer task, which stores events in the order they were queued: every
//! event waiting when it is free (at most [`BATCH`]) in one
//! [`Store::publish_batch`], so that a store with group commit (the
//! embedded one) writes them with one commit. The queue holds at most
//! [`QUEUE`] events; one that finds it full is not stored, and is counted
//! (`switchyard_persistent_publish_failed_total`) and logged (at most one
//! line per second), as is a publish the store fails. Never silent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Backend, Meters, Store, Topics};
use crate::envelope::Payload;

/// Events waiting to be stored, at most.
pub const QUEUE: usize = 4096;

/// Events handed to the store at once, at most (taken from the queue, so
/// the events held by the writer and the queue together stay within
/// `QUEUE + BATCH`).
pub const BATCH: usize = 512;

/// The publishers' side of the hand-off: cheap to clone.
#[derive(Debug, Clone)]
pub struct Recorder {
    topics: Arc<Topics>,
    tx: mpsc::Sender<(String, Payload)>,
    meters: Meters,
    /// The second (since the epoch) a failure was last logged.
    logged: Arc<AtomicU64>,
}

// === impl Recorder ===

impl Recorder {
    /// Starts the writer task storing into `store` until `stop` (or every
    /// recorder is dropped); events of topics not in `topics` are ignored.
    pub fn spawn(
        store: Arc<Backend>,
        topics: Topics,
        meters: Meters,
        stop: CancellationToken,
    ) -> Recorder {
        let (tx, rx) = mpsc::channel(QUEUE);
        let recorder = Recorder {
            topics: Arc::new(topics),
            tx,
            meters,
            logged: Arc::new(AtomicU64::new(0)),
        };
        tokio::spawn(recorder.clone().write(store, rx, stop));
        recorder
    }

    /// Whether events under the concrete `topic` are stored.
    pub fn is_persistent(&self, topic: &str) -> bool {
        self.topics.policy(topic).is_some()
    }

    /// Queues `data`, published under `topic`, for the store if the topic
    /// is persistent. Never waits.
    pub fn record(&self, topic: &str, data: &Payload) {
        if !self.is_persistent(topic) {
            return;
        }
        // Queued, so detached from the line it was read from: the queue's
        // bound is in its events' own bytes, not in read buffers they hold.
        if self.tx.try_send((topic.to_owned(), data.detach())).is_err() {
            self.failed(topic, "hand-off queue full (or the store stopped)");
        }
    }

    async fn write(
        self,
        store: Arc<Backend>,
        mut rx: mpsc::Receiver<(String, Payload)>,
        stop: CancellationToken,
    ) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let taken = tokio::select! {
                n = rx.recv_many(&mut batch, BATCH) => n,
                () = stop.cancelled() => 0,
            };
            if taken == 0 {
                return;
            }
            let events = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
            let count = events.len();
            let first = events.first().map(|(topic, _)| topic.clone());
            if let Err(e) = store.publish_batch(events).await {
                let topic = first.unwrap_or_default();
                for _ in 0..count {
                    self.failed(&topic, &e.to_string());
                }
            }
        }
    }

    /// Counts a lost event and logs it, at most once a second.
    fn failed(&self, topic: &str, why: &str) {
        self.meters.publish_failed.inc();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if self.logged.swap(now, Ordering::Relaxed) != now {
            tracing::warn!(
                topic,
                error = why,
                "persistent event not stored (counted in switchyard_persistent_publish_failed_total)"
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::persist::{BackendKind, Retention, Settings, TopicPolicy};

    /// The hand-off holds at most [`QUEUE`] events: with the writer unable
    /// to run (a current-thread runtime that is never yielded to), the
    /// events past it are refused at once and counted, never queued.
    #[tokio::test(flavor = "current_thread")]
    async fn the_hand_off_holds_at_most_queue_events_and_counts_the_rest() {
        let policy = TopicPolicy {
            retention: Retention::default(),
            ack_timeout: Duration::from_secs(60),
        };
        let topics = Topics::new(vec![("t".to_owned(), policy)]);
        let meters = Meters::unregistered().unwrap();
        let settings = Settings {
            backend: BackendKind::Memory,
            path: None,
            nats_url: None,
            window: 8,
            topics: topics.clone(),
        };
        let store = Arc::new(Backend::open(&settings, meters.clone()).await.unwrap());
        let recorder = Recorder::spawn(store, topics, meters.clone(), CancellationToken::new());
        let data = Payload::json("1").unwrap();
        for _ in 0..QUEUE + 10 {
            recorder.record("t", &data);
        }
        recorder.record("not.persistent", &data);
        assert_eq!(meters.publish_failed.get(), 10);
    }
}
