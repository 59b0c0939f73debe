//! Broker rules of jsonrpc-ws.md §7.2 at the library level.

// In tests a panic is the failure report (STYLE §8.3 rule 5 exempts tests).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::IntGauge;

use super::*;
use crate::error::ErrorKind;

/// Records what it is given; answers `reply`.
#[derive(Debug)]
struct Recorder {
    got: Mutex<Vec<String>>,
    reply: Delivery,
}

fn recorder(reply: Delivery) -> Arc<Recorder> {
    Arc::new(Recorder {
        got: Mutex::new(Vec::new()),
        reply,
    })
}

impl Subscriber for Recorder {
    fn deliver(&self, event: &Event<'_>) -> Delivery {
        let params = event
            .params_json()
            .map(|p| p.to_string())
            .unwrap_or_default();
        self.got.lock().push(params);
        self.reply
    }
}

impl Recorder {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.got.lock())
    }
}

fn gauge() -> IntGauge {
    IntGauge::new("subs", "test").unwrap()
}

fn data() -> Payload {
    Payload::json(r#"{"x":1}"#).unwrap()
}

fn connect(broker: &Arc<Broker>) -> (Registration, Arc<Recorder>) {
    let rec = recorder(Delivery::Delivered);
    (broker.register(rec.clone(), gauge(), None), rec)
}

#[test]
fn delivers_once_per_connection_with_overlapping_patterns() {
    let broker = Arc::new(Broker::default());
    let (a, rec_a) = connect(&broker);
    let (b, rec_b) = connect(&broker);
    for p in ["orders.eu", "orders.*", "orders.>", ">"] {
        a.subscribe(p).unwrap();
    }
    b.subscribe("orders.us").unwrap();
    let published = broker.publish("orders.eu", &data()).unwrap();
    assert_eq!(
        published,
        Published {
            matched: 1,
            delivered: 1,
            dropped: 0,
            gone: 0
        }
    );
    assert_eq!(rec_a.take(), [r#"{"topic":"orders.eu","data":{"x":1}}"#]);
    assert!(rec_b.take().is_empty());
}

#[test]
fn wildcard_subscribers_see_the_concrete_topic() {
    let broker = Arc::new(Broker::default());
    let (a, rec) = connect(&broker);
    a.subscribe("orders.>").unwrap();
    broker.publish("orders", &data()).unwrap();
    assert!(rec.take().is_empty(), "orders.> does not match orders");
    broker.publish("orders.eu.created", &data()).unwrap();
    assert_eq!(
        rec.take(),
        [r#"{"topic":"orders.eu.created","data":{"x":1}}"#]
    );
}

#[test]
fn publish_counts_dropped_and_gone() {
    let broker = Arc::new(Broker::default());
    let subs = [
        Delivery::Delivered,
        Delivery::Dropped,
        Delivery::Gone,
        Delivery::Dropped,
    ];
    let regs: Vec<_> = subs
        .iter()
        .map(|d| {
            let reg = broker.register(recorder(*d), gauge(), None);
            reg.subscribe("t.*").unwrap();
            reg
        })
        .collect();
    let published = broker.publish("t.x", &data()).unwrap();
    assert_eq!(
        published,
        Published {
            matched: 4,
            delivered: 1,
            dropped: 2,
            gone: 1
        }
    );
    assert_eq!(broker.publish("u", &data()).unwrap(), Published::default());
    drop(regs);
}

#[test]
fn publish_refuses_wildcard_topics() {
    let broker = Arc::new(Broker::default());
    let (a, rec) = connect(&broker);
    a.subscribe("a.*").unwrap();
    assert_eq!(broker.publish("a.*", &data()), Err(TopicError::Wildcard));
    assert!(rec.take().is_empty());
}

#[test]
fn subscribe_is_idempotent_and_unsubscribe_too() {
    let broker = Arc::new(Broker::default());
    let g = gauge();
    let rec = recorder(Delivery::Delivered);
    let reg = broker.register(rec.clone(), g.clone(), None);
    reg.subscribe("a").unwrap();
    reg.subscribe("a").unwrap();
    assert_eq!((reg.len(), g.get(), broker.subscriptions()), (1, 1, 1));
    broker.publish("a", &data()).unwrap();
    assert_eq!(rec.take().len(), 1);
    reg.unsubscribe("*").unwrap();
    assert_eq!(reg.len(), 1, "a pattern is removed only as subscribed");
    reg.unsubscribe("a").unwrap();
    reg.unsubscribe("a").unwrap();
    assert_eq!((reg.len(), g.get(), broker.subscriptions()), (0, 0, 0));
    broker.publish("a", &data()).unwrap();
    assert!(rec.take().is_empty());
}

#[test]
fn invalid_patterns_are_invalid_params() {
    let broker = Arc::new(Broker::default());
    let (reg, _rec) = connect(&broker);
    for p in ["", "ord*", "a..b", ">.a"] {
        let err = reg.subscribe(p).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidParams, "{p}");
        assert!(err.detail.is_some());
        assert_eq!(
            reg.unsubscribe(p).unwrap_err().kind,
            ErrorKind::InvalidParams
        );
    }
    assert!(reg.is_empty());
}

#[test]
fn batch_is_atomic() {
    let broker = Arc::new(Broker::default());
    let (reg, _rec) = connect(&broker);
    reg.subscribe("keep").unwrap();
    let err = reg.subscribe_all(&["news", "ord*", "alerts"]).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    assert_eq!(err.detail.as_deref().unwrap_or(""), "topics[1]: topic token 1 mixes a wildcard with other characters ('*' and '>' must be whole tokens)");
    assert_eq!(reg.len(), 1);
    reg.subscribe_all(&["news", "alerts", "news"]).unwrap();
    assert_eq!(reg.len(), 3);
    let err = reg.unsubscribe_all(&["news", ""]).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    assert_eq!(reg.len(), 3, "nothing removed");
    reg.unsubscribe_all(&["news", "never"]).unwrap();
    assert_eq!(reg.len(), 2);
}

#[test]
fn cap_per_connection() {
    let broker = Arc::new(Broker::new(3));
    let g = gauge();
    let reg = broker.register(recorder(Delivery::Delivered), g.clone(), None);
    let (other, _rec) = connect(&broker);
    reg.subscribe_all(&["a", "b"]).unwrap();
    let err = reg.subscribe_all(&["c", "d"]).unwrap_err();
    assert_eq!(err.kind, ErrorKind::ResourceExhausted);
    assert_eq!(
        err.detail.as_deref(),
        Some("at most 3 subscriptions per connection")
    );
    assert_eq!((reg.len(), g.get()), (2, 2), "nothing changed");
    // Already-held patterns do not count against the cap.
    reg.subscribe_all(&["a", "b", "c", "c"]).unwrap();
    assert_eq!(reg.len(), 3);
    reg.subscribe("a").unwrap();
    assert_eq!(
        reg.subscribe("d").unwrap_err().kind,
        ErrorKind::ResourceExhausted
    );
    // The cap is per connection.
    other.subscribe_all(&["d", "e", "f"]).unwrap();
    reg.unsubscribe("a").unwrap();
    reg.subscribe("d").unwrap();
}

#[test]
fn default_cap_is_1000() {
    let broker = Arc::new(Broker::default());
    let (reg, _rec) = connect(&broker);
    let topics: Vec<String> = (0..1000).map(|i| format!("t.{i}")).collect();
    let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    reg.subscribe_all(&refs).unwrap();
    assert_eq!(
        reg.subscribe("t.1000").unwrap_err().kind,
        ErrorKind::ResourceExhausted
    );
}

#[test]
fn drop_removes_everything() {
    let broker = Arc::new(Broker::default());
    let shared = gauge();
    let rec = recorder(Delivery::Delivered);
    let a = broker.register(rec.clone(), shared.clone(), None);
    let b = broker.register(recorder(Delivery::Delivered), shared.clone(), None);
    a.subscribe_all(&["x.>", "y", "z.*"]).unwrap();
    b.subscribe("y").unwrap();
    assert_eq!((shared.get(), broker.connections()), (4, 2));
    drop(a);
    assert_eq!(
        (shared.get(), broker.connections(), broker.subscriptions()),
        (1, 1, 1)
    );
    assert_eq!(broker.publish("x.1", &data()).unwrap().matched, 0);
    assert!(rec.take().is_empty());
    drop(b);
    assert_eq!((shared.get(), broker.subscriptions()), (0, 0));
    assert_eq!(broker.state.read().index.nodes(), 0, "memory returns");
}

#[test]
fn interest_follows_subscriptions() {
    let broker = Arc::new(Broker::default());
    let mut feed = broker.watch_interest("hld.events");
    assert!(!*feed.borrow_and_update());
    let (a, _ra) = connect(&broker);
    let (b, _rb) = connect(&broker);
    a.subscribe("other").unwrap();
    assert!(
        !feed.has_changed().unwrap(),
        "a non-matching pattern does not wake it"
    );
    a.subscribe("hld.*").unwrap();
    assert!(feed.has_changed().unwrap());
    assert!(*feed.borrow_and_update());
    b.subscribe(">").unwrap();
    assert!(!feed.has_changed().unwrap(), "still true: no wake-up");
    a.unsubscribe("hld.*").unwrap();
    assert!(*feed.borrow_and_update(), "b still matches");
    drop(b);
    assert!(feed.has_changed().unwrap());
    assert!(
        !*feed.borrow_and_update(),
        "off when the last matching registration drops"
    );
    // A watch taken while a pattern matches starts true.
    a.subscribe_all(&["hld.>"]).unwrap();
    assert!(*broker.watch_interest("hld.events").borrow());
    assert!(*feed.borrow_and_update());
    a.unsubscribe_all(&["hld.>"]).unwrap();
    assert!(!*feed.borrow_and_update());
}

#[test]
fn closed_watches_are_pruned() {
    let broker = Arc::new(Broker::default());
    drop(broker.watch_interest("f"));
    let (a, _ra) = connect(&broker);
    a.subscribe("f").unwrap();
    assert_eq!(broker.state.read().feeds.len(), 0);
    assert!(*broker.watch_interest("f").borrow());
}
