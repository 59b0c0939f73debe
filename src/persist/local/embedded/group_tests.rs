//! Group commit: batches staged while the writer cannot commit (the test
//! holds redb's one write transaction, so the writer waits in
//! `begin_write` with at most the first batch taken) share one commit,
//! and what was answered is on disk when the store is reopened.
//!
//! Deterministic: the test stages every batch before it lets the writer
//! go, so the writer makes at most two commits (the batch it took before
//! waiting, then everything else), where one commit per batch makes one
//! per batch.
#![allow(clippy::unwrap_used)] // in tests a panic is the failure report

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use tokio::task::JoinSet;

use super::*;
use crate::envelope::Payload;
use crate::persist::local::Engine;
use crate::persist::{Meters, Retention, Store, TopicPolicy, Topics};

fn json(text: &str) -> Payload {
    Payload::json(text).unwrap()
}

fn append(i: u64) -> Change {
    Change::Append {
        topic: "t".to_owned(),
        data: json(&i.to_string()),
        at: SystemTime::now(),
        retention: Retention::default(),
    }
}

fn position(id: &str, floor: u64) -> Change {
    Change::SetPosition {
        id: id.to_owned(),
        position: Position {
            topic: "t".to_owned(),
            start: 0,
            floor,
            acked: BTreeSet::new(),
        },
    }
}

#[test]
fn batches_staged_while_the_writer_waits_share_one_commit() {
    const BATCHES: u64 = 20;
    let dir = tempfile::tempdir().unwrap();
    let mut log = EmbeddedLog::open(dir.path()).unwrap();
    let db = log.db().unwrap().clone();
    let before = log.commits();
    let hold = db.begin_write().unwrap();
    let tickets: Vec<Ticket> = (1..=BATCHES)
        .map(|i| log.stage(vec![append(i), position("s", i)]))
        .collect();
    let barrier = log.stage(Vec::new());
    drop(hold);
    for (i, ticket) in (1..=BATCHES).zip(tickets) {
        let applied = ticket.wait_blocking().unwrap();
        let (stored, _) = applied[0].clone().into_appended().unwrap();
        assert_eq!(stored.seq, i, "in the order staged");
    }
    assert_eq!(barrier.wait_blocking().unwrap(), []);
    let made = log.commits() - before;
    assert!(made <= 2, "{made} commits for {BATCHES} batches");
    assert_eq!(log.staged(), BATCHES + 1);
    drop(db);
    log.close();

    let log = EmbeddedLog::open(dir.path()).unwrap();
    assert_eq!(log.last_seq("t").unwrap(), BATCHES);
    assert_eq!(log.position("s").unwrap().unwrap().floor, BATCHES);
}

#[test]
fn a_batch_larger_than_the_queue_is_admitted_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = EmbeddedLog::open(dir.path()).unwrap();
    let changes: Vec<Change> = (0..QUEUE + 10)
        .map(|i| position(&format!("s{i}"), 1))
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let outcome = log.stage(changes).wait_blocking().map(|a| a.len());
        // The receiver outlives this unless the test already failed.
        let _ = tx.send((outcome, log.positions().map(|p| p.len())));
    });
    // A guard against a stager that waits for room forever.
    let (applied, stored) = rx.recv_timeout(Duration::from_secs(120)).unwrap();
    assert_eq!(applied.unwrap(), QUEUE + 10);
    assert_eq!(stored.unwrap(), QUEUE + 10);
}

/// The engine: acks of ten subscribers and ten publishes, all waiting at
/// once, go to disk in at most two commits, each answered only after its
/// commit; after a reopen every answered ack and publish is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_and_publishes_waiting_together_share_a_commit_and_are_on_disk() {
    const SUBS: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let log = EmbeddedLog::open(dir.path()).unwrap();
    let db = log.db().unwrap().clone();
    let policy = TopicPolicy {
        retention: Retention::default(),
        ack_timeout: Duration::from_secs(600),
    };
    let topics = Topics::new(vec![("t".to_owned(), policy)]);
    let meters = Meters::unregistered().unwrap();
    let engine = Engine::new(log, topics, 64, 100, meters).unwrap();
    let mut subs = Vec::new();
    for i in 0..SUBS {
        subs.push(engine.open(&format!("s{i}"), "t").await.unwrap());
    }
    engine.publish("t", &json("0")).await.unwrap();
    for sub in &mut subs {
        let first = tokio::time::timeout(Duration::from_secs(30), sub.deliveries.recv());
        assert_eq!(first.await.unwrap().unwrap().seq, 1);
    }
    let (staged, commits) = engine.with_log(|l| (l.staged(), l.commits()));

    let hold = db.begin_write().unwrap();
    let mut calls = JoinSet::new();
    for i in 0..SUBS {
        let e = engine.clone();
        calls.spawn(async move { e.ack(&format!("s{i}"), 1).await.map(|_| ()) });
        let e = engine.clone();
        calls.spawn(async move { e.publish("t", &json(&i.to_string())).await.map(|_| ()) });
    }
    let calls_made = 2 * SUBS as u64;
    until(|| engine.with_log(|l| l.staged()) - staged == calls_made).await;
    assert!(calls.try_join_next().is_none(), "answered before a commit");
    drop(hold);
    while let Some(answered) = calls.join_next().await {
        answered.unwrap().unwrap();
    }
    let made = engine.with_log(|l| l.commits()) - commits;
    assert!(made <= 2, "{made} commits for {calls_made} calls");

    drop((db, subs));
    engine.close();
    let log = EmbeddedLog::open(dir.path()).unwrap();
    assert_eq!(log.last_seq("t").unwrap(), 1 + SUBS as u64);
    for i in 0..SUBS {
        let stored = log.position(&format!("s{i}")).unwrap().unwrap();
        assert_eq!(stored.floor, 1, "s{i}: its answered ack");
    }
}

/// Waits until `done` holds (checked every millisecond; a generous guard
/// against never).
async fn until(done: impl Fn() -> bool) {
    for _ in 0..60_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never happened");
}
