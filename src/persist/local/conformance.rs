//! The suite every [`Log`] must pass, generic over `L: Log`: sequences,
//! reads, retention on append and by age, positions, topics and usage,
//! and staged batches (several staged before any is waited for: applied
//! in the order staged, each change seeing the ones before it, barriers).
//!
//! A log's tests call [`run`] with a constructor of empty logs (each case
//! gets a fresh one):
//!
//! ```ignore
//! #[test]
//! fn conforms() {
//!     crate::persist::local::conformance::run(|| EmbeddedLog::open(tempdir…));
//! }
//! ```
#![allow(clippy::unwrap_used)] // in tests a panic is the failure report

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use super::{Applied, Change, Log, Position, Usage};
use crate::envelope::Payload;
use crate::persist::Retention;

/// Runs every case on fresh logs from `make`.
pub fn run<L: Log>(mut make: impl FnMut() -> L) {
    sequences_start_at_one_per_topic(&mut make());
    reads_are_ordered_and_bounded(&mut make());
    max_count_evicts_the_oldest(&mut make());
    max_bytes_evicts_the_oldest(&mut make());
    age_evicts_on_append_and_expire(&mut make());
    last_seq_survives_eviction(&mut make());
    positions_round_trip(&mut make());
    topics_and_usage(&mut make());
    staged_batches_apply_in_order(&mut make());
}

fn data(text: &str) -> Payload {
    Payload::json(text).unwrap()
}

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn none() -> Retention {
    Retention::default()
}

fn seqs<L: Log>(log: &L, topic: &str) -> Vec<u64> {
    log.read(topic, 0, usize::MAX)
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect()
}

fn sequences_start_at_one_per_topic<L: Log>(log: &mut L) {
    assert_eq!(log.last_seq("a").unwrap(), 0);
    let (first, evicted) = log.append("a", &data("1"), t0(), &none()).unwrap();
    assert_eq!((first.seq, first.topic.as_str()), (1, "a"));
    assert_eq!(first.stored_at, t0());
    assert_eq!(first.data, data("1"));
    assert!(evicted.is_empty());
    assert_eq!(log.append("a", &data("2"), t0(), &none()).unwrap().0.seq, 2);
    assert_eq!(log.append("b", &data("1"), t0(), &none()).unwrap().0.seq, 1);
    assert_eq!(log.last_seq("a").unwrap(), 2);
    assert_eq!(log.last_seq("b").unwrap(), 1);
}

fn reads_are_ordered_and_bounded<L: Log>(log: &mut L) {
    for i in 1..=10 {
        let text = format!(r#"{{"i":{i}}}"#);
        log.append("t", &data(&text), t0(), &none()).unwrap();
    }
    let read = log.read("t", 3, 4).unwrap();
    let got: Vec<u64> = read.iter().map(|m| m.seq).collect();
    assert_eq!(got, [4, 5, 6, 7]);
    assert_eq!(read[0].data, data(r#"{"i":4}"#), "data byte for byte");
    assert!(log.read("t", 10, 5).unwrap().is_empty());
    assert!(log.read("none", 0, 5).unwrap().is_empty());
    assert!(log.read("t", 0, 0).unwrap().is_empty());
}

fn max_count_evicts_the_oldest<L: Log>(log: &mut L) {
    let keep3 = Retention {
        max_count: Some(3),
        ..none()
    };
    for i in 1..=3 {
        let (_, evicted) = log.append("t", &data("0"), t0(), &keep3).unwrap();
        assert!(evicted.is_empty(), "{i}");
    }
    let (_, evicted) = log.append("t", &data("0"), t0(), &keep3).unwrap();
    assert_eq!(evicted, [1]);
    assert_eq!(seqs(log, "t"), [2, 3, 4]);
}

fn max_bytes_evicts_the_oldest<L: Log>(log: &mut L) {
    // Each datum is 10 bytes: at most 25 keeps two.
    let small = Retention {
        max_bytes: Some(25),
        ..none()
    };
    for _ in 0..2 {
        log.append("t", &data(r#""12345678""#), t0(), &small)
            .unwrap();
    }
    let (_, evicted) = log
        .append("t", &data(r#""abcdefgh""#), t0(), &small)
        .unwrap();
    assert_eq!(evicted, [1]);
    assert_eq!(seqs(log, "t"), [2, 3]);
}

fn age_evicts_on_append_and_expire<L: Log>(log: &mut L) {
    let minute = Retention {
        max_age: Some(Duration::from_secs(60)),
        ..none()
    };
    log.append("t", &data("1"), t0(), &minute).unwrap();
    log.append("t", &data("2"), t0() + Duration::from_secs(30), &minute)
        .unwrap();
    // On append: the first is 60 s old now.
    let (_, evicted) = log
        .append("t", &data("3"), t0() + Duration::from_secs(60), &minute)
        .unwrap();
    assert_eq!(evicted, [1]);
    // By a sweep: 2 is 60 s old at t0 + 90 s, 3 is not.
    assert!(log
        .expire("t", t0() + Duration::from_secs(89), &minute)
        .unwrap()
        .is_empty());
    let evicted = log
        .expire("t", t0() + Duration::from_secs(90), &minute)
        .unwrap();
    assert_eq!(evicted, [2]);
    assert_eq!(seqs(log, "t"), [3]);
    assert!(log.expire("none", t0(), &minute).unwrap().is_empty());
}

fn last_seq_survives_eviction<L: Log>(log: &mut L) {
    let keep1 = Retention {
        max_count: Some(1),
        ..none()
    };
    for _ in 0..3 {
        log.append("t", &data("0"), t0(), &keep1).unwrap();
    }
    assert_eq!(log.last_seq("t").unwrap(), 3);
    assert_eq!(seqs(log, "t"), [3]);
    // Expire everything: the sequence still goes on from 3.
    let gone = Retention {
        max_age: Some(Duration::from_secs(1)),
        ..none()
    };
    assert_eq!(
        log.expire("t", t0() + Duration::from_secs(5), &gone)
            .unwrap(),
        [3]
    );
    assert_eq!(log.last_seq("t").unwrap(), 3);
    assert_eq!(log.append("t", &data("0"), t0(), &none()).unwrap().0.seq, 4);
}

fn positions_round_trip<L: Log>(log: &mut L) {
    assert_eq!(log.position("p").unwrap(), None);
    let position = Position {
        topic: "orders".to_owned(),
        start: 5,
        floor: 7,
        acked: BTreeSet::from([9, 12]),
    };
    log.set_position("p", &position).unwrap();
    assert_eq!(log.position("p").unwrap(), Some(position.clone()));
    let moved = Position {
        floor: 12,
        acked: BTreeSet::new(),
        ..position
    };
    log.set_position("p", &moved).unwrap();
    log.set_position("q", &Position::default()).unwrap();
    assert_eq!(log.position("p").unwrap(), Some(moved.clone()));
    let mut all = log.positions().unwrap();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        all,
        [
            ("p".to_owned(), moved),
            ("q".to_owned(), Position::default())
        ]
    );
    assert!(log.remove_position("p").unwrap());
    assert!(!log.remove_position("p").unwrap());
    assert_eq!(log.position("p").unwrap(), None);
}

fn topics_and_usage<L: Log>(log: &mut L) {
    assert_eq!(log.stats().unwrap(), Usage::default());
    let keep1 = Retention {
        max_count: Some(1),
        ..none()
    };
    log.append("a", &data("123"), t0(), &none()).unwrap();
    log.append("b", &data("1"), t0(), &keep1).unwrap();
    log.append("b", &data("12"), t0(), &keep1).unwrap();
    let mut topics = log.topics().unwrap();
    topics.sort();
    assert_eq!(topics, ["a", "b"]);
    assert_eq!(
        log.stats().unwrap(),
        Usage {
            messages: 2,
            bytes: 5
        }
    );
}

fn append(topic: &str, text: &str, retention: Retention) -> Change {
    Change::Append {
        topic: topic.to_owned(),
        data: data(text),
        at: t0(),
        retention,
    }
}

fn at(floor: u64) -> Change {
    Change::SetPosition {
        id: "p".to_owned(),
        position: Position {
            topic: "a".to_owned(),
            start: 0,
            floor,
            acked: BTreeSet::new(),
        },
    }
}

fn appended(applied: &Applied) -> (u64, Vec<u64>) {
    match applied {
        Applied::Appended(stored, evicted) => (stored.seq, evicted.clone()),
        other => panic!("not an append: {other:?}"),
    }
}

/// Several batches staged before any ticket is waited for (what a log
/// with group commit writes in one commit): each change sees those staged
/// before it, outcomes come back per batch in order, a barrier resolves.
fn staged_batches_apply_in_order<L: Log>(log: &mut L) {
    let keep2 = Retention {
        max_count: Some(2),
        ..none()
    };
    let gone = Change::RemovePosition { id: "q".to_owned() };
    let first = log.stage(vec![
        append("a", "1", keep2),
        append("a", "2", keep2),
        append("b", "1", none()),
        at(1),
        gone,
    ]);
    let second = log.stage(vec![append("a", "3", keep2), at(2)]);
    let barrier = log.stage(Vec::new());
    let third = log.stage(vec![
        append("a", "4", keep2),
        Change::RemovePosition { id: "p".to_owned() },
        Change::Expire {
            topic: "b".to_owned(),
            now: t0() + Duration::from_secs(5),
            retention: Retention {
                max_age: Some(Duration::from_secs(1)),
                ..none()
            },
        },
    ]);
    let first = first.wait_blocking().unwrap();
    assert_eq!(first.len(), 5);
    assert_eq!(appended(&first[0]), (1, vec![]));
    assert_eq!(appended(&first[1]), (2, vec![]));
    assert_eq!(appended(&first[2]), (1, vec![]), "sequences are per topic");
    assert_eq!(first[3], Applied::PositionSet);
    assert_eq!(first[4], Applied::PositionRemoved(false));
    let second = second.wait_blocking().unwrap();
    assert_eq!(appended(&second[0]), (3, vec![1]), "retention sees 1 and 2");
    assert_eq!(second[1], Applied::PositionSet);
    assert_eq!(barrier.wait_blocking().unwrap(), []);
    let third = third.wait_blocking().unwrap();
    assert_eq!(appended(&third[0]), (4, vec![2]));
    assert_eq!(third[1], Applied::PositionRemoved(true), "set earlier");
    assert_eq!(third[2], Applied::Expired(vec![1]));
    // Resolved tickets: the reads see every change.
    assert_eq!(seqs(log, "a"), [3, 4]);
    assert!(seqs(log, "b").is_empty());
    assert_eq!(
        (log.last_seq("a").unwrap(), log.last_seq("b").unwrap()),
        (4, 1)
    );
    assert_eq!(log.position("p").unwrap(), None);
    assert_eq!(
        log.stats().unwrap(),
        Usage {
            messages: 2,
            bytes: 2
        }
    );
}
