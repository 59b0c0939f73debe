//! The engine over the memory log, with tokio's clock paused: ack
//! timeouts and "nothing more arrives" are exact, never slept.
#![allow(clippy::unwrap_used)] // in tests a panic is the failure report

use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::persist::local::memory::MemoryLog;
use crate::persist::Retention;

const TOPIC: &str = "orders";

fn engine(window: usize, policy: TopicPolicy) -> Engine<MemoryLog> {
    let topics = Topics::new(vec![
        ("orders.>".to_owned(), policy),
        (TOPIC.to_owned(), policy),
    ]);
    Engine::new(
        MemoryLog::new(),
        topics,
        window,
        100,
        Meters::unregistered().unwrap(),
    )
    .unwrap()
}

fn policy() -> TopicPolicy {
    TopicPolicy {
        retention: Retention::default(),
        ack_timeout: Duration::from_secs(60),
    }
}

async fn publish(e: &Engine<MemoryLog>, n: usize) -> Vec<Stored> {
    let mut out = Vec::new();
    for i in 0..n {
        let data = Payload::json(&format!(r#"{{"i":{i}}}"#)).unwrap();
        out.push(e.publish(TOPIC, &data).await.unwrap());
    }
    out
}

async fn next(rx: &mut mpsc::Receiver<Stored>) -> Stored {
    tokio::time::timeout(Duration::from_secs(1), rx.recv())
        .await
        .expect("a delivery")
        .expect("open")
}

async fn nothing(rx: &mut mpsc::Receiver<Stored>) {
    // The clock is paused: this returns once every task is idle.
    if let Ok(got) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
        panic!("expected nothing, got {got:?}");
    }
}

async fn seqs(rx: &mut mpsc::Receiver<Stored>, n: usize) -> Vec<u64> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(next(rx).await.seq);
    }
    out
}

/// Waits until `id` has no session (its task noticed the receiver gone).
async fn detached<L: Log>(e: &Engine<L>, id: &str) {
    for _ in 0..1000 {
        let open = e
            .shared
            .state
            .lock()
            .subs
            .get(id)
            .is_some_and(|s| s.session.is_some());
        if !open {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("{id} never detached");
}

#[tokio::test(start_paused = true)]
async fn a_new_subscription_starts_after_the_last_sequence() {
    let e = engine(8, policy());
    let empty = e.open("a", TOPIC).await.unwrap();
    assert_eq!(empty.resumed_from, 0, "empty topic");
    publish(&e, 3).await;
    let mut b = e.open("b", TOPIC).await.unwrap();
    assert_eq!(b.resumed_from, 3);
    nothing(&mut b.deliveries).await;
    let fourth = publish(&e, 1).await.remove(0);
    assert_eq!(fourth.seq, 4);
    assert_eq!(next(&mut b.deliveries).await, fourth);
    let mut a = empty;
    assert_eq!(seqs(&mut a.deliveries, 4).await, [1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn a_resumed_subscription_gets_every_unacknowledged_message_in_order() {
    let e = engine(8, policy());
    let mut a = e.open("a", TOPIC).await.unwrap();
    let sent = publish(&e, 5).await;
    assert_eq!(seqs(&mut a.deliveries, 5).await, [1, 2, 3, 4, 5]);
    for seq in [1, 2, 4] {
        assert_eq!(e.ack("a", seq).await.unwrap(), Acked::Yes);
    }
    drop(a);
    detached(&e, "a").await;
    let mut again = e.open("a", TOPIC).await.unwrap();
    assert_eq!(again.resumed_from, 2, "every message ≤ 2 acknowledged");
    let third = next(&mut again.deliveries).await;
    assert_eq!(third, sent[2], "same sequence, timestamp and data");
    assert_eq!(next(&mut again.deliveries).await.seq, 5);
    nothing(&mut again.deliveries).await;
    // Then live ones.
    publish(&e, 1).await;
    assert_eq!(next(&mut again.deliveries).await.seq, 6);
}

#[tokio::test(start_paused = true)]
async fn at_most_window_sequences_above_the_floor_are_sent() {
    let e = engine(2, policy());
    let mut a = e.open("a", TOPIC).await.unwrap();
    publish(&e, 5).await;
    assert_eq!(seqs(&mut a.deliveries, 2).await, [1, 2]);
    nothing(&mut a.deliveries).await;
    // Acknowledging 2 does not move the floor (1 is outstanding).
    e.ack("a", 2).await.unwrap();
    nothing(&mut a.deliveries).await;
    e.ack("a", 1).await.unwrap();
    assert_eq!(seqs(&mut a.deliveries, 2).await, [3, 4]);
    nothing(&mut a.deliveries).await;
}

#[tokio::test(start_paused = true)]
async fn an_unacknowledged_message_is_sent_again_after_the_ack_timeout() {
    let short = TopicPolicy {
        ack_timeout: Duration::from_millis(500),
        ..policy()
    };
    let e = engine(8, short);
    let mut a = e.open("a", TOPIC).await.unwrap();
    let sent = publish(&e, 2).await;
    assert_eq!(seqs(&mut a.deliveries, 2).await, [1, 2]);
    e.ack("a", 2).await.unwrap();
    let before = tokio::time::Instant::now();
    let again = next(&mut a.deliveries).await;
    assert_eq!(again, sent[0], "same sequence and timestamp");
    assert!(before.elapsed() >= Duration::from_millis(500));
    assert_eq!(e.shared.meters.redelivered.get(), 1);
    e.ack("a", 1).await.unwrap();
    nothing(&mut a.deliveries).await;
}

#[tokio::test(start_paused = true)]
async fn acknowledgements_are_per_message_and_checked() {
    let e = engine(8, policy());
    let mut a = e.open("a", TOPIC).await.unwrap();
    publish(&e, 3).await;
    assert_eq!(seqs(&mut a.deliveries, 3).await, [1, 2, 3]);
    assert_eq!(e.ack("a", 2).await.unwrap(), Acked::Yes);
    assert_eq!(e.ack("a", 2).await.unwrap(), Acked::Yes, "re-ack: no-op");
    assert_eq!(e.position("a").await.unwrap(), Some((TOPIC.to_owned(), 0)));
    assert_eq!(e.ack("a", 4).await.unwrap(), Acked::NeverDelivered);
    assert_eq!(e.ack("a", 0).await.unwrap(), Acked::NeverDelivered);
    assert_eq!(e.ack("nobody", 1).await, Err(PersistError::NotFound));
    e.ack("a", 1).await.unwrap();
    assert_eq!(e.position("a").await.unwrap(), Some((TOPIC.to_owned(), 2)));
}

#[tokio::test(start_paused = true)]
async fn ids_are_bound_to_their_topic_and_topics_must_be_persistent() {
    let e = engine(8, policy());
    let _a = e.open("a", TOPIC).await.unwrap();
    assert!(matches!(
        e.open("a", "orders.eu").await,
        Err(PersistError::Conflict(_))
    ));
    assert!(matches!(
        e.open("b", "other").await,
        Err(PersistError::NotPersistent(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn delete_ends_deliveries_and_is_idempotent() {
    let e = engine(8, policy());
    let mut a = e.open("a", TOPIC).await.unwrap();
    assert!(e.delete("a").await.unwrap());
    assert!(!e.delete("a").await.unwrap());
    assert!(a.deliveries.recv().await.is_none());
    assert_eq!(e.position("a").await.unwrap(), None);
    assert_eq!(e.shared.meters.attached.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn retention_counts_what_it_evicts_unacknowledged_and_moves_floors() {
    let keep2 = TopicPolicy {
        retention: Retention {
            max_count: Some(2),
            ..Retention::default()
        },
        ..policy()
    };
    let e = engine(8, keep2);
    let mut a = e.open("a", TOPIC).await.unwrap();
    let _b = e.open("b", TOPIC).await.unwrap();
    publish(&e, 2).await;
    assert_eq!(seqs(&mut a.deliveries, 2).await, [1, 2]);
    e.ack("a", 1).await.unwrap();
    // 3 and 4 evict 1 and 2: a had acknowledged 1 → 1 lost for a, 2 for b.
    publish(&e, 2).await;
    assert_eq!(e.shared.meters.evicted_unacked.get(), 3);
    assert_eq!(e.position("a").await.unwrap(), Some((TOPIC.to_owned(), 2)));
    assert_eq!(e.position("b").await.unwrap(), Some((TOPIC.to_owned(), 2)));
    assert_eq!(seqs(&mut a.deliveries, 2).await, [3, 4]);
    assert_eq!(e.shared.meters.stored_messages.get(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_sweep_evicts_by_age() {
    let minute = TopicPolicy {
        retention: Retention {
            max_age: Some(Duration::from_secs(60)),
            ..Retention::default()
        },
        ..policy()
    };
    let e = engine(8, minute);
    let _a = e.open("a", TOPIC).await.unwrap();
    publish(&e, 2).await;
    e.sweep(SystemTime::now()).await.unwrap();
    assert_eq!(e.shared.meters.stored_messages.get(), 2);
    e.sweep(SystemTime::now() + Duration::from_secs(61))
        .await
        .unwrap();
    assert_eq!(e.shared.meters.stored_messages.get(), 0);
    assert_eq!(e.shared.meters.evicted_unacked.get(), 2);
    assert_eq!(e.position("a").await.unwrap(), Some((TOPIC.to_owned(), 2)));
}

#[tokio::test(start_paused = true)]
async fn positions_survive_in_the_log() {
    let e = engine(8, policy());
    let mut a = e.open("a", TOPIC).await.unwrap();
    publish(&e, 3).await;
    assert_eq!(seqs(&mut a.deliveries, 3).await, [1, 2, 3]);
    e.ack("a", 1).await.unwrap();
    e.ack("a", 3).await.unwrap();
    let state = e.shared.state.lock();
    let stored = state.log.position("a").unwrap().unwrap();
    assert_eq!(stored.floor, 1);
    assert_eq!(stored.acked.iter().copied().collect::<Vec<_>>(), [3]);
}

/// The memory log, declared blocking: the engine goes through tokio's
/// blocking pool, as it does for the embedded log.
#[derive(Debug, Default)]
struct BlockingLog(MemoryLog);

impl Log for BlockingLog {
    const BLOCKING: bool = true;

    fn stage(&mut self, changes: Vec<Change>) -> Ticket {
        self.0.stage(changes)
    }
    fn read(&self, topic: &str, after: u64, limit: usize) -> Result<Vec<Stored>, PersistError> {
        self.0.read(topic, after, limit)
    }
    fn last_seq(&self, topic: &str) -> Result<u64, PersistError> {
        self.0.last_seq(topic)
    }
    fn position(&self, id: &str) -> Result<Option<Position>, PersistError> {
        self.0.position(id)
    }
    fn topics(&self) -> Result<Vec<String>, PersistError> {
        self.0.topics()
    }
    fn positions(&self) -> Result<Vec<(String, Position)>, PersistError> {
        self.0.positions()
    }
    fn stats(&self) -> Result<super::super::Usage, PersistError> {
        self.0.stats()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_log_is_called_from_the_blocking_pool() {
    let topics = Topics::new(vec![(TOPIC.to_owned(), policy())]);
    let meters = Meters::unregistered().unwrap();
    let e = Engine::new(BlockingLog::default(), topics, 8, 100, meters).unwrap();
    let mut a = e.open("a", TOPIC).await.unwrap();
    for i in 0..3 {
        let data = Payload::json(&format!("{i}")).unwrap();
        e.publish(TOPIC, &data).await.unwrap();
    }
    assert_eq!(seqs(&mut a.deliveries, 3).await, [1, 2, 3]);
    e.ack("a", 1).await.unwrap();
    drop(a);
    detached(&e, "a").await;
    let mut again = e.open("a", TOPIC).await.unwrap();
    assert_eq!(again.resumed_from, 1);
    assert_eq!(seqs(&mut again.deliveries, 2).await, [2, 3]);
    assert!(e.sweep(SystemTime::now()).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn sequences_before_the_subscription_began_were_never_delivered_to_it() {
    let e = engine(8, policy());
    publish(&e, 3).await;
    let mut a = e.open("a", TOPIC).await.unwrap();
    assert_eq!(a.resumed_from, 3);
    for seq in [1, 2, 3] {
        assert_eq!(
            e.ack("a", seq).await.unwrap(),
            Acked::NeverDelivered,
            "{seq} came before the subscription"
        );
    }
    publish(&e, 1).await;
    assert_eq!(next(&mut a.deliveries).await.seq, 4);
    assert_eq!(e.ack("a", 4).await.unwrap(), Acked::Yes);
    drop(a);
    detached(&e, "a").await;
    let again = e.open("a", TOPIC).await.unwrap();
    assert_eq!(again.resumed_from, 4);
    assert_eq!(e.ack("a", 2).await.unwrap(), Acked::NeverDelivered);
    assert_eq!(e.ack("a", 4).await.unwrap(), Acked::Yes, "re-ack: no-op");
}

/// The memory log whose batches with changes fail while `fail` is set;
/// barriers (empty batches) still resolve, as the embedded writer's do
/// (they need no commit).
#[derive(Debug, Default)]
struct FailingLog {
    log: MemoryLog,
    fail: Arc<std::sync::atomic::AtomicBool>,
}

impl Log for FailingLog {
    fn stage(&mut self, changes: Vec<Change>) -> Ticket {
        if !changes.is_empty() && self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Ticket::ready(Err(PersistError::Store("injected".to_owned())));
        }
        self.log.stage(changes)
    }
    fn read(&self, topic: &str, after: u64, limit: usize) -> Result<Vec<Stored>, PersistError> {
        self.log.read(topic, after, limit)
    }
    fn last_seq(&self, topic: &str) -> Result<u64, PersistError> {
        self.log.last_seq(topic)
    }
    fn position(&self, id: &str) -> Result<Option<Position>, PersistError> {
        self.log.position(id)
    }
    fn topics(&self) -> Result<Vec<String>, PersistError> {
        self.log.topics()
    }
    fn positions(&self) -> Result<Vec<(String, Position)>, PersistError> {
        self.log.positions()
    }
    fn stats(&self) -> Result<super::super::Usage, PersistError> {
        self.log.stats()
    }
}

type Switch = Arc<std::sync::atomic::AtomicBool>;

fn failing_engine() -> (Engine<FailingLog>, Switch) {
    let log = FailingLog::default();
    let fail = log.fail.clone();
    let topics = Topics::new(vec![(TOPIC.to_owned(), policy())]);
    let meters = Meters::unregistered().unwrap();
    (Engine::new(log, topics, 8, 100, meters).unwrap(), fail)
}

fn set(switch: &Switch, on: bool) {
    switch.store(on, std::sync::atomic::Ordering::SeqCst);
}

async fn publish_to<L: Log>(e: &Engine<L>, n: usize) {
    for i in 0..n {
        let data = Payload::json(&format!("{i}")).unwrap();
        e.publish(TOPIC, &data).await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn an_acknowledgement_whose_write_failed_changes_nothing() {
    let (e, fail) = failing_engine();
    let mut a = e.open("a", TOPIC).await.unwrap();
    publish_to(&e, 3).await;
    assert_eq!(seqs(&mut a.deliveries, 3).await, [1, 2, 3]);
    set(&fail, true);
    assert!(matches!(e.ack("a", 1).await, Err(PersistError::Store(_))));
    assert!(
        matches!(e.ack("a", 1).await, Err(PersistError::Store(_))),
        "a retry is written again, not answered from memory"
    );
    assert_eq!(e.position("a").await.unwrap(), Some((TOPIC.to_owned(), 0)));
    // A resume reports the durable floor and sends 1 again.
    drop(a);
    detached(&e, "a").await;
    let mut again = e.open("a", TOPIC).await.unwrap();
    assert_eq!(again.resumed_from, 0);
    assert_eq!(seqs(&mut again.deliveries, 3).await, [1, 2, 3]);
    set(&fail, false);
    assert_eq!(e.ack("a", 1).await.unwrap(), Acked::Yes);
    assert_eq!(e.position("a").await.unwrap(), Some((TOPIC.to_owned(), 1)));
    let stored = e.with_log(|l| l.position("a").unwrap().unwrap());
    assert_eq!(stored.floor, 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_delete_keeps_the_id_and_a_failed_create_leaves_none() {
    let (e, fail) = failing_engine();
    let mut a = e.open("a", TOPIC).await.unwrap();
    set(&fail, true);
    assert!(matches!(e.delete("a").await, Err(PersistError::Store(_))));
    assert_eq!(e.position("a").await.unwrap(), Some((TOPIC.to_owned(), 0)));
    assert!(matches!(
        e.open("b", TOPIC).await,
        Err(PersistError::Store(_))
    ));
    assert!(
        matches!(e.open("b", TOPIC).await, Err(PersistError::Store(_))),
        "a retry is written again, not answered from memory"
    );
    assert_eq!(e.position("b").await.unwrap(), None);
    assert_eq!(e.subscriptions(), 1);
    set(&fail, false);
    // The session of "a" still delivers.
    publish_to(&e, 1).await;
    assert_eq!(next(&mut a.deliveries).await.seq, 1);
    assert_eq!(e.open("b", TOPIC).await.unwrap().resumed_from, 1);
    assert!(e.delete("a").await.unwrap());
    assert_eq!(e.position("a").await.unwrap(), None);
    assert!(a.deliveries.recv().await.is_none());
}
