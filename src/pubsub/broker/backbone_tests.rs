//! The hook a [`Backbone`] has into the broker: interest reported on a
//! distinct pattern's first holder and after its last, in order; publishes
//! handed over instead of delivered; feed interest fixed.

// In tests a panic is the failure report (STYLE §8.3 rule 5 exempts tests).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::IntGauge;

use super::*;

/// Records what the broker tells it.
#[derive(Debug, Default)]
struct Spy {
    calls: Mutex<Vec<String>>,
    publishes: bool,
}

impl Backbone for Spy {
    fn interest(&self, pattern: &str, on: bool) {
        let sign = if on { '+' } else { '-' };
        self.calls.lock().push(format!("{sign}{pattern}"));
    }

    fn publish(&self, topic: &str, data: &Payload) {
        let data = data.as_json().unwrap_or_default();
        self.calls.lock().push(format!("publish {topic} {data}"));
    }

    fn publishes(&self) -> bool {
        self.publishes
    }
}

impl Spy {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock())
    }
}

/// Counts what it is delivered.
#[derive(Debug, Default)]
struct Count(Mutex<usize>);

impl Subscriber for Count {
    fn deliver(&self, _: &Event<'_>) -> Delivery {
        *self.0.lock() += 1;
        Delivery::Delivered
    }
}

fn gauge() -> IntGauge {
    IntGauge::new("subs", "test").unwrap()
}

#[test]
fn interest_on_first_holder_and_after_last() {
    let broker = Arc::new(Broker::default());
    let early = broker.register(Arc::new(Count::default()), gauge(), None);
    early.subscribe("held.before").unwrap();
    let spy = Arc::new(Spy::default());
    broker.set_backbone(spy.clone());
    assert_eq!(spy.take(), ["+held.before"], "announced when attached");

    let a = broker.register(Arc::new(Count::default()), gauge(), None);
    let b = broker.register(Arc::new(Count::default()), gauge(), None);
    a.subscribe_all(&["x.*", "y"]).unwrap();
    b.subscribe("x.*").unwrap();
    let mut first = spy.take();
    first.sort();
    assert_eq!(first, ["+x.*", "+y"], "once per distinct pattern");
    a.unsubscribe("x.*").unwrap();
    assert!(spy.take().is_empty(), "b still holds x.*");
    drop(b);
    assert_eq!(spy.take(), ["-x.*"]);
    a.unsubscribe_all(&["y"]).unwrap();
    assert_eq!(spy.take(), ["-y"]);
    drop(early);
    assert_eq!(spy.take(), ["-held.before"]);
}

#[test]
fn publishes_go_to_the_backbone_and_fan_out_delivers() {
    let broker = Arc::new(Broker::default());
    let spy = Arc::new(Spy::default());
    broker.set_backbone(spy.clone());
    let count = Arc::new(Count::default());
    let reg = broker.register(count.clone(), gauge(), None);
    reg.subscribe("t").unwrap();
    spy.take();
    let data = Payload::json("1").unwrap();
    assert_eq!(broker.publish("t", &data).unwrap(), Published::default());
    assert_eq!(spy.take(), ["publish t 1"]);
    assert_eq!(*count.0.lock(), 0, "not delivered locally: it comes back");
    assert!(broker.publish("bad..topic", &data).is_err());
    assert!(spy.take().is_empty());
    assert_eq!(broker.fan_out("t", &data).delivered, 1);
    assert_eq!(*count.0.lock(), 1);
}

#[test]
fn feed_interest_is_fixed_by_the_backbone() {
    for publishes in [true, false] {
        let broker = Arc::new(Broker::default());
        broker.set_backbone(Arc::new(Spy {
            publishes,
            ..Spy::default()
        }));
        let mut watch = broker.watch_interest("feed.topic");
        assert_eq!(*watch.borrow_and_update(), publishes);
        let reg = broker.register(Arc::new(Count::default()), gauge(), None);
        reg.subscribe("feed.topic").unwrap();
        drop(reg);
        assert!(!watch.has_changed().unwrap(), "subscribers do not move it");
        assert_eq!(*watch.borrow(), publishes);
    }
}

#[test]
fn each_pattern_serves_its_own_holders_through_their_oldest_match() {
    let broker = Arc::new(Broker::default());
    broker.set_backbone(Arc::new(Spy::default()));
    let counts: Vec<Arc<Count>> = (0..3).map(|_| Arc::new(Count::default())).collect();
    let regs: Vec<Registration> = counts
        .iter()
        .map(|c| broker.register(c.clone(), gauge(), None))
        .collect();
    // 0 holds only a.*; 1 a.b then a.*; 2 a.* then a.b (one batch, in order).
    regs[0].subscribe("a.*").unwrap();
    regs[1].subscribe("a.b").unwrap();
    regs[1].subscribe("a.*").unwrap();
    regs[2].subscribe_all(&["a.*", "a.b"]).unwrap();
    let data = Payload::json("1").unwrap();
    let through = |pattern: &str, topic: &str| {
        let targets = broker.through(pattern, topic);
        Broker::deliver(&targets, topic, &data);
        let got: Vec<usize> = counts
            .iter()
            .map(|c| std::mem::take(&mut *c.0.lock()))
            .collect();
        got
    };
    assert_eq!(through("a.*", "a.b"), [1, 0, 1], "1 gets a.b through a.b");
    assert_eq!(through("a.b", "a.b"), [0, 1, 0], "2 gets it through a.*");
    assert_eq!(through("a.*", "a.c"), [1, 1, 1], "a.b does not match a.c");
    assert_eq!(through("x", "x"), [0, 0, 0], "held by no one");
    // Dropping its oldest match moves a connection to the next one.
    regs[1].unsubscribe("a.b").unwrap();
    assert_eq!(through("a.*", "a.b"), [1, 1, 1]);
    assert_eq!(through("a.b", "a.b"), [0, 0, 0]);
}
