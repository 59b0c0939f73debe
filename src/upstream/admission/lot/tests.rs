//! The parking lot's orders, against a model, and its bounds.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::{Lot, KEPT, SLACK};

fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

#[test]
fn calls_come_out_in_arrival_order_and_expire_in_expiry_order() {
    let t = Instant::now();
    let mut lot = Lot::new();
    // (call, expires in ms): arrival order 0..5, expiry order 3, 1, 4, 0, 2.
    let expiries = [40, 20, 50, 10, 30];
    let wakes: Vec<bool> = (0..5)
        .map(|i| lot.push(i, t, at(t, expiries[i]), i % 2 == 0))
        .collect();
    // The first call, and each that expires before all others, wakes the
    // timer.
    assert_eq!(wakes, [true, true, false, true, false]);
    assert_eq!(lot.len(), 5);
    assert_eq!(lot.next_expiry(), Some(at(t, 10)));
    assert!(lot.pop_expired(at(t, 9)).is_none());
    let p = lot.pop_expired(at(t, 25)).expect("due");
    assert_eq!((p.call, p.by_deadline), (3, false));
    assert_eq!(lot.pop_expired(at(t, 25)).map(|p| p.call), Some(1));
    assert!(lot.pop_expired(at(t, 25)).is_none());
    // The front skips the calls that expired.
    assert_eq!(lot.front_enqueued(), Some(t));
    assert_eq!(lot.pop_front().map(|p| p.call), Some(0));
    // The expiry order skips the call taken from the front.
    assert_eq!(lot.next_expiry(), Some(at(t, 30)));
    assert_eq!(lot.take_where(|c| *c == 4), [4]);
    assert_eq!(lot.drain(), [2]);
    assert_eq!(lot.len(), 0);
    assert!(lot.pop_front().is_none());
    assert!(lot.next_expiry().is_none());
    assert!(lot.front_enqueued().is_none());
    // Empty again: the next call wakes the timer.
    assert!(lot.push(9, t, at(t, 1_000), false));
}

/// Both orders hold at most `2n + SLACK` keys for `n` calls parked.
fn assert_keys_bounded<T>(lot: &Lot<T>) {
    let (fifo, heap) = lot.keys();
    let most = 2 * lot.len() + SLACK;
    assert!(
        fifo <= most && heap <= most,
        "{fifo}, {heap} keys for {} calls",
        lot.len()
    );
}

/// Calls taken by one order leave stale keys in the other; both stay
/// within `2n + SLACK` keys for `n` calls parked, however the calls leave.
#[test]
fn stale_keys_stay_bounded_under_churn() {
    let t = Instant::now();
    let mut lot = Lot::new();
    // One old call stays at the front; the calls behind it leave by the
    // expiry order, so the arrival queue would keep every stale key.
    lot.push(u64::MAX, t, at(t, 1_000_000), false);
    for i in 0..10_000 {
        let kept = i % 4 == 0;
        lot.push(i, t, at(t, if kept { 2_000_000 + i } else { i }), true);
        if !kept {
            assert_eq!(lot.pop_expired(at(t, i)).map(|p| p.call), Some(i));
        }
        assert_keys_bounded(&lot);
    }
    // And the other way: calls leave by the front, their expiries stay.
    while lot.len() > 1 {
        lot.pop_front();
        assert_keys_bounded(&lot);
    }
}

/// A lot that ran empty after a burst keeps room for `KEPT` calls; one
/// that never held more keeps its room (parking allocates nothing).
#[test]
fn an_empty_lot_keeps_room_for_a_few_calls_only() {
    let t = Instant::now();
    let mut lot = Lot::new();
    for i in 0..1_000 {
        lot.push(i, t, at(t, i), false);
    }
    assert!(lot.room() >= 1_000);
    while lot.pop_front().is_some() {}
    assert_eq!(lot.room(), KEPT);
    for round in 0..3 {
        for i in 0..KEPT as u64 {
            lot.push(i, t, at(t, i), false);
        }
        while lot.pop_expired(at(t, 10_000)).is_some() {}
        assert_eq!(lot.room(), KEPT, "round {round}");
    }
}

#[derive(Debug, Clone)]
enum Op {
    Push { expires: u16, by_deadline: bool },
    PopFront,
    PopExpired { now: u16 },
    TakeWhere { modulo: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u16>(), any::<bool>()).prop_map(|(expires, by_deadline)| Op::Push { expires, by_deadline }),
        2 => Just(Op::PopFront),
        2 => any::<u16>().prop_map(|now| Op::PopExpired { now }),
        1 => (2u8..6).prop_map(|modulo| Op::TakeWhere { modulo }),
    ]
}

proptest! {
    /// Every operation gives what a list of (call, expiry) kept in arrival
    /// order gives: the oldest call, the call that expires first (the
    /// oldest of those that expire together), the calls picked, oldest
    /// first.
    #[test]
    fn the_lot_behaves_as_a_list(ops in proptest::collection::vec(op(), 1..400)) {
        let t = Instant::now();
        let mut lot = Lot::new();
        let mut model: Vec<(u64, u16)> = Vec::new();
        let mut next = 0u64;
        for op in ops {
            match op {
                Op::Push { expires, by_deadline } => {
                    let first = model.is_empty();
                    let earliest = model.iter().all(|(_, e)| expires < *e);
                    let wake = lot.push(next, t, at(t, u64::from(expires)), by_deadline);
                    // The lot may wake the timer more often than needed,
                    // never less.
                    prop_assert!(wake || !(first || earliest));
                    model.push((next, expires));
                    next += 1;
                }
                Op::PopFront => {
                    let want = (!model.is_empty()).then(|| model.remove(0).0);
                    prop_assert_eq!(lot.pop_front().map(|p| p.call), want);
                }
                Op::PopExpired { now } => {
                    let first = model
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, (call, e))| (*e, *call))
                        .map(|(i, (_, e))| (i, *e));
                    let want = match first {
                        Some((i, e)) if e <= now => Some(model.remove(i).0),
                        _ => None,
                    };
                    prop_assert_eq!(lot.pop_expired(at(t, u64::from(now))).map(|p| p.call), want);
                }
                Op::TakeWhere { modulo } => {
                    let m = u64::from(modulo);
                    let want: Vec<u64> = model.iter().map(|(c, _)| *c).filter(|c| c % m == 0).collect();
                    model.retain(|(c, _)| c % m != 0);
                    prop_assert_eq!(lot.take_where(|c| c % m == 0), want);
                }
            }
            prop_assert_eq!(lot.len(), model.len());
            let next_expiry = model.iter().map(|(_, e)| at(t, u64::from(*e))).min();
            prop_assert_eq!(lot.next_expiry(), next_expiry);
            let (fifo, heap) = lot.keys();
            prop_assert!(fifo <= 2 * model.len() + SLACK && heap <= 2 * model.len() + SLACK);
        }
    }
}
