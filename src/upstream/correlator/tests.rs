use proptest::prelude::*;

use super::*;

#[test]
fn abandon_where_takes_only_matching_waiters_and_their_replies_go_stale() {
    let mut c = Correlator::new(false);
    let ids: Vec<u64> = (0..10).map(|n| c.insert(n).expect("open")).collect();
    let mut due = c.abandon_where(|w| w % 3 == 0);
    due.sort_unstable();
    assert_eq!(
        due,
        vec![(ids[0], 0), (ids[3], 3), (ids[6], 6), (ids[9], 9)]
    );
    assert_eq!(c.len(), 6);
    let mut left: Vec<usize> = c.pending_values().copied().collect();
    left.sort_unstable();
    assert_eq!(left, vec![1, 2, 4, 5, 7, 8]);
    assert_eq!(c.resolve(ids[3]), Resolution::Stale);
    assert_eq!(c.resolve(ids[4]), Resolution::Pending(4));
}

#[test]
fn ids_start_at_one_and_resolve_once() {
    let mut c = Correlator::new(false);
    assert_eq!(c.insert("a"), Ok(1));
    assert_eq!(c.insert("b"), Ok(2));
    assert_eq!(c.resolve(2), Resolution::Pending("b"));
    assert_eq!(c.resolve(2), Resolution::Duplicate);
    assert_eq!(c.resolve(99), Resolution::Unknown);
    assert_eq!(c.abandon(1), Some("a"));
    assert_eq!(c.resolve(1), Resolution::Stale);
    assert!(c.is_empty());
}

#[test]
fn closed_table_refuses_and_drains() {
    let mut c = Correlator::new(false);
    c.insert(1).expect("open");
    c.insert(2).expect("open");
    let mut drained = c.close();
    drained.sort();
    assert_eq!(drained, vec![1, 2]);
    assert_eq!(c.insert(3), Err(3));
}

#[test]
fn ordered_mode_checks_fifo_and_attributes_null() {
    let mut c = Correlator::new(true);
    let a = c.insert("a").expect("open");
    let b = c.insert("b").expect("open");
    let d = c.insert("d").expect("open");
    assert_eq!(c.resolve_ordered(Some(a)), Ok(Resolution::Pending("a")));
    // An id:null error line answers the oldest call.
    assert_eq!(c.resolve_ordered(None), Ok(Resolution::Pending("b")));
    // An abandoned call keeps its place; its late reply is stale.
    assert_eq!(c.abandon(d), Some("d"));
    assert_eq!(c.unanswered(), 1);
    assert_eq!(c.resolve_ordered(Some(d)), Ok(Resolution::Stale));
    assert!(c.resolve_ordered(Some(b)).is_err());
}

#[test]
fn ordered_mode_detects_reordering() {
    let mut c = Correlator::new(true);
    let _a = c.insert(()).expect("open");
    let b = c.insert(()).expect("open");
    assert_eq!(
        c.resolve_ordered(Some(b)),
        Err(OutOfSync {
            expected: Some(1),
            got: Some(2)
        })
    );
}

#[test]
fn cancel_removes_from_order() {
    let mut c = Correlator::new(true);
    let a = c.insert("a").expect("open");
    let b = c.insert("b").expect("open");
    assert_eq!(c.cancel(b), Some("b"));
    assert_eq!(c.resolve_ordered(Some(a)), Ok(Resolution::Pending("a")));
    assert_eq!(c.unanswered(), 0);
}

#[test]
fn wraps_below_two_to_the_53() {
    let mut c = Correlator::new(false);
    c.next_id = MAX_GATEWAY_ID;
    assert_eq!(c.insert(()), Ok(MAX_GATEWAY_ID));
    assert_eq!(c.insert(()), Ok(1));
}

/// Once the ids wrapped around, an id still pending is skipped.
#[test]
fn after_a_wrap_ids_still_pending_are_skipped() {
    let mut c = Correlator::new(false);
    assert_eq!(c.insert("old"), Ok(1));
    c.next_id = MAX_GATEWAY_ID;
    assert_eq!(c.insert("a"), Ok(MAX_GATEWAY_ID));
    assert_eq!(c.insert("b"), Ok(2), "id 1 is still pending");
    assert_eq!(c.resolve(1), Resolution::Pending("old"));
    assert_eq!(c.resolve(2), Resolution::Pending("b"));
}

/// A call pending while many others come and go keeps its slot: the ids
/// that would share it are skipped, and it is still its own call's.
#[test]
fn a_call_pending_long_keeps_its_slot() {
    let mut c = Correlator::new(false);
    assert_eq!(c.insert(usize::MAX), Ok(1));
    let mut issued = Vec::new();
    for n in 0..4 * RING_MIN {
        let id = c.insert(n).expect("open");
        issued.push(id);
        assert_eq!(c.resolve(id), Resolution::Pending(n));
    }
    assert!(!issued.contains(&1));
    assert!(
        issued.windows(2).all(|w| w[0] < w[1]),
        "ids still go up: {issued:?}"
    );
    assert_eq!(c.resolve(1), Resolution::Pending(usize::MAX));
    assert!(c.is_empty());
}

/// The ring doubles as calls pile up, and every call stays its own.
#[test]
fn the_ring_grows_with_the_calls_pending() {
    let mut c = Correlator::new(false);
    let ids: Vec<u64> = (0..5 * RING_MIN)
        .map(|n| c.insert(n).expect("open"))
        .collect();
    assert_eq!(c.len(), 5 * RING_MIN);
    for (n, id) in ids.into_iter().enumerate().rev() {
        assert_eq!(c.resolve(id), Resolution::Pending(n));
    }
    assert!(c.is_empty());
}

/// The last `REMEMBERED_IDS` settled and abandoned ids are remembered,
/// each kind on its own: older ones are unknown again.
#[test]
fn remembers_the_last_ids_of_each_kind_only() {
    let mut c = Correlator::new(false);
    let stale = c.insert(0).expect("open");
    assert_eq!(c.abandon(stale), Some(0));
    let first = c.insert(0).expect("open");
    assert_eq!(c.resolve(first), Resolution::Pending(0));
    for n in 0..REMEMBERED_IDS {
        let id = c.insert(n).expect("open");
        assert_eq!(c.resolve(id), Resolution::Pending(n));
    }
    assert_eq!(c.resolve(first), Resolution::Unknown, "forgotten");
    assert_eq!(c.resolve(first + 1), Resolution::Duplicate);
    assert_eq!(c.resolve(stale), Resolution::Stale, "other kind");
}

#[test]
fn parses_float_spellings() {
    assert_eq!(parse_gateway_id("3"), Some(3));
    assert_eq!(parse_gateway_id("3.0"), Some(3));
    assert_eq!(parse_gateway_id("3e0"), Some(3));
    assert_eq!(parse_gateway_id("3.5"), None);
    assert_eq!(parse_gateway_id("\"3\""), None);
    assert_eq!(parse_gateway_id("0"), Some(0));
}

proptest! {
    /// Every issued id is unique among pending ones and maps back to its waiter.
    #[test]
    fn insert_resolve_round_trip(ops in proptest::collection::vec(0u8..3, 1..200)) {
        let mut c = Correlator::new(false);
        let mut live: Vec<(u64, usize)> = Vec::new();
        for (n, op) in ops.into_iter().enumerate() {
            match op {
                0 | 1 => {
                    let id = c.insert(n).expect("open");
                    prop_assert!((1..=MAX_GATEWAY_ID).contains(&id));
                    prop_assert!(live.iter().all(|(l, _)| *l != id));
                    live.push((id, n));
                }
                _ => {
                    if let Some((id, waiter)) = live.pop() {
                        prop_assert_eq!(c.resolve(id), Resolution::Pending(waiter));
                    }
                }
            }
        }
        prop_assert_eq!(c.len(), live.len());
    }
}

/// A call's request duration is the upstream's when both started at one
/// instant (no second subtraction), else it is measured from its start.
#[test]
fn settled_gives_the_upstream_duration_to_a_request_started_with_it() {
    let written = std::time::Instant::now();
    let now = written + std::time::Duration::from_millis(5);
    // Not `now - written`: the duration given is the one used, as is.
    let given = std::time::Duration::from_millis(3);
    let at = Settled {
        now,
        written: Some((written, given)),
    };
    assert_eq!(at.since(written), given);
    let earlier = written - std::time::Duration::from_millis(2);
    assert_eq!(at.since(earlier), std::time::Duration::from_millis(7));
    assert_eq!(
        Settled::at(now).since(written),
        std::time::Duration::from_millis(5)
    );
}
