//! The containment decision against a naive reference that enumerates
//! every topic: a table of the cases the issue names, and a property test
//! over random small patterns.
#![allow(clippy::unwrap_used)] // in tests a panic is the failure report

use proptest::prelude::*;

use super::*;
use crate::pubsub::topic::matches;

/// Every topic over the patterns' literals plus a fresh token, from one
/// token to two more than the longest pattern: `pattern` admitted iff each
/// one it matches is matched by an allow pattern and by no deny pattern.
fn naive(pattern: &str, allow: &[&str], deny: &[&str]) -> bool {
    let all: Vec<&str> = std::iter::once(pattern)
        .chain(allow.iter().copied())
        .chain(deny.iter().copied())
        .collect();
    let mut alphabet: Vec<&str> = all
        .iter()
        .flat_map(|p| p.split('.'))
        .filter(|t| *t != ONE && *t != REST)
        .collect();
    alphabet.sort_unstable();
    alphabet.dedup();
    alphabet.push("fresh0");
    let longest = all.iter().map(|p| p.split('.').count()).max().unwrap();
    let mut topics: Vec<Vec<&str>> = vec![Vec::new()];
    for _ in 0..longest + 2 {
        let mut longer = Vec::new();
        for t in &topics {
            for token in &alphabet {
                let mut t = t.clone();
                t.push(token);
                let topic = t.join(".");
                if matches(pattern, &topic) {
                    let allowed = allow.iter().any(|a| matches(a, &topic));
                    let denied = deny.iter().any(|d| matches(d, &topic));
                    if !allowed || denied {
                        return false;
                    }
                }
                longer.push(t);
            }
        }
        topics = longer;
    }
    true
}

fn decide(pattern: &str, allow: &[&str], deny: &[&str]) -> bool {
    TopicPolicy::new(allow, deny).admits(pattern)
}

#[test]
fn the_table() {
    // (pattern, allow, deny, admitted)
    let cases: &[(&str, &[&str], &[&str], bool)] = &[
        ("orders.eu.x", &["orders.eu.>"], &[], true),
        ("orders.eu.>", &["orders.eu.>"], &[], true),
        ("orders.>", &["orders.eu.>"], &[], false),
        ("orders.*", &["orders.eu.>"], &[], false),
        ("orders.eu", &["orders.eu.>"], &[], false),
        ("orders.*.x", &["orders.*.>"], &[], true),
        ("a.>", &["a.*", "a.*.>"], &[], true),
        ("a.>", &["a.*", "a.*.*"], &[], false),
        ("a.*", &["a.b", "a.c"], &[], false),
        ("a.b", &["a.b", "a.c"], &[], true),
        (">", &[">"], &[], true),
        (">", &["*.>", "*"], &[], true),
        (">", &["a.>"], &[], false),
        ("*", &["*.>"], &[], false),
        ("a", &[], &[], false),
        ("priv.secret", &["up.>"], &[], false),
        (">", &["up.>"], &[], false),
        ("up.>", &["up.>"], &["up.admin.>"], false),
        ("up.orders", &["up.>"], &["up.admin.>"], true),
        ("up.*", &["up.>"], &["up.admin"], false),
        ("up.*.x", &["up.>"], &["up.admin"], true),
        ("up.>", &["up.>"], &["*.*.*.*"], false),
    ];
    for (pattern, allow, deny, admitted) in cases {
        assert_eq!(
            naive(pattern, allow, deny),
            *admitted,
            "the reference disagrees with the table: {pattern} allow {allow:?} deny {deny:?}"
        );
        assert_eq!(
            decide(pattern, allow, deny),
            *admitted,
            "{pattern} allow {allow:?} deny {deny:?}"
        );
    }
}

/// Small patterns over few literals, so that the reference can enumerate
/// and coincidences are frequent.
fn pattern() -> impl Strategy<Value = String> {
    let token = prop_oneof![Just("a"), Just("b"), Just("*")];
    (prop::collection::vec(token, 1..4), any::<bool>()).prop_map(|(tokens, rest)| {
        let mut p = tokens.join(".");
        if rest {
            p.push_str(".>");
        }
        p
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_decision_is_the_references(
        p in prop_oneof![pattern(), Just(">".to_owned())],
        allow in prop::collection::vec(pattern(), 0..4),
        deny in prop::collection::vec(pattern(), 0..2),
    ) {
        let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
        let deny: Vec<&str> = deny.iter().map(String::as_str).collect();
        prop_assert_eq!(decide(&p, &allow, &deny), naive(&p, &allow, &deny));
    }
}

#[test]
fn overlap_is_symmetric_on_examples() {
    let t = |s: &str| tokens(s);
    assert!(overlaps(&t("a.>"), &t("*.b")));
    assert!(!overlaps(&t("a.>"), &t("a")));
    assert!(overlaps(&t(">"), &t("x.y.z")));
    assert!(!overlaps(&t("a.*"), &t("a.b.c")));
}
