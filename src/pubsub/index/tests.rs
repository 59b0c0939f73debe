//! The subject index against every rule of jsonrpc-ws.md §7.1, and against
//! a naive matcher on random patterns and topics.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::Index;
use crate::pubsub::topic;

fn matched(index: &Index<u32>, topic: &str) -> Vec<u32> {
    let mut out = vec![99];
    index.matches(topic, &mut out);
    out
}

fn index_of(pairs: &[(&str, u32)]) -> Index<u32> {
    let mut index = Index::new();
    for (pattern, key) in pairs {
        assert!(index.insert(pattern, *key), "{pattern} {key}");
    }
    index
}

#[test]
fn literal_patterns() {
    let index = index_of(&[("chat.messages", 1), ("chat", 2), ("chat.messages.eu", 3)]);
    assert_eq!(matched(&index, "chat.messages"), [1]);
    assert_eq!(matched(&index, "chat"), [2]);
    assert_eq!(matched(&index, "chat.messages.eu"), [3]);
    assert_eq!(matched(&index, "chat.other"), Vec::<u32>::new());
    assert_eq!(matched(&index, "messages"), Vec::<u32>::new());
}

#[test]
fn one_token_wildcard() {
    let index = index_of(&[("events.*", 1), ("*.user", 2), ("*", 3)]);
    assert_eq!(matched(&index, "events.user"), [1, 2]);
    assert_eq!(matched(&index, "events.admin"), [1]);
    assert_eq!(matched(&index, "events.user.login"), Vec::<u32>::new());
    assert_eq!(matched(&index, "events"), [3]);
}

#[test]
fn trailing_wildcard_needs_one_token() {
    let index = index_of(&[("orders.>", 1), (">", 2), ("a.*.>", 3)]);
    assert_eq!(
        matched(&index, "orders"),
        [2],
        "orders.> must not match orders"
    );
    assert_eq!(matched(&index, "orders.eu"), [1, 2]);
    assert_eq!(matched(&index, "orders.eu.created"), [1, 2]);
    assert_eq!(matched(&index, "a.b"), [2]);
    assert_eq!(matched(&index, "a.b.c"), [2, 3]);
    assert_eq!(matched(&index, "a.b.c.d"), [2, 3]);
}

#[test]
fn each_key_once_with_overlapping_patterns() {
    let index = index_of(&[
        ("orders.eu", 7),
        ("orders.*", 7),
        ("orders.>", 7),
        (">", 7),
        ("orders.*", 8),
    ]);
    assert_eq!(matched(&index, "orders.eu"), [7, 8]);
    assert_eq!(index.len(), 5);
}

#[test]
fn insert_and_remove_are_set_operations() {
    let mut index = Index::new();
    assert!(index.insert("a.b", 1u32));
    assert!(!index.insert("a.b", 1));
    assert_eq!(index.len(), 1);
    assert!(!index.remove("a.c", 1), "unknown pattern");
    assert!(!index.remove("a.b", 2), "unknown key");
    assert!(!index.remove("a.*", 1), "a wildcard is not its expansion");
    assert!(index.remove("a.b", 1));
    assert!(!index.remove("a.b", 1));
    assert!(index.is_empty());
}

#[test]
fn removal_prunes_empty_nodes() {
    let mut index = Index::new();
    index.insert("a.b.c", 1u32);
    index.insert("a.*.>", 1);
    index.insert("a.b", 2);
    assert_eq!(index.nodes(), 4, "a, a.b, a.b.c, a.*");
    index.remove("a.b.c", 1);
    assert_eq!(index.nodes(), 3, "a.b stays for key 2");
    index.remove("a.*.>", 1);
    assert_eq!(index.nodes(), 2);
    index.remove("a.b", 2);
    assert_eq!(index.nodes(), 0);
    assert!(index.is_empty());
}

#[test]
fn nodes_are_small_and_shared() {
    // A child in a vector of few: its token (inline up to 24 bytes) and
    // the node, within the per-token cost.
    assert!(std::mem::size_of::<super::Node<u64>>() <= 40);
    assert!(std::mem::size_of::<(compact_str::CompactString, super::Node<u64>)>() <= 64);
    // Patterns with a common prefix share its nodes.
    let index = index_of(&[("a.b.c", 1), ("a.b.d", 2), ("a.b.c", 3), ("a.b", 4)]);
    assert_eq!(index.nodes(), 4, "a, a.b, a.b.c, a.b.d");
}

#[test]
fn many_children_move_to_a_map_and_back() {
    let mut index = Index::new();
    let topics: Vec<String> = (0..100).map(|i| format!("x.{i}")).collect();
    for (i, t) in topics.iter().enumerate() {
        assert!(index.insert(t, i as u32));
        assert!(index.insert(&format!("{t}.>"), 1000 + i as u32));
    }
    assert_eq!(index.nodes(), 101);
    for (i, t) in topics.iter().enumerate() {
        assert_eq!(matched(&index, t), [i as u32]);
        assert_eq!(matched(&index, &format!("{t}.y")), [1000 + i as u32]);
    }
    // Down to a few again (a vector), in any order, still all found.
    for (i, t) in topics.iter().enumerate().skip(3) {
        assert!(index.remove(t, i as u32));
        assert!(index.remove(&format!("{t}.>"), 1000 + i as u32));
    }
    assert!(matches!(
        index.root.literal.get("x").map(|n| &n.literal),
        Some(super::Children::Few(few)) if few.len() == 3
    ));
    for (i, t) in topics.iter().enumerate().take(3) {
        assert_eq!(matched(&index, t), [i as u32]);
    }
    assert_eq!(matched(&index, "x.50"), Vec::<u32>::new());
    for (i, t) in topics.iter().enumerate().take(3) {
        assert!(index.remove(t, i as u32));
        assert!(index.remove(&format!("{t}.>"), 1000 + i as u32));
    }
    assert_eq!((index.nodes(), index.len()), (0, 0));
}

#[test]
fn has_match_agrees() {
    let index = index_of(&[("orders.>", 1), ("x.*", 2)]);
    assert!(!index.has_match("orders"));
    assert!(index.has_match("orders.eu"));
    assert!(index.has_match("x.y"));
    assert!(!index.has_match("x.y.z"));
    assert!(!Index::<u32>::new().has_match("x"));
}

// === property test against the naive matcher ===

/// A reference independent of `topic::matches`: the rules of §7.1 as a
/// recursive definition over token lists.
fn naive(pattern: &[&str], topic: &[&str]) -> bool {
    match (pattern.split_first(), topic.split_first()) {
        (Some((&">", _)), Some(_)) => true,
        (Some((&"*", p)), Some((_, t))) => naive(p, t),
        (Some((a, p)), Some((b, t))) => a == b && naive(p, t),
        (None, None) => true,
        _ => false,
    }
}

fn naive_matches(pattern: &str, topic: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let t: Vec<&str> = topic.split('.').collect();
    naive(&p, &t)
}

/// Mostly three tokens (overlapping patterns), sometimes one of 24 (more
/// children than a vector of few holds).
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop_oneof![Just("a"), Just("b"), Just("c")].prop_map(str::to_owned),
        1 => (0u8..24).prop_map(|i| format!("w{i}")),
    ]
}

fn pattern() -> impl Strategy<Value = String> {
    let star = || Just("*".to_owned());
    let head = prop::collection::vec(prop_oneof![3 => token(), 1 => star()], 0..4);
    (
        head,
        prop_oneof![3 => token(), 1 => star(), 1 => Just(">".to_owned())],
    )
        .prop_map(|(mut t, last)| {
            t.push(last);
            t.join(".")
        })
}

fn concrete() -> impl Strategy<Value = String> {
    prop::collection::vec(token(), 1..6).prop_map(|t| t.join("."))
}

proptest! {
    #[test]
    fn agrees_with_naive_matcher(
        subs in prop::collection::vec((pattern(), 0u32..6), 0..80),
        removals in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        topics in prop::collection::vec(concrete(), 1..20),
    ) {
        let mut index = Index::new();
        let mut held: BTreeSet<(String, u32)> = BTreeSet::new();
        for (p, k) in &subs {
            prop_assert_eq!(topic::validate_pattern(p), Ok(()));
            prop_assert_eq!(index.insert(p, *k), held.insert((p.clone(), *k)));
        }
        for r in &removals {
            if held.is_empty() {
                break;
            }
            let (p, k) = r.get(&held.iter().cloned().collect::<Vec<_>>()).clone();
            prop_assert!(index.remove(&p, k));
            held.remove(&(p, k));
        }
        prop_assert_eq!(index.len(), held.len());
        let mut out = Vec::new();
        for t in &topics {
            let expect: BTreeSet<u32> = held
                .iter()
                .filter(|(p, _)| naive_matches(p, t))
                .map(|(_, k)| *k)
                .collect();
            index.matches(t, &mut out);
            prop_assert_eq!(&out, &expect.iter().copied().collect::<Vec<_>>(), "topic {}", t);
            prop_assert_eq!(index.has_match(t), !expect.is_empty());
            for (p, _) in &held {
                prop_assert_eq!(topic::matches(p, t), naive_matches(p, t), "{} {}", p, t);
            }
        }
        for (p, k) in held {
            prop_assert!(index.remove(&p, k));
        }
        prop_assert_eq!(index.nodes(), 0);
    }
}
