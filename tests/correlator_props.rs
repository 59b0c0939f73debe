//! Property tests of the correlator: random interleavings of send, reply,
//! duplicate reply, unknown reply, timeout, client disconnect and link
//! failure. Every call is settled exactly once, and a reply is never handed
//! the waiter of another call.

use std::collections::HashMap;

use proptest::prelude::*;
use switchyard::upstream::correlator::{Correlator, Resolution, MAX_GATEWAY_ID};

/// A waiter as the gateway keeps it: which call, of which client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Waiter {
    call: usize,
    client: u8,
}

#[derive(Debug, Clone)]
enum Op {
    /// A client sends a request.
    Send { client: u8 },
    /// The upstream answers the n-th id issued (mod how many were issued):
    /// the first answer, or a duplicate, or a stale one.
    Reply(usize),
    /// The upstream answers an id switchyard never issued.
    UnknownReply(u64),
    /// The n-th id issued times out.
    Timeout(usize),
    /// A client goes away: its pending calls are abandoned.
    Disconnect { client: u8 },
    /// The upstream connection fails: every pending call is failed.
    LinkFailure,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..4).prop_map(|client| Op::Send { client }),
        6 => any::<usize>().prop_map(Op::Reply),
        1 => (1_000_000u64..MAX_GATEWAY_ID).prop_map(Op::UnknownReply),
        2 => any::<usize>().prop_map(Op::Timeout),
        1 => (0u8..4).prop_map(|client| Op::Disconnect { client }),
        1 => Just(Op::LinkFailure),
    ]
}

/// What the model says about an issued id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Answered,
    Abandoned,
    /// Failed with the link: the correlator was closed.
    Failed,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_call_is_settled_exactly_once_and_never_crosses(ops in prop::collection::vec(op(), 1..300)) {
        let mut table = Correlator::new(false);
        // Issued gateway ids in order, with their call and state.
        let mut issued: Vec<(u64, Waiter, State)> = Vec::new();
        // How many times each call was settled (answer, timeout, client
        // gone, link failure, or refused at send because the link is gone).
        let mut settled: HashMap<usize, u32> = HashMap::new();
        let mut calls = 0usize;
        let mut closed = false;
        for op in ops {
            match op {
                Op::Send { client } => {
                    let waiter = Waiter { call: calls, client };
                    calls += 1;
                    match table.insert(waiter) {
                        Ok(id) => {
                            prop_assert!(!closed, "insert after close");
                            prop_assert!((1..=MAX_GATEWAY_ID).contains(&id));
                            prop_assert!(issued.iter().all(|(i, ..)| *i != id), "id {id} reused");
                            issued.push((id, waiter, State::Pending));
                        }
                        Err(back) => {
                            prop_assert!(closed, "refused while open");
                            prop_assert_eq!(back, waiter);
                            *settled.entry(waiter.call).or_default() += 1;
                        }
                    }
                }
                Op::Reply(n) if !issued.is_empty() => {
                    let k = n % issued.len();
                    let (id, waiter, state) = issued[k];
                    let got = table.resolve(id);
                    match state {
                        State::Pending => {
                            prop_assert_eq!(got, Resolution::Pending(waiter));
                            *settled.entry(waiter.call).or_default() += 1;
                            issued[k].2 = State::Answered;
                        }
                        State::Answered => prop_assert_eq!(got, Resolution::Duplicate),
                        State::Abandoned => prop_assert_eq!(got, Resolution::Stale),
                        // After close nothing is pending; whatever it is
                        // classified as, no waiter is handed out.
                        State::Failed => prop_assert!(!matches!(got, Resolution::Pending(_))),
                    }
                }
                Op::Reply(_) => {}
                Op::UnknownReply(id) => {
                    if issued.iter().all(|(i, ..)| *i != id) {
                        prop_assert_eq!(table.resolve(id), Resolution::Unknown);
                    }
                }
                Op::Timeout(n) if !issued.is_empty() => {
                    let k = n % issued.len();
                    let (id, waiter, state) = issued[k];
                    let got = table.abandon(id);
                    if state == State::Pending {
                        prop_assert_eq!(got, Some(waiter));
                        *settled.entry(waiter.call).or_default() += 1;
                        issued[k].2 = State::Abandoned;
                    } else {
                        prop_assert_eq!(got, None);
                    }
                }
                Op::Timeout(_) => {}
                Op::Disconnect { client } => {
                    let mut gone = table.abandon_where(|w| w.client == client);
                    gone.sort_by_key(|(id, _)| *id);
                    let mut want: Vec<(u64, Waiter)> = issued
                        .iter()
                        .filter(|(_, w, s)| *s == State::Pending && w.client == client)
                        .map(|(id, w, _)| (*id, *w))
                        .collect();
                    want.sort_by_key(|(id, _)| *id);
                    prop_assert_eq!(&gone, &want);
                    for (id, w) in gone {
                        *settled.entry(w.call).or_default() += 1;
                        for entry in issued.iter_mut().filter(|e| e.0 == id) {
                            entry.2 = State::Abandoned;
                        }
                    }
                }
                Op::LinkFailure => {
                    let mut failed: Vec<usize> = table.close().iter().map(|w| w.call).collect();
                    failed.sort_unstable();
                    let mut want: Vec<usize> = issued
                        .iter()
                        .filter(|(_, _, s)| *s == State::Pending)
                        .map(|(_, w, _)| w.call)
                        .collect();
                    want.sort_unstable();
                    prop_assert_eq!(&failed, &want);
                    for call in failed {
                        *settled.entry(call).or_default() += 1;
                    }
                    for entry in issued.iter_mut().filter(|e| e.2 == State::Pending) {
                        entry.2 = State::Failed;
                    }
                    closed = true;
                }
            }
            let pending = issued.iter().filter(|e| e.2 == State::Pending).count();
            prop_assert_eq!(table.len(), pending);
        }
        // The link finally goes: whatever is left is failed, once.
        for w in table.close() {
            *settled.entry(w.call).or_default() += 1;
        }
        for call in 0..calls {
            prop_assert_eq!(settled.get(&call).copied(), Some(1), "call {} settled", call);
        }
    }

    #[test]
    fn ordered_connections_accept_replies_only_in_write_order(
        writes in 1usize..40,
        abandon in prop::collection::vec(any::<bool>(), 40),
        wrong in any::<usize>(),
    ) {
        let mut table = Correlator::new(true);
        let ids: Vec<u64> = (0..writes)
            .map(|call| table.insert(call).expect("open"))
            .collect();
        for (k, id) in ids.iter().enumerate() {
            if abandon[k] {
                prop_assert_eq!(table.abandon(*id), Some(k));
            }
        }
        // A reply for anything but the oldest id written breaks the order.
        if writes > 1 {
            let other = ids[1 + wrong % (writes - 1)];
            prop_assert!(table.resolve_ordered(Some(other)).is_err());
        }
        // In order, each reply settles its own call, or is stale if its call
        // was abandoned; `id:null` is attributed to the oldest.
        for (k, id) in ids.iter().enumerate() {
            let reply = if k % 3 == 0 { None } else { Some(*id) };
            let got = table.resolve_ordered(reply).expect("in order");
            if abandon[k] {
                prop_assert_eq!(got, Resolution::Stale);
            } else {
                prop_assert_eq!(got, Resolution::Pending(k));
            }
        }
        prop_assert_eq!(table.unanswered(), 0);
        prop_assert!(table.resolve_ordered(Some(ids[0])).is_err(), "nothing in flight");
    }
}
