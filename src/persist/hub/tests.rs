//! The hub over the memory store, with tokio's clock paused: "nothing
//! delivered yet" is checked once every task is idle, never slept.
#![allow(clippy::unwrap_used)] // in tests a panic is the failure report

use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::envelope::Payload;
use crate::persist::local::memory::MemoryLog;
use crate::persist::local::Engine;
use crate::persist::{Meters, Store, TopicPolicy};

const TOPIC: &str = "orders";

/// Records the sequence of every delivery.
#[derive(Debug)]
struct Recorder(mpsc::Sender<u64>);

impl Sink for Recorder {
    fn deliver<'a>(&'a self, _id: &'a str, message: &'a Stored) -> BoxFuture<'a, bool> {
        Box::pin(async move { self.0.send(message.seq).await.is_ok() })
    }
}

fn hub() -> Arc<Hub> {
    let topics = Topics::new(vec![(TOPIC.to_owned(), TopicPolicy::default())]);
    let engine = Engine::new(
        MemoryLog::new(),
        topics.clone(),
        64,
        100,
        Meters::unregistered().unwrap(),
    )
    .unwrap();
    Arc::new(Hub::new(Arc::new(Backend::Memory(engine)), topics))
}

fn attach(hub: &Arc<Hub>) -> (Attachment, mpsc::Receiver<u64>) {
    let (tx, rx) = mpsc::channel(64);
    (hub.attach(Arc::new(Recorder(tx)), Owner::listener("l")), rx)
}

async fn publish(hub: &Hub, n: usize) {
    for i in 0..n {
        let data = Payload::json(&format!(r#"{{"i":{i}}}"#)).unwrap();
        hub.store().publish(TOPIC, &data).await.unwrap();
    }
}

async fn nothing(rx: &mut mpsc::Receiver<u64>) {
    // The clock is paused: this returns once every task is idle.
    if let Ok(got) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
        panic!("expected nothing yet, got {got:?}");
    }
}

async fn next(rx: &mut mpsc::Receiver<u64>) -> u64 {
    tokio::time::timeout(Duration::from_secs(1), rx.recv())
        .await
        .expect("a delivery")
        .expect("open")
}

/// Retained messages are ready the moment a resumed subscription opens;
/// none may reach the client before the subscribe call's reply is queued.
#[tokio::test(start_paused = true)]
async fn a_resumed_subscription_delivers_only_once_its_reply_is_queued() {
    let hub = hub();
    let (att, _rx) = attach(&hub);
    let starts = Starts::default();
    assert_eq!(att.subscribe("a", TOPIC, &starts).await.unwrap(), 0);
    drop(att); // detached, position kept
    publish(&hub, 3).await;

    let (att, mut rx) = attach(&hub);
    let starts = Starts::default();
    assert_eq!(att.subscribe("a", TOPIC, &starts).await.unwrap(), 0);
    nothing(&mut rx).await;
    starts.release();
    let got = [
        next(&mut rx).await,
        next(&mut rx).await,
        next(&mut rx).await,
    ];
    assert_eq!(got, [1, 2, 3]);
}

/// A batch subscribe holds every pump it opened until its one reply.
#[tokio::test(start_paused = true)]
async fn a_batch_subscribe_holds_every_pump_until_its_reply() {
    let hub = hub();
    let items = [
        ("a".to_owned(), TOPIC.to_owned()),
        ("b".to_owned(), TOPIC.to_owned()),
    ];
    let (att, _rx) = attach(&hub);
    att.subscribe_all(&items, &Starts::default()).await.unwrap();
    drop(att);
    publish(&hub, 2).await;

    let (att, mut rx) = attach(&hub);
    let starts = Starts::default();
    assert_eq!(att.subscribe_all(&items, &starts).await.unwrap(), [0, 0]);
    nothing(&mut rx).await;
    drop(starts); // dropping releases too
    let mut got: Vec<u64> = Vec::new();
    for _ in 0..4 {
        got.push(next(&mut rx).await);
    }
    got.sort_unstable();
    assert_eq!(got, [1, 1, 2, 2]);
}
