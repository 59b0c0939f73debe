//! The broker's bounds: tokens per pattern, bytes of index per connection,
//! per client address and in total, and the accounting behind them
//! checked against the bytes actually allocated.

// In tests a panic is the failure report (STYLE §8.3 rule 5 exempts tests).
#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::sync::Arc;

use prometheus::IntGauge;

use super::*;
use crate::error::{ErrorKind, GatewayError};
use crate::pubsub::index::cost;

#[derive(Debug)]
struct Sink;

impl Subscriber for Sink {
    fn deliver(&self, _: &Event<'_>) -> Delivery {
        Delivery::Delivered
    }
}

fn gauge() -> IntGauge {
    IntGauge::new("subs", "test").unwrap()
}

fn from(broker: &Arc<Broker>, peer: Option<&str>) -> Registration {
    let peer = peer.map(|p| p.parse::<IpAddr>().unwrap());
    broker.register(Arc::new(Sink), gauge(), peer)
}

fn broker(limits: Limits) -> Arc<Broker> {
    Arc::new(Broker::with_limits(limits))
}

/// The kind and detail of a refusal.
fn refusal(result: Result<(), GatewayError>) -> (ErrorKind, String) {
    let e = result.unwrap_err();
    (e.kind, e.detail.unwrap_or_default())
}

/// `n` distinct patterns of `tokens` tokens and exactly `bytes` bytes
/// (the first token makes them distinct, so they share no node).
fn deep(n: usize, tokens: usize, bytes: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let first = format!("p{i}");
            let width = (bytes - (tokens - 1) - first.len()) / (tokens - 1);
            let mut p = first;
            for t in 1..tokens {
                let filler = char::from(b'a' + (t % 26) as u8);
                p.push('.');
                p.extend(std::iter::repeat_n(filler, width));
            }
            while p.len() < bytes {
                p.push('z');
            }
            p
        })
        .collect()
}

fn refs(patterns: &[String]) -> Vec<&str> {
    patterns.iter().map(String::as_str).collect()
}

#[test]
fn cost_is_the_documented_formula() {
    assert_eq!(cost("daemon.events"), 2 * 13 + 128 * 2 + 256);
    assert_eq!(cost(">"), 2 + 128 + 256);
    let p = &deep(1, 16, 255)[0];
    assert_eq!((p.len(), p.split('.').count()), (255, 16));
    assert_eq!(cost(p), 510 + 2048 + 256);
    // The defaults hold 1,000 ordinary patterns on one connection.
    assert!(1_000 * cost("daemon.events") <= Limits::default().index_bytes_per_connection);
}

#[test]
fn tokens_per_pattern_are_bounded() {
    let broker = Arc::new(Broker::default());
    let reg = from(&broker, None);
    let sixteen = vec!["t"; 16].join(".");
    let seventeen = vec!["t"; 17].join(".");
    reg.subscribe(&sixteen).unwrap();
    assert_eq!(
        refusal(reg.subscribe(&seventeen)),
        (
            ErrorKind::ResourceExhausted,
            "topic has 17 tokens, at most 16 are allowed".to_owned()
        )
    );
    assert_eq!(
        refusal(reg.subscribe_all(&["a", &seventeen])),
        (
            ErrorKind::ResourceExhausted,
            "topics[1] has 17 tokens, at most 16 are allowed".to_owned()
        )
    );
    assert_eq!(reg.len(), 1, "a batch is all or nothing");
}

#[test]
fn bytes_per_connection_are_bounded() {
    let each = cost("a.b");
    let broker = broker(Limits {
        index_bytes_per_connection: 3 * each,
        ..Limits::default()
    });
    let reg = from(&broker, Some("10.0.0.1"));
    let other = from(&broker, Some("10.0.0.1"));
    reg.subscribe_all(&["a.b", "c.d"]).unwrap();
    let (kind, detail) = refusal(reg.subscribe_all(&["e.f", "g.h"]));
    assert_eq!(kind, ErrorKind::ResourceExhausted);
    assert_eq!(
        detail,
        format!(
            "the subscriptions would take {} bytes of index, at most {} per connection",
            4 * each,
            3 * each
        )
    );
    assert_eq!(reg.len(), 2, "nothing changed");
    assert_eq!(broker.index_bytes(), 2 * each);
    // Held patterns cost nothing more; the bound is per connection.
    reg.subscribe_all(&["a.b", "e.f", "e.f"]).unwrap();
    other.subscribe_all(&["a.b", "c.d", "e.f"]).unwrap();
    assert_eq!(broker.index_bytes(), 6 * each);
    // Unsubscribing gives room back.
    reg.unsubscribe("a.b").unwrap();
    reg.subscribe("g.h").unwrap();
    assert_eq!(broker.index_bytes(), 6 * each);
}

#[test]
fn bytes_per_address_are_bounded() {
    let each = cost("a.b");
    let broker = broker(Limits {
        index_bytes_per_ip: 3 * each,
        ..Limits::default()
    });
    let a = from(&broker, Some("10.0.0.1"));
    let b = from(&broker, Some("10.0.0.1"));
    let c = from(&broker, Some("10.0.0.2"));
    let unix = from(&broker, None);
    a.subscribe_all(&["a.b", "c.d"]).unwrap();
    b.subscribe("a.b").unwrap();
    let (kind, detail) = refusal(b.subscribe("c.d"));
    assert_eq!(kind, ErrorKind::ResourceExhausted);
    assert_eq!(
        detail,
        format!(
            "the subscriptions of this client address would take {} bytes of index, \
             at most {} per address",
            4 * each,
            3 * each
        )
    );
    // Another address, and a client with none, are not held back.
    c.subscribe_all(&["a.b", "c.d", "e.f"]).unwrap();
    unix.subscribe_all(&["a.b", "c.d", "e.f", "g.h"]).unwrap();
    // A connection that goes gives its address's room back.
    drop(a);
    b.subscribe_all(&["c.d", "e.f"]).unwrap();
    drop((b, c));
    assert!(broker.state.read().per_ip.is_empty(), "addresses leave");
    drop(unix);
    assert_eq!(broker.index_bytes(), 0);
}

#[test]
fn bytes_in_total_are_bounded() {
    let each = cost("a.b");
    let broker = broker(Limits {
        index_bytes_total: 3 * each,
        ..Limits::default()
    });
    let a = from(&broker, Some("10.0.0.1"));
    let b = from(&broker, Some("10.0.0.2"));
    let unix = from(&broker, None);
    a.subscribe("a.b").unwrap();
    b.subscribe("a.b").unwrap();
    unix.subscribe("a.b").unwrap();
    let (kind, detail) = refusal(b.subscribe("c.d"));
    assert_eq!(kind, ErrorKind::ResourceExhausted);
    assert_eq!(
        detail,
        format!(
            "the gateway holds as many subscriptions as it may ({} bytes of index)",
            3 * each
        )
    );
    assert_eq!(
        refusal(unix.subscribe("c.d")).0,
        ErrorKind::ResourceExhausted
    );
    a.unsubscribe_all(&["a.b"]).unwrap();
    unix.subscribe("c.d").unwrap();
}

#[test]
fn new_limits_apply_to_the_next_subscribe() {
    let broker = Arc::new(Broker::default());
    let reg = from(&broker, None);
    reg.subscribe_all(&["a", "b", "c"]).unwrap();
    broker.set_limits(Limits {
        max_subscriptions: 2,
        ..Limits::default()
    });
    assert_eq!(broker.limits().max_subscriptions, 2);
    assert_eq!(reg.len(), 3, "held patterns stay");
    assert_eq!(refusal(reg.subscribe("d")).0, ErrorKind::ResourceExhausted);
    reg.subscribe("a").unwrap();
}

// === the accounting against the bytes allocated ===

/// Subscribes `patterns` in batches of 50 on fresh connections (each
/// taking as many as its bound allows), then asserts that what the broker
/// allocated for them is at most what it accounts for, and that it all
/// goes again when the connections unsubscribe.
fn allocated_within_cost(limits: Limits, patterns: &[String], connections: usize) {
    let broker = broker(limits);
    let regs: Vec<Registration> = (0..connections)
        .map(|i| from(&broker, Some(&format!("10.0.0.{}", i % 4))))
        .collect();
    // Room for the address table before measuring.
    broker.state.write().per_ip.reserve(8);
    let batches: Vec<Vec<&str>> = patterns.chunks(50).map(refs).collect();
    let mut held: Vec<Vec<&str>> = vec![Vec::new(); regs.len()];
    let info = allocation_counter::measure(|| {
        for (reg, mine) in regs.iter().zip(&mut held) {
            for batch in &batches {
                if reg.subscribe_all(batch).is_ok() {
                    // The test's own bookkeeping is not the broker's.
                    allocation_counter::opt_out(|| mine.extend(batch));
                }
            }
        }
    });
    let accounted = broker.index_bytes();
    assert!(accounted > 0, "something was subscribed");
    let allocated = usize::try_from(info.bytes_current).unwrap();
    assert!(
        allocated <= accounted,
        "allocated {allocated} B for subscriptions accounted as {accounted} B"
    );
    // Unsubscribing most of them: what stays allocated is still within
    // what the rest account for (vectors, maps and sets shrink).
    let info = allocation_counter::measure(|| {
        for (reg, mine) in regs.iter().zip(&held) {
            let keep = mine.len() / 10;
            reg.unsubscribe_all(&mine[keep..]).unwrap();
        }
    });
    let left = usize::try_from(i64::try_from(allocated).unwrap() + info.bytes_current).unwrap();
    assert!(
        left <= broker.index_bytes(),
        "{left} B still allocated for {} B accounted",
        broker.index_bytes()
    );
    for (reg, mine) in regs.iter().zip(&held) {
        reg.unsubscribe_all(mine).unwrap();
    }
    assert_eq!(broker.index_bytes(), 0);
    assert_eq!(broker.state.read().index.nodes(), 0, "memory returns");
}

#[test]
fn deep_patterns_take_no_more_than_their_cost() {
    // The probe's shape: distinct patterns of 255 bytes, as deep as
    // allowed, until each connection's bound refuses them.
    allocated_within_cost(Limits::default(), &deep(1_000, 16, 255), 3);
    // About as deep as a 256-byte pattern can be: 120 tokens.
    let deepest = Limits {
        max_pattern_tokens: 128,
        ..Limits::default()
    };
    allocated_within_cost(deepest, &deep(300, 120, 255), 2);
    // Tokens too long to be stored inline.
    allocated_within_cost(Limits::default(), &deep(500, 3, 250), 2);
}

#[test]
fn wide_nodes_take_no_more_than_their_cost() {
    // Thousands of children under one node (a hash map), and under one
    // prefix: the map's buckets are within the per-token cost.
    let wide: Vec<String> = (0..5_000).map(|i| format!("w{i}")).collect();
    let limits = Limits {
        max_subscriptions: 10_000,
        index_bytes_per_connection: 64 << 20,
        ..Limits::default()
    };
    allocated_within_cost(limits, &wide, 1);
    let under: Vec<String> = (0..5_000).map(|i| format!("a.b.{i}.*.>")).collect();
    allocated_within_cost(limits, &under, 1);
}

#[test]
fn shared_patterns_take_no_more_than_their_cost() {
    // Every connection subscribes the same patterns: one path of nodes,
    // many keys at its end.
    let same: Vec<String> = (0..250).map(|i| format!("orders.eu.{i}")).collect();
    allocated_within_cost(Limits::default(), &same, 40);
}
