//! The in-place path's table: its entries, and the routers it keeps.

use std::sync::Arc;

use super::{take, token_of, Out, Routers, Slab, CALLS_KEPT};

/// A call is moved into the session's table and out of it by value:
/// it holds no span while spans are not exported (nor a router of its
/// own), which keeps it within 128 bytes, a size copied without a call
/// to `memcpy`.
#[test]
fn a_call_in_the_table_is_small() {
    let size = std::mem::size_of::<(u64, Out)>();
    assert!(size <= 128, "{size} bytes");
}

/// Calls name their router by number: the table keeps each router
/// while a call placed through it is out, and lets an older one go
/// with its last call (the newest stays for the calls to come).
#[test]
fn the_table_keeps_a_router_while_its_calls_are_out() {
    let (old, new) = (Arc::new("old"), Arc::new("new"));
    let mut routers = Routers::default();
    let (a, gone) = routers.hold(&old);
    assert!(gone.is_none());
    let (b, _) = routers.hold(&old);
    assert_eq!(a, b, "one number per router");
    assert_eq!(Arc::strong_count(&old), 2, "one handle for both calls");
    // A reload: calls placed now go through the new router.
    let (c, gone) = routers.hold(&new);
    assert!(gone.is_none(), "the old router's calls are still out");
    assert_ne!(a, c);
    assert_eq!(routers.get(a).map(|r| **r), Some("old"));
    assert_eq!(routers.get(c).map(|r| **r), Some("new"));
    assert!(routers.release(a).is_none(), "one call through it is out");
    assert_eq!(routers.get(b).map(|r| **r), Some("old"));
    let last = routers.release(b);
    assert_eq!(last.map(|r| *r), Some("old"), "let go with its last call");
    assert!(routers.get(a).is_none());
    assert_eq!(Arc::strong_count(&old), 1);
    // The newest stays when its calls are done, and goes at the next
    // reload.
    assert!(routers.release(c).is_none());
    assert_eq!(routers.get(c).map(|r| **r), Some("new"));
    let (d, gone) = routers.hold(&new);
    assert_eq!((c, gone), (d, None));
    assert!(routers.release(d).is_none());
    let (e, gone) = routers.hold(&old);
    assert_ne!(e, a, "a router placed again gets a new number");
    assert_eq!(gone.map(|r| *r), Some("new"));
    assert_eq!(routers.list.len(), 1);
}

/// Records `v` as call number `count`, as `InPlace::place` does.
fn record(out: &mut Slab<(u64, [u8; 200])>, count: u64, v: [u8; 200]) -> u64 {
    let entry = out.vacant_entry();
    let token = token_of(entry.key(), count);
    entry.insert((token, v));
    token
}

/// A table that ran empty after a burst keeps room for `CALLS_KEPT`
/// calls, not for the burst; one that never held more keeps its room
/// (taking calls out of it allocates nothing).
#[test]
fn an_empty_table_keeps_room_for_a_few_calls_only() {
    let mut out = Slab::new();
    let tokens: Vec<u64> = (0..256).map(|n| record(&mut out, n, [0; 200])).collect();
    assert!(out.capacity() >= 256);
    for (n, token) in tokens.iter().enumerate() {
        assert!(take(&mut out, *token).is_some());
        if n < 255 {
            assert!(out.capacity() >= 256, "shrunk before it ran empty");
        }
    }
    let kept = out.capacity();
    assert!((CALLS_KEPT..2 * CALLS_KEPT).contains(&kept), "{kept}");
    for round in 0..3 {
        let tokens: Vec<u64> = (0..CALLS_KEPT as u64)
            .map(|n| record(&mut out, 1000 + n, [round; 200]))
            .collect();
        for token in tokens {
            assert_eq!(take(&mut out, token).map(|v| v[0]), Some(round));
        }
        assert_eq!(out.capacity(), kept);
    }
    assert!(take(&mut out, 7).is_none());
}

/// A table that never held more than `2 * CALLS_KEPT` calls keeps its
/// room when it runs empty: it is not made again at each lull.
#[test]
fn a_table_of_a_steady_load_keeps_its_room() {
    let mut out = Slab::new();
    for round in 0..3 {
        let tokens: Vec<u64> = (0..2 * CALLS_KEPT as u64)
            .map(|n| record(&mut out, n, [round; 200]))
            .collect();
        let room = out.capacity();
        assert!((2 * CALLS_KEPT..=4 * CALLS_KEPT).contains(&room), "{room}");
        for token in tokens {
            assert!(take(&mut out, token).is_some());
        }
        if round == 0 {
            assert!(room <= 2 * CALLS_KEPT, "{room}");
        }
        assert_eq!(out.capacity(), room, "kept when it ran empty");
    }
}

/// A token names its call, not only its slot: once the slot holds a
/// later call, the earlier call's token takes nothing out.
#[test]
fn a_token_takes_out_its_own_call_only() {
    let mut out = Slab::new();
    let first = record(&mut out, 0, [1; 200]);
    assert_eq!(take(&mut out, first).map(|v| v[0]), Some(1));
    let second = record(&mut out, 1, [2; 200]);
    assert_ne!(first, second);
    assert!(take(&mut out, first).is_none(), "an earlier call's token");
    assert_eq!(take(&mut out, second).map(|v| v[0]), Some(2));
    assert!(take(&mut out, second).is_none(), "taken once");
}
