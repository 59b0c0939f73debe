//! The scan against its oracle, serde_json: hand-picked edge cases, then
//! generated JSON-RPC-like texts and their mutations. The generators are
//! shared with the Sideband JSON envelope's tests (the same pass, other
//! member names).

use std::ops::Range;

use proptest::prelude::*;
use serde_json::value::RawValue;

use super::{array, object, Declined, Members, MAX_DEPTH};
use crate::envelope::Flat;

type Ranges = [Option<Range<usize>>; 6];

/// Where `part` lies in `text`, as a byte range.
pub(in crate::dialect) fn range(text: &str, part: &str) -> Range<usize> {
    let start = part.as_ptr() as usize - text.as_ptr() as usize;
    start..start + part.len()
}

fn scanned_ranges(text: &str, m: &Members<'_>) -> Ranges {
    [m.jsonrpc, m.id, m.method, m.params, m.result, m.error].map(|v| v.map(|v| range(text, v)))
}

/// Deepest nesting of brackets outside strings (a coarse reading, enough
/// to tell a text the scan may decline for its depth).
fn depth(text: &str) -> usize {
    let (mut deepest, mut now, mut in_string, mut escaped) = (0, 0usize, false, false);
    for b in text.bytes() {
        match (in_string, b) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') | (false, b'"') => in_string = !in_string,
            (false, b'[' | b'{') => {
                now += 1;
                deepest = deepest.max(now);
            }
            (false, b']' | b'}') => now = now.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The reasons the scan may leave a text serde_json accepts to serde_json.
pub(in crate::dialect) fn may_be_unsure(text: &str) -> bool {
    text.contains('\\')
        || text
            .trim_start_matches([' ', '\t', '\n', '\r'])
            .starts_with('[')
        || depth(text) > MAX_DEPTH
}

/// The scan of one object agrees with serde_json on `text`, and calls it
/// flat exactly when it holds no raw line break.
fn object_agrees(text: &str) -> Result<(), TestCaseError> {
    let scanned = object(text);
    let oracle = super::super::serde_members(text);
    match (&scanned, &oracle) {
        (Ok(m), Ok(o)) => {
            prop_assert_eq!(scanned_ranges(text, m), scanned_ranges(text, o));
            let flat = !text.contains(['\n', '\r']);
            prop_assert_eq!(m.flat == Flat::Yes, flat, "flat: {:?}", text);
        }
        (Err(Declined::Invalid), Err(_)) => {}
        (Err(Declined::Unsure), _) => prop_assert!(may_be_unsure(text), "unsure: {:?}", text),
        (Ok(_), Err(e)) => prop_assert!(false, "scan accepts, serde_json: {} in {:?}", e, text),
        (Err(Declined::Invalid), Ok(_)) => prop_assert!(false, "scan refuses {:?}", text),
    }
    Ok(())
}

/// The scan of one array agrees with serde_json's `Vec<&RawValue>`.
fn array_agrees(text: &str) -> Result<(), TestCaseError> {
    let mut items = Vec::new();
    let scanned = array(text, &mut items);
    let oracle = serde_json::from_str::<Vec<&RawValue>>(text);
    match (scanned, &oracle) {
        (Ok(()), Ok(o)) => {
            let want: Vec<_> = o.iter().map(|v| range(text, v.get())).collect();
            let got: Vec<_> = items.iter().map(|v| range(text, v)).collect();
            prop_assert_eq!(got, want);
        }
        (Err(Declined::Invalid), Err(_)) => {}
        (Err(Declined::Unsure), _) => prop_assert!(depth(text) > MAX_DEPTH, "unsure: {:?}", text),
        (Ok(()), Err(e)) => prop_assert!(false, "scan accepts, serde_json: {} in {:?}", e, text),
        (Err(Declined::Invalid), Ok(_)) => prop_assert!(false, "scan refuses {:?}", text),
    }
    Ok(())
}

/// What the decoders read (the scan, or serde_json for what it declines)
/// is what serde_json alone reads: the same slices, or the same error,
/// class and text.
fn decoders_agree(text: &str) -> Result<(), TestCaseError> {
    let read = super::super::members(text);
    let oracle = super::super::serde_members(text);
    match (&read, &oracle) {
        (Ok(m), Ok(o)) => prop_assert_eq!(scanned_ranges(text, m), scanned_ranges(text, o)),
        (Err(a), Err(b)) => {
            prop_assert_eq!(a.classify(), b.classify());
            prop_assert_eq!(a.to_string(), b.to_string());
        }
        _ => prop_assert!(false, "{:?}: decoders {:?}", text, read.map(|_| ())),
    }
    let items = super::super::batch_items(text);
    let oracle = serde_json::from_str::<Vec<&RawValue>>(text);
    match (&items, &oracle) {
        (Ok(items), Ok(o)) => {
            let want: Vec<_> = o.iter().map(|v| range(text, v.get())).collect();
            let got: Vec<_> = items.iter().map(|v| range(text, v)).collect();
            prop_assert_eq!(got, want);
        }
        (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
        _ => prop_assert!(false, "{:?}: batch {:?}", text, items.map(|_| ())),
    }
    Ok(())
}

fn agrees(text: &str) {
    let checked = object_agrees(text)
        .and_then(|()| array_agrees(text))
        .and_then(|()| decoders_agree(text));
    if let Err(e) = checked {
        panic!("{e}");
    }
}

#[test]
fn known_members_are_sliced_as_serde_json_slices_them() {
    let text =
        " {\"jsonrpc\" : \"2.0\",\t\"method\":\"m\",\n\"params\":[1, {\"a\":[]}],\r\"id\":7 } ";
    let m = object(text).expect("an object");
    assert_eq!(m.jsonrpc, Some("\"2.0\""));
    assert_eq!(m.method, Some("\"m\""));
    assert_eq!(m.params, Some("[1, {\"a\":[]}]"));
    assert_eq!(m.id, Some("7"));
    assert_eq!((m.result, m.error), (None, None));
    agrees(text);
}

#[test]
fn edge_cases_agree_with_serde_json() {
    let deep = |n: usize| format!("{{\"params\":{}1{}}}", "[".repeat(n), "]".repeat(n));
    // Strings longer than one vector compare: searched by memchr, then
    // checked for control characters.
    let long = |inner: &str| {
        format!(
            "{{\"x\":\"{}{inner}{}\",\"id\":1}}",
            "a".repeat(40),
            "b".repeat(20)
        )
    };
    let cases: &[&str] = &[
        &long(""),
        &long("\u{1}"),
        &long("\u{1f}"),
        &long("\\n"),
        &long("\\u0041"),
        &long("\\ud800"),
        &long("\\q"),
        &long("\""),
        &long("é𝄞\u{7f}"),
        &format!("{{\"x\":\"{}", "a".repeat(40)),
        &format!("{{\"x\":\"{}\\", "a".repeat(40)),
        "{}",
        "",
        " ",
        "{",
        "}",
        "null",
        "\"x\"",
        "1",
        "true",
        "{\"id\":1}",
        "{\"id\":1,}",
        "{,\"id\":1}",
        "{\"id\" 1}",
        "{\"id\":1 \"method\":\"m\"}",
        "{\"id\":1}}",
        "{\"id\":1} x",
        "{\"id\":1}\u{a0}",
        "{\"id\":1}\u{c}",
        "\u{feff}{\"id\":1}",
        "{\"id\":1,\"id\":2}",
        "{\"id\":1,\"id\":2",
        "{\"id\":1,\"id\"",
        "{\"x\":1,\"x\":2}",
        "{\"i\\u0064\":1}",
        "{\"i\\u0064\":1,\"id\":2}",
        "{\"\\ud800\":1}",
        "{\"x\":\"\\ud800\"}",
        "{\"x\":\"\\udc00\\ud800\"}",
        "{\"x\":\"\\u12G4\"}",
        "{\"x\":\"\\u12\"}",
        "{\"x\":\"\\x\"}",
        "{\"x\":\"a\u{1}b\"}",
        "{\"x\":\"a\u{1f}b\"}",
        "{\"x\":\"a\u{7f}b\"}",
        "{\"x\":\"\tb\"}",
        "{\"x\u{1}\":1}",
        "{\"x\":\"é𝄞\"}",
        "{\"id\":01}",
        "{\"id\":-0}",
        "{\"id\":-01}",
        "{\"id\":1.}",
        "{\"id\":.5}",
        "{\"id\":1.5e}",
        "{\"id\":1e+}",
        "{\"id\":1E-7}",
        "{\"id\":-}",
        "{\"id\":+1}",
        "{\"id\":1e400}",
        "{\"id\":12345678901234567890123}",
        "{\"id\":NaN}",
        "{\"id\":0x10}",
        "{\"id\":tru}",
        "{\"id\":nul}",
        "{\"id\":falsey}",
        "{\"x\":[1,]}",
        "{\"x\":[,1]}",
        "{\"x\":{\"a\":1,}}",
        "{\"x\":{\"a\"}}",
        "{\"x\":{1:2}}",
        "{\"x\":[}",
        "{\"x\":{]}",
        "{\"x\":[[]],\"y\":{\"z\":{}}}",
        "[1,\"m\"]",
        "[\"2.0\",1,\"m\",[1],null,null]",
        "[\"2.0\",1,\"m\",[1],null,null,7]",
        "[]",
        "[[]]",
        "[1,]",
        "[{\"id\":1},{\"id\":2}] ",
        "[{\"id\":1}{\"id\":2}]",
        &deep(MAX_DEPTH),
        &deep(MAX_DEPTH + 1),
        &deep(3000),
        &format!("{{\"params\":{}", "[".repeat(3000)),
    ];
    for case in cases {
        agrees(case);
    }
}

/// Strings of the lengths around the word and chunk bounds, with an
/// escape, a control character, a quote or non-ASCII text at every
/// position, closed or cut off by the text's end: the scan and the
/// decoders agree with serde_json.
#[test]
fn strings_around_word_and_chunk_bounds_agree_with_serde_json() {
    let inserts = [
        "\\n", "\\u00e9", "\\q", "\u{1}", "\u{1f}", "\"", "é", "𝄞", "\u{7f}",
    ];
    for len in [
        0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 49, 63, 64, 65,
    ] {
        for at in 0..=len {
            for insert in inserts {
                let inner = format!("{}{insert}{}", "a".repeat(at), "b".repeat(len - at));
                agrees(&format!("{{\"x\":\"{inner}\",\"id\":1}}"));
                agrees(&format!("{{\"id\":\"{inner}\"}}"));
                agrees(&format!("{{\"params\":{{\"{inner}\":[\"{inner}\"]}}}}"));
                agrees(&format!("{{\"x\":\"{inner}"));
            }
        }
        let plain = "c".repeat(len);
        agrees(&format!("{{\"method\":\"{plain}\"}}"));
        agrees(&format!("{{\"method\":\"{plain}"));
    }
}

#[test]
fn nesting_is_followed_to_its_bound_and_declined_beyond() {
    let deep = |n: usize| format!("{{\"params\":{}1{}}}", "[".repeat(n), "]".repeat(n));
    assert!(object(&deep(MAX_DEPTH)).is_ok());
    assert_eq!(object(&deep(MAX_DEPTH + 1)), Err(Declined::Unsure));
    let mixed = format!(
        "{{\"x\":{}{}}}",
        "{\"a\":[".repeat(MAX_DEPTH / 2),
        "]}".repeat(MAX_DEPTH / 2)
    );
    assert!(object(&mixed).is_ok());
}

#[test]
fn escaped_member_names_and_arrays_are_left_to_serde_json() {
    assert_eq!(object("{\"jsonr\\u0070c\":\"2.0\"}"), Err(Declined::Unsure));
    assert_eq!(object(" [\"2.0\"]"), Err(Declined::Unsure));
    // A known member twice is serde_json's error too.
    assert_eq!(object("{\"id\":1,\"id\":1}"), Err(Declined::Invalid));
}

// === Generated texts ===

/// JSON whitespace, now and then something that is not.
pub(in crate::dialect) fn ws() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        8 => Just(""),
        2 => prop::sample::select(vec![" ", "\t", "\n", "\r", " \r\n\t "]),
        1 => prop::sample::select(vec!["\u{c}", "\u{a0}", "\u{b}", "\u{0}"]),
    ]
}

pub(in crate::dialect) fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<i64>().prop_map(|n| n.to_string()),
        2 => any::<f64>().prop_map(|f| f.to_string()),
        3 => prop::sample::select(vec![
            "0", "-0", "01", "-01", "00", "1.", "1.5", ".5", "1e5", "1E+5", "1e-5", "1e",
            "1e+", "-", "1e400", "-1e400", "12345678901234567890", "1.0e", "0x1", "+1", "2.e3",
            "0.0000", "9007199254740993", "-0.0e-0",
        ])
        .prop_map(String::from),
    ]
}

/// A piece of a string's content, escapes (good and bad) included.
fn string_piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a",
        "é",
        "𝄞",
        " ",
        "\\n",
        "\\\"",
        "\\\\",
        "\\/",
        "\\u0041",
        "\\u00e9",
        "\\ud800",
        "\\udc00",
        "\\ud83d\\ude00",
        "\\u12G4",
        "\\u12",
        "\\x",
        "\\",
        "\u{1}",
        "\u{1f}",
        "\u{7f}",
        "\t",
        "\"",
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV",
    ])
}

pub(in crate::dialect) fn string() -> impl Strategy<Value = String> {
    prop::collection::vec(string_piece(), 0..6).prop_map(|p| format!("\"{}\"", p.concat()))
}

pub(in crate::dialect) fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec!["jsonrpc", "id", "method", "params", "result", "error"])
            .prop_map(|n| format!("\"{n}\"")),
        1 => prop::sample::select(vec![
            "\"x\"", "\"\"", "\"i\\u0064\"", "\"jsonr\\u0070c\"", "\"idd\"", "\"i\"",
            "\"\\ud800\"", "\"ID\"", "\"params \"",
        ])
        .prop_map(String::from),
        1 => string(),
    ]
}

pub(in crate::dialect) fn value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(String::from("null")),
        Just(String::from("true")),
        Just(String::from("false")),
        number(),
        string(),
    ];
    leaf.prop_recursive(6, 48, 5, |inner| {
        prop_oneof![
            (prop::collection::vec((ws(), inner.clone()), 0..5), ws())
                .prop_map(|(items, end)| { list('[', items.into_iter(), end, ']') }),
            (prop::collection::vec((ws(), (string(), inner)), 0..5), ws()).prop_map(
                |(members, end)| {
                    let members = members
                        .into_iter()
                        .map(|(w, (k, v))| (w, format!("{k}:{v}")));
                    list('{', members, end, '}')
                }
            ),
        ]
    })
}

fn list(
    open: char,
    items: impl Iterator<Item = (&'static str, String)>,
    end: &str,
    close: char,
) -> String {
    let items: Vec<String> = items.map(|(w, v)| format!("{w}{v}")).collect();
    format!("{open}{}{end}{close}", items.join(","))
}

/// A JSON-RPC-like object: known and unknown members, repeats possible.
fn message() -> impl Strategy<Value = String> {
    let member = (ws(), name(), ws(), ws(), value(), ws())
        .prop_map(|(a, k, b, c, v, d)| format!("{a}{k}{b}:{c}{v}{d}"));
    (ws(), prop::collection::vec(member, 0..7), ws())
        .prop_map(|(a, members, b)| format!("{a}{{{}}}{b}", members.join(",")))
}

/// A batch of messages, or of any values.
fn batch() -> impl Strategy<Value = String> {
    let item = prop_oneof![3 => message(), 1 => value()];
    (prop::collection::vec(item, 0..4), ws())
        .prop_map(|(items, w)| format!("{w}[{}]", items.join(",")))
}

#[derive(Debug, Clone)]
pub(in crate::dialect) enum Mutation {
    Replace(usize, &'static str),
    Insert(usize, &'static str),
    Truncate(usize),
    Nest(usize),
}

pub(in crate::dialect) fn mutation() -> impl Strategy<Value = Mutation> {
    let what = prop::sample::select(vec![
        "\"",
        "\\",
        ",",
        ":",
        "{",
        "}",
        "[",
        "]",
        "\u{1}",
        " ",
        "\u{a0}",
        "0",
        "-",
        "e",
        ".",
        "u",
        "\\u0000",
        "\\ud800",
        "\"id\":1,",
        "\"id\":",
        "null",
        "é",
    ]);
    prop_oneof![
        (any::<usize>(), what.clone()).prop_map(|(i, s)| Mutation::Replace(i, s)),
        (any::<usize>(), what).prop_map(|(i, s)| Mutation::Insert(i, s)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1..700usize).prop_map(|(i, n)| Mutation::Nest(i.wrapping_mul(n))),
    ]
}

/// The char boundary at or before `i % (len + 1)`.
fn boundary(text: &str, i: usize) -> usize {
    let mut at = i % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

pub(in crate::dialect) fn mutate(mut text: String, mutations: &[Mutation]) -> String {
    for m in mutations {
        match *m {
            Mutation::Replace(i, s) => {
                let at = boundary(&text, i);
                let end = text[at..].chars().next().map_or(at, |c| at + c.len_utf8());
                text.replace_range(at..end, s);
            }
            Mutation::Insert(i, s) => {
                let at = boundary(&text, i);
                text.insert_str(at, s);
            }
            Mutation::Truncate(i) => {
                let at = boundary(&text, i);
                text.truncate(at);
            }
            Mutation::Nest(i) => {
                // Wrap the value that starts at a `[` or `{` (if any) in
                // more arrays.
                let at = boundary(&text, i);
                if let Some(off) = text[at..].find(['[', '{']) {
                    let n = i % 700;
                    text.insert_str(at + off, &"[".repeat(n));
                    text.push_str(&"]".repeat(n));
                }
            }
        }
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn generated_messages_agree_with_serde_json(text in message()) {
        object_agrees(&text)?;
        decoders_agree(&text)?;
    }

    #[test]
    fn mutated_messages_agree_with_serde_json(
        text in message(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let text = mutate(text, &mutations);
        object_agrees(&text)?;
        array_agrees(&text)?;
        decoders_agree(&text)?;
    }

    #[test]
    fn batches_agree_with_serde_json(
        text in batch(),
        mutations in prop::collection::vec(mutation(), 0..3),
    ) {
        let text = mutate(text, &mutations);
        array_agrees(&text)?;
        object_agrees(&text)?;
        decoders_agree(&text)?;
    }
}
