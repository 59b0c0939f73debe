//! [`Recorder`]: the hand-off from the broker's publishers (upstream
//! notifications on shared connections, streaming feeds) to the store.
//!
//! [`Recorder::record`] checks whether the topic is persistent and queues
//! the event for the one writer task, which stores events in the order they
//! were queued: every event waiting when it is free (at most [`BATCH`]) in
//! one [`Store::publish_batch`], so that a store with group commit (the
//! embedded one) writes them with one commit. The queue holds at most
//! [`QUEUE`] events.
//!
//! A stored topic must not lose what it accepted, so an event that finds
//! the queue full is not dropped: it waits in its publisher's [`Backlog`]
//! (behind any already waiting there, so the order holds), and the
//! publisher calls [`Recorder::hand_off`] before it reads its upstream on.
//! Publishers call it on the task that reads the upstream connection (a
//! link's reader, a feed's task), so when the store falls behind that
//! connection is not read until the store takes its events: back-pressure
//! to the upstream through its socket, never an unbounded buffer here. Its
//! plain pub/sub events are slowed with it (they come off the same
//! connection). A backlog holds at most the events of one read (one line or
//! frame, a batch's items), within the upstream's frame limit.
//!
//! An event is lost only when the store stops (shutdown) before taking it,
//! or fails the publish: counted (`switchyard_persistent_publish_failed_total`)
//! and logged (at most one line per second). Never silent.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_util::sync::CancellationToken;

use super::{Backend, Meters, Store, Topics};
use crate::envelope::Payload;

/// Events waiting to be stored, at most (past it, publishers wait: see
/// [`Backlog`]).
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

/// One publisher's events that found the queue full, in order, waiting
/// for [`Recorder::hand_off`]. Bounded by what the publisher reads before
/// it hands them off: one line or frame of its upstream.
#[derive(Debug, Default)]
pub struct Backlog(Mutex<VecDeque<(String, Payload)>>);

// === impl Backlog ===

impl Backlog {
    /// Whether no event waits (nothing to hand off).
    pub fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }
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
    /// is persistent. Never waits: when the queue is full (or `backlog`
    /// already holds events, which go first), the event waits in
    /// `backlog`, and the caller must [`Recorder::hand_off`] it before it
    /// reads on.
    pub fn record(&self, topic: &str, data: &Payload, backlog: &Backlog) {
        if !self.is_persistent(topic) {
            return;
        }
        // Queued, so detached from the line it was read from: the queue's
        // bound is in its events' own bytes, not in read buffers they hold.
        let event = (topic.to_owned(), data.detach());
        let mut waiting = backlog.0.lock();
        if !waiting.is_empty() {
            waiting.push_back(event);
            return;
        }
        match self.tx.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(event)) => waiting.push_back(event),
            Err(TrySendError::Closed(_)) => self.failed(topic, "the store stopped"),
        }
    }

    /// Waits until the queue took every event of `backlog`, in order. Cancel
    /// safe: what was not taken stays in `backlog`. Events the store can no
    /// longer take (it stopped) are counted and logged.
    pub async fn hand_off(&self, backlog: &Backlog) {
        while !backlog.is_empty() {
            let Ok(permit) = self.tx.reserve().await else {
                for (topic, _) in backlog.0.lock().drain(..) {
                    self.failed(&topic, "the store stopped");
                }
                return;
            };
            let Some(event) = backlog.0.lock().pop_front() else {
                return;
            };
            permit.send(event);
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
                biased;
                () = stop.cancelled() => 0,
                n = rx.recv_many(&mut batch, BATCH) => n,
            };
            if taken == 0 {
                // Stopped: what still waits will not be stored.
                rx.close();
                while let Ok((topic, _)) = rx.try_recv() {
                    self.failed(&topic, "the store stopped");
                }
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

    fn memory(topics: &Topics) -> Settings {
        Settings {
            backend: BackendKind::Memory,
            path: None,
            nats_url: None,
            window: 8,
            topics: topics.clone(),
            caps: crate::persist::Caps::default(),
        }
    }

    fn topics() -> Topics {
        let policy = TopicPolicy {
            retention: Retention::default(),
            ack_timeout: Duration::from_secs(60),
        };
        Topics::new(vec![("t".to_owned(), policy)])
    }

    /// The hand-off holds at most [`QUEUE`] events: with the writer unable
    /// to run (a current-thread runtime that is not yielded to), the events
    /// past it wait in the publisher's backlog, none is dropped; handing
    /// them off waits for the writer, and then every one is stored.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_queue_keeps_events_in_the_backlog_until_handed_off() {
        let topics = topics();
        let meters = Meters::unregistered().unwrap();
        let settings = memory(&topics);
        let store = Arc::new(Backend::open(&settings, meters.clone()).await.unwrap());
        let recorder = Recorder::spawn(store, topics, meters.clone(), CancellationToken::new());
        let backlog = Backlog::default();
        for i in 0..QUEUE + 10 {
            let data = Payload::json(&i.to_string()).unwrap();
            recorder.record("t", &data, &backlog);
        }
        recorder.record("not.persistent", &Payload::json("1").unwrap(), &backlog);
        assert_eq!(backlog.0.lock().len(), 10, "the queue holds QUEUE events");
        assert_eq!(meters.publish_failed.get(), 0, "none dropped");

        tokio::time::timeout(Duration::from_secs(60), recorder.hand_off(&backlog))
            .await
            .unwrap();
        assert!(backlog.is_empty());
        let total = u64::try_from(QUEUE + 10).unwrap();
        let stored = async {
            while meters.published.get() < total {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), stored)
            .await
            .unwrap();
        assert_eq!(meters.published.get(), total);
        assert_eq!(meters.publish_failed.get(), 0);
    }

    /// Once the store stopped, what waits is counted as not stored, and
    /// handing off does not wait for it.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stopped_store_counts_what_waits() {
        let topics = topics();
        let meters = Meters::unregistered().unwrap();
        let settings = memory(&topics);
        let store = Arc::new(Backend::open(&settings, meters.clone()).await.unwrap());
        let stop = CancellationToken::new();
        let recorder = Recorder::spawn(store, topics, meters.clone(), stop.clone());
        let backlog = Backlog::default();
        let data = Payload::json("1").unwrap();
        for _ in 0..QUEUE + 3 {
            recorder.record("t", &data, &backlog);
        }
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(60), recorder.hand_off(&backlog))
            .await
            .unwrap();
        let total = u64::try_from(QUEUE + 3).unwrap();
        assert_eq!(meters.publish_failed.get(), total, "every event counted");
        assert!(backlog.is_empty());
    }
}
