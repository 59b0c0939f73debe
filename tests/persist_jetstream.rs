//! The JetStream backend against a real `nats-server -js` (one per test,
//! random loopback port, temp dir): sequences, new and resumed positions,
//! acknowledgements, unsubscribe, conflicts across instances, retention
//! and redelivery after the ack timeout.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, SystemTime};

use common::nats::NatsServer;
use serde_json::value::RawValue;
use switchyard::envelope::Payload;
use switchyard::persist::jetstream::JetStream;
use switchyard::persist::{
    Acked, Meters, PersistError, Retention, Store, Stored, TopicPolicy, Topics,
};
use tokio::sync::mpsc;

/// A failure guard for one expected delivery, never a pause.
const STEP: Duration = Duration::from_secs(15);

/// `orders`, `orders-*` keep everything; `small` keeps 3 messages;
/// `quick` has a 300 ms ack timeout; anything else is not persistent.
fn topics() -> Topics {
    let small = TopicPolicy {
        retention: Retention {
            max_count: Some(3),
            ..Retention::default()
        },
        ..TopicPolicy::default()
    };
    let quick = TopicPolicy {
        ack_timeout: Duration::from_millis(300),
        ..TopicPolicy::default()
    };
    Topics::new(vec![
        ("orders".to_owned(), TopicPolicy::default()),
        ("orders-empty".to_owned(), TopicPolicy::default()),
        ("orders-other".to_owned(), TopicPolicy::default()),
        ("orders-two".to_owned(), TopicPolicy::default()),
        ("small".to_owned(), small),
        ("quick".to_owned(), quick),
    ])
}

/// A backend and the meters it reports to.
async fn backend(nats: &NatsServer) -> JetStream {
    backend_with(nats).await.0
}

async fn backend_with(nats: &NatsServer) -> (JetStream, Meters) {
    let meters = Meters::unregistered().unwrap();
    let js = JetStream::connect(&nats.url, topics(), 16, meters.clone())
        .await
        .unwrap();
    (js, meters)
}

fn json(n: u64) -> Payload {
    Payload::Json(
        RawValue::from_string(format!("{{\"n\":{n}}}"))
            .unwrap()
            .into(),
    )
}

async fn next(rx: &mut mpsc::Receiver<Stored>) -> Stored {
    tokio::time::timeout(STEP, rx.recv())
        .await
        .expect("a delivery within the guard")
        .expect("deliveries open")
}

async fn seqs(rx: &mut mpsc::Receiver<Stored>, n: usize) -> Vec<u64> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(next(rx).await.seq);
    }
    out
}

#[tokio::test]
async fn publish_numbers_from_one_and_a_new_subscription_starts_after_the_last() {
    let nats = NatsServer::start();
    let (js, meters) = backend_with(&nats).await;
    for n in 1..=3 {
        let s = js.publish("orders", &json(n)).await.unwrap();
        assert_eq!((s.topic.as_str(), s.seq), ("orders", n));
    }
    assert_eq!(meters.published.get(), 3);
    assert_eq!(meters.write_seconds.get_sample_count(), 3);
    let mut opened = js.open("sub-a", "orders").await.unwrap();
    assert_eq!(opened.resumed_from, 3);
    let before = SystemTime::now() - Duration::from_secs(5);
    js.publish("orders", &json(4)).await.unwrap();
    let got = next(&mut opened.deliveries).await;
    assert_eq!((got.seq, got.data), (4, json(4)));
    assert!(got.stored_at > before && got.stored_at <= SystemTime::now() + Duration::from_secs(5));

    let empty = js.open("sub-b", "orders-empty").await.unwrap();
    assert_eq!(empty.resumed_from, 0, "an empty topic reports 0");
    assert!(matches!(
        js.publish("not-persistent", &json(1)).await,
        Err(PersistError::NotPersistent(_))
    ));
    assert!(matches!(
        js.open("sub-c", "not-persistent").await,
        Err(PersistError::NotPersistent(_))
    ));
}

#[tokio::test]
async fn cbor_payloads_keep_their_encoding() {
    let nats = NatsServer::start();
    let js = backend(&nats).await;
    let mut opened = js.open("c", "orders").await.unwrap();
    let data = Payload::Cbor(vec![0xa1, 0x61, 0x6e, 0x01].into());
    js.publish("orders", &data).await.unwrap();
    assert_eq!(next(&mut opened.deliveries).await.data, data);
}

#[tokio::test]
async fn resume_reports_the_ack_floor_and_redelivers_every_unacknowledged_in_order() {
    let nats = NatsServer::start();
    let (js, meters) = backend_with(&nats).await;
    let mut opened = js.open("r", "orders").await.unwrap();
    assert_eq!(opened.resumed_from, 0);
    for n in 1..=5 {
        js.publish("orders", &json(n)).await.unwrap();
    }
    assert_eq!(seqs(&mut opened.deliveries, 5).await, [1, 2, 3, 4, 5]);
    for seq in [1, 2, 4] {
        assert_eq!(js.ack("r", seq).await.unwrap(), Acked::Yes);
    }
    assert_eq!(
        js.ack("r", 2).await.unwrap(),
        Acked::Yes,
        "re-ack is a no-op"
    );
    assert_eq!(js.ack("r", 9).await.unwrap(), Acked::NeverDelivered);
    assert_eq!(js.ack("r", 0).await.unwrap(), Acked::NeverDelivered);
    assert_eq!(meters.acks.get(), 4, "re-acks count too");
    assert_eq!(
        js.position("r").await.unwrap(),
        Some(("orders".to_owned(), 2))
    );
    drop(opened); // detach: the position stays

    let mut again = js.open("r", "orders").await.unwrap();
    assert_eq!(again.resumed_from, 2);
    // 4 was acknowledged out of order above the floor: not sent again.
    assert_eq!(seqs(&mut again.deliveries, 2).await, [3, 5]);
    assert_eq!(meters.redelivered.get(), 2, "3 and 5 were sent before");
    assert_eq!(meters.attached.get(), 1, "the detached one counted down");
    js.publish("orders", &json(6)).await.unwrap();
    assert_eq!(next(&mut again.deliveries).await.seq, 6, "then live ones");
    for seq in [3, 4, 5, 6] {
        assert_eq!(js.ack("r", seq).await.unwrap(), Acked::Yes);
    }
    drop(again);
    let last = js.open("r", "orders").await.unwrap();
    assert_eq!(last.resumed_from, 6);
}

#[tokio::test]
async fn a_second_instance_resumes_and_detects_conflicts() {
    let nats = NatsServer::start();
    let a = backend(&nats).await;
    let b = backend(&nats).await;
    let mut on_a = a.open("shared", "orders").await.unwrap();
    for n in 1..=4 {
        a.publish("orders", &json(n)).await.unwrap();
    }
    assert_eq!(seqs(&mut on_a.deliveries, 4).await, [1, 2, 3, 4]);
    assert_eq!(a.ack("shared", 1).await.unwrap(), Acked::Yes);

    assert!(matches!(
        b.open("shared", "orders-other").await,
        Err(PersistError::Conflict(_))
    ));
    // B takes the id over: A's deliveries end, B gets 2..4 again.
    let mut on_b = b.open("shared", "orders").await.unwrap();
    assert_eq!(on_b.resumed_from, 1);
    assert_eq!(seqs(&mut on_b.deliveries, 3).await, [2, 3, 4]);
    let ended = tokio::time::timeout(STEP, on_a.deliveries.recv())
        .await
        .unwrap();
    assert!(
        ended.is_none(),
        "A's deliveries end once B recreated the consumer"
    );
    assert_eq!(b.ack("shared", 3).await.unwrap(), Acked::Yes);
    assert!(matches!(
        a.ack("shared", 2).await,
        Err(PersistError::NotFound)
    ));
}

#[tokio::test]
async fn unsubscribe_deletes_and_is_idempotent() {
    let nats = NatsServer::start();
    let js = backend(&nats).await;
    let mut opened = js.open("d", "orders").await.unwrap();
    js.publish("orders", &json(1)).await.unwrap();
    assert_eq!(next(&mut opened.deliveries).await.seq, 1);
    assert!(js.delete("d").await.unwrap());
    assert!(
        opened.deliveries.recv().await.is_none(),
        "its deliveries end"
    );
    assert!(!js.delete("d").await.unwrap());
    assert_eq!(js.position("d").await.unwrap(), None);
    assert!(matches!(js.ack("d", 1).await, Err(PersistError::NotFound)));
    // The id is free again, even for another topic, and starts anew.
    let fresh = js.open("d", "orders-two").await.unwrap();
    assert_eq!(fresh.resumed_from, 0);
}

#[tokio::test]
async fn max_count_evicts_the_oldest_and_counts_what_a_subscriber_lost() {
    let nats = NatsServer::start();
    let (js, meters) = backend_with(&nats).await;
    let opened = js.open("e", "small").await.unwrap();
    drop(opened); // detached while the topic moves on
    for n in 1..=5 {
        js.publish("small", &json(n)).await.unwrap();
    }
    let mut again = js.open("e", "small").await.unwrap();
    assert_eq!(again.resumed_from, 0);
    assert_eq!(seqs(&mut again.deliveries, 3).await, [3, 4, 5]);
    assert_eq!(meters.evicted_unacked.get(), 2);
    let (messages, bytes) = js.usage().await.unwrap();
    assert_eq!(messages, 3, "the stream keeps max_count");
    assert!(bytes > 0);
}

#[tokio::test]
async fn an_unacknowledged_message_comes_again_after_the_ack_timeout() {
    let nats = NatsServer::start();
    let (js, meters) = backend_with(&nats).await;
    let mut opened = js.open("q", "quick").await.unwrap();
    js.publish("quick", &json(1)).await.unwrap();
    let first = next(&mut opened.deliveries).await;
    let again = next(&mut opened.deliveries).await;
    assert_eq!((first.seq, again.seq), (1, 1));
    assert_eq!(again.data, first.data);
    assert!(meters.redelivered.get() >= 1);
    assert_eq!(js.ack("q", 1).await.unwrap(), Acked::Yes);
    // A redelivery of 1 already on its way may still arrive before 2.
    js.publish("quick", &json(2)).await.unwrap();
    loop {
        match next(&mut opened.deliveries).await.seq {
            1 => continue,
            2 => break,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(js.ack("q", 2).await.unwrap(), Acked::Yes);
    // Acknowledged on the server: 1 never comes after 2 again.
    js.publish("quick", &json(3)).await.unwrap();
    assert_eq!(next(&mut opened.deliveries).await.seq, 3);
}

#[tokio::test]
async fn nats_away_fails_calls_as_store_errors_and_the_client_reconnects() {
    let mut nats = NatsServer::start();
    let js = backend(&nats).await;
    assert!(js.is_connected());
    assert_eq!(js.publish("orders", &json(1)).await.unwrap().seq, 1);

    nats.stop();
    assert!(
        common::eventually(STEP, || !js.is_connected()).await,
        "the connection state follows the server"
    );
    assert!(matches!(
        js.publish("orders", &json(2)).await,
        Err(PersistError::Store(_))
    ));

    nats.restart(); // same port, same store
    assert!(
        common::eventually(Duration::from_secs(60), || js.is_connected()).await,
        "reconnected by itself:\n{}",
        nats.log()
    );
    // The stream survived on disk: the sequence goes on.
    let seq = js.publish("orders", &json(3)).await.unwrap().seq;
    assert!(seq >= 2, "{seq}");
    let mut opened = js.open("after", "orders").await.unwrap();
    assert_eq!(opened.resumed_from, seq);
    js.publish("orders", &json(4)).await.unwrap();
    assert_eq!(next(&mut opened.deliveries).await.seq, seq + 1);
}

#[tokio::test]
async fn a_subscription_that_got_nothing_resumes_where_it_started() {
    let nats = NatsServer::start();
    let js = backend(&nats).await;
    for n in 1..=3 {
        js.publish("orders", &json(n)).await.unwrap();
    }
    let opened = js.open("idle", "orders").await.unwrap();
    assert_eq!(opened.resumed_from, 3);
    drop(opened); // detached before anything came
    assert_eq!(
        js.position("idle").await.unwrap(),
        Some(("orders".to_owned(), 3))
    );
    let mut again = js.open("idle", "orders").await.unwrap();
    assert_eq!(again.resumed_from, 3, "not 0: 1..=3 were never its own");
    js.publish("orders", &json(4)).await.unwrap();
    assert_eq!(next(&mut again.deliveries).await.seq, 4);
}

/// Publishes 1..=10 on `orders`, has `id` (opened on `js` before) get
/// them, and acknowledges 1, 2, 3, 5 and 7.
async fn ten_with_gaps(js: &JetStream, id: &str, opened: &mut switchyard::persist::Opened) {
    for n in 1..=10 {
        js.publish("orders", &json(n)).await.unwrap();
    }
    assert_eq!(
        seqs(&mut opened.deliveries, 10).await,
        (1..=10).collect::<Vec<_>>()
    );
    for seq in [1, 2, 3, 5, 7] {
        assert_eq!(js.ack(id, seq).await.unwrap(), Acked::Yes);
    }
}

#[tokio::test]
async fn acknowledgements_stay_per_message_across_a_resume() {
    let nats = NatsServer::start();
    let js = backend(&nats).await;
    let mut opened = js.open("p", "orders").await.unwrap();
    ten_with_gaps(&js, "p", &mut opened).await;
    assert_eq!(
        js.position("p").await.unwrap(),
        Some(("orders".to_owned(), 3))
    );
    drop(opened); // detach

    let mut again = js.open("p", "orders").await.unwrap();
    assert_eq!(again.resumed_from, 3, "every message ≤ 3 acknowledged");
    assert_eq!(
        seqs(&mut again.deliveries, 5).await,
        [4, 6, 8, 9, 10],
        "only what was not acknowledged"
    );
    js.publish("orders", &json(11)).await.unwrap();
    assert_eq!(next(&mut again.deliveries).await.seq, 11, "then live ones");
    // Acknowledged before the resume: still a no-op `true`.
    assert_eq!(js.ack("p", 5).await.unwrap(), Acked::Yes);
    for seq in [4, 6] {
        assert_eq!(js.ack("p", seq).await.unwrap(), Acked::Yes);
    }
    assert_eq!(
        js.position("p").await.unwrap(),
        Some(("orders".to_owned(), 7)),
        "every message ≤ 7 acknowledged, 8 not"
    );
    // Acknowledged after this resume, out of order: kept for the next.
    assert_eq!(js.ack("p", 10).await.unwrap(), Acked::Yes);
    drop(again);
    let mut third = js.open("p", "orders").await.unwrap();
    assert_eq!(third.resumed_from, 7);
    assert_eq!(seqs(&mut third.deliveries, 3).await, [8, 9, 11]);
    for seq in [8, 9, 11] {
        assert_eq!(js.ack("p", seq).await.unwrap(), Acked::Yes);
    }
    assert_eq!(
        js.position("p").await.unwrap(),
        Some(("orders".to_owned(), 11))
    );
}

#[tokio::test]
async fn another_instance_resumes_with_the_acknowledgements_made_on_the_first() {
    let nats = NatsServer::start();
    let a = backend(&nats).await;
    let b = backend(&nats).await;
    let mut on_a = a.open("moved", "orders").await.unwrap();
    ten_with_gaps(&a, "moved", &mut on_a).await;
    // Taken over while A still holds it.
    let mut on_b = b.open("moved", "orders").await.unwrap();
    assert_eq!(on_b.resumed_from, 3);
    assert_eq!(seqs(&mut on_b.deliveries, 5).await, [4, 6, 8, 9, 10]);
    b.publish("orders", &json(11)).await.unwrap();
    assert_eq!(next(&mut on_b.deliveries).await.seq, 11);
    for seq in [4, 6] {
        assert_eq!(b.ack("moved", seq).await.unwrap(), Acked::Yes);
    }
    assert_eq!(
        a.position("moved").await.unwrap(),
        Some(("orders".to_owned(), 7)),
        "the same floor seen from either instance"
    );
    // Acknowledged on B; A opens it again and gets only the rest.
    assert_eq!(b.ack("moved", 9).await.unwrap(), Acked::Yes);
    drop(on_b);
    let mut back = a.open("moved", "orders").await.unwrap();
    assert_eq!(back.resumed_from, 7);
    assert_eq!(seqs(&mut back.deliveries, 3).await, [8, 10, 11]);
}

#[tokio::test]
async fn a_sequence_never_delivered_to_the_subscription_is_refused() {
    let nats = NatsServer::start();
    let js = backend(&nats).await;
    for n in 1..=2 {
        js.publish("orders", &json(n)).await.unwrap();
    }
    let mut opened = js.open("late", "orders").await.unwrap();
    assert_eq!(opened.resumed_from, 2, "it starts at 3");
    for n in 3..=4 {
        js.publish("orders", &json(n)).await.unwrap();
    }
    assert_eq!(seqs(&mut opened.deliveries, 2).await, [3, 4]);
    assert_eq!(js.ack("late", 2).await.unwrap(), Acked::NeverDelivered);
    assert_eq!(js.ack("late", 1).await.unwrap(), Acked::NeverDelivered);
    assert_eq!(js.ack("late", 3).await.unwrap(), Acked::Yes);
    drop(opened);
    // Its floor is 3 now; 2 was still never its own.
    let mut again = js.open("late", "orders").await.unwrap();
    assert_eq!(again.resumed_from, 3);
    assert_eq!(next(&mut again.deliveries).await.seq, 4);
    assert_eq!(js.ack("late", 2).await.unwrap(), Acked::NeverDelivered);
    assert_eq!(js.ack("late", 3).await.unwrap(), Acked::Yes, "re-ack");
    assert_eq!(js.ack("late", 5).await.unwrap(), Acked::NeverDelivered);
}
