//! The JSON envelope's reading against its oracle, serde_json: the
//! validating scan slices the same members serde_json reads (or declines a
//! text serde_json refuses, or may accept for reasons it leaves to it),
//! and a whole decode gives what serde_json's reading alone gives, message
//! or error (its text included), for generated envelopes and their
//! mutations.

use std::ops::Range;

use crate::dialect::jsonrpc::scan::tests::{
    may_be_unsure, mutate, mutation, name, number, range, string, value, ws,
};
use crate::dialect::jsonrpc::scan::Declined;

use super::*;

fn ranges(text: &str, m: &JsonMembers<'_>) -> [Option<Range<usize>>; 10] {
    Member::ALL.map(|member| m.get(member).map(|v| range(text, v)))
}

/// The scan's members agree with serde_json's: the same slices, or both
/// refuse, or the scan is unsure for one of its reasons.
fn members_agree(text: &str) -> Result<(), TestCaseError> {
    let scanned = JsonMembers::scan(text);
    let oracle = JsonMembers::by_serde(text);
    match (&scanned, &oracle) {
        (Ok(s), Ok(o)) => {
            prop_assert_eq!(ranges(text, s), ranges(text, o));
            // And both tell the same about line breaks.
            prop_assert_eq!(s, o);
        }
        (Err(Declined::Invalid), Err(_)) => {}
        (Err(Declined::Unsure), _) => prop_assert!(may_be_unsure(text), "unsure: {:?}", text),
        (Ok(_), Err(e)) => prop_assert!(false, "scan accepts, serde_json: {} in {:?}", e, text),
        (Err(Declined::Invalid), Ok(_)) => prop_assert!(false, "scan refuses {:?}", text),
    }
    Ok(())
}

/// A decode (the scan, serde_json for what it declines) is serde_json's
/// alone: the same message, or the same error; and decoded within a frame,
/// the same again.
fn decodes_agree(text: &str) -> Result<(), TestCaseError> {
    let oracle = decode_json_by_serde(text.as_bytes());
    prop_assert_eq!(
        decode_envelope(text.as_bytes(), Encoding::Json),
        oracle.clone()
    );
    let mut frame = b"head".to_vec();
    frame.extend_from_slice(text.as_bytes());
    let frame = Bytes::from(frame);
    let within = decode_envelope_in(&frame, &frame[4..], Encoding::Json);
    prop_assert_eq!(within, oracle);
    Ok(())
}

fn agrees(text: &str) {
    if let Err(e) = members_agree(text).and_then(|()| decodes_agree(text)) {
        panic!("{e}");
    }
}

// === Generated envelopes ===

/// A value for `t`: the four types, and others.
fn t_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["\"r\"", "\"R\"", "\"E\"", "\"N\""]).prop_map(String::from),
        1 => prop::sample::select(vec!["\"x\"", "\"\"", "\"\\u0072\"", "\"rr\"", "1", "null"])
            .prop_map(String::from),
    ]
}

/// A value for `cid`: 32 lowercase hex characters, and what is not.
fn cid_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<Cid>().prop_map(|cid| format!("\"{}\"", tohex(&cid))),
        1 => prop_oneof![
            any::<Cid>().prop_map(|cid| format!("\"{}\"", tohex(&cid).to_uppercase())),
            Just(format!("\"\\u0032{}\"", &CID_HEX[1..])),
            Just("\"2021\"".to_owned()),
            Just("7".to_owned()),
            Just("null".to_owned()),
        ],
    ]
}

/// One envelope member: mostly a known one with a value of its type,
/// sometimes any name (escaped, unknown, a known one's look-alike) with
/// any value.
fn member() -> impl Strategy<Value = String> {
    let text = || prop_oneof![3 => string(), 1 => value()];
    let typed = prop_oneof![
        t_value().prop_map(|v| format!("\"t\":{v}")),
        cid_value().prop_map(|v| format!("\"cid\":{v}")),
        (prop::sample::select(vec!["m", "message", "e"]), text())
            .prop_map(|(k, v)| format!("\"{k}\":{v}")),
        prop_oneof![3 => number(), 1 => value()].prop_map(|v| format!("\"code\":{v}")),
        (
            prop::sample::select(vec!["p", "result", "data", "d"]),
            value()
        )
            .prop_map(|(k, v)| format!("\"{k}\":{v}")),
    ];
    let odd_name = prop_oneof![
        prop::sample::select(vec![
            "\"\\u0074\"",
            "\"c\\u0069d\"",
            "\"T\"",
            "\"cid \"",
            "\"mess\"",
            "\"codes\"",
            "\"dat\"",
            "\"\"",
        ])
        .prop_map(String::from),
        name(),
    ];
    let any = (odd_name, value()).prop_map(|(k, v)| format!("{k}:{v}"));
    prop_oneof![5 => typed, 1 => any]
}

/// An envelope-like object: known and unknown members, repeats possible.
fn envelope() -> impl Strategy<Value = String> {
    let member = (ws(), member(), ws()).prop_map(|(a, m, b)| format!("{a}{m}{b}"));
    (ws(), prop::collection::vec(member, 0..7), ws())
        .prop_map(|(a, members, b)| format!("{a}{{{}}}{b}", members.join(",")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn generated_envelopes_read_as_serde_json_reads_them(text in envelope()) {
        members_agree(&text)?;
        decodes_agree(&text)?;
    }

    #[test]
    fn mutated_envelopes_read_as_serde_json_reads_them(
        text in envelope(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let text = mutate(text, &mutations);
        members_agree(&text)?;
        decodes_agree(&text)?;
    }
}

// === Hand-picked ===

#[test]
fn the_vectors_are_read_by_the_scan() {
    for (text, _, msg, _) in vectors() {
        let members = JsonMembers::scan(&text).expect("the scan reads it");
        assert_eq!(
            members,
            JsonMembers::by_serde(&text).expect("serde_json reads it")
        );
        assert_eq!(decode_json(&text), Ok(msg));
        agrees(&text);
    }
    let text = format!(
        " {{ \"x\":[{{}}], \"d\":1,\"data\":2,\"e\":\"e\",\"message\":\"s\",\"m\":\"m\",\
         \"code\":-1.5e3,\"cid\":\"{CID_HEX}\",\"p\":[],\"result\":null,\"t\":\"E\"}} "
    );
    let m = JsonMembers::scan(&text).expect("the scan reads it");
    let got = Member::ALL.map(|member| m.get(member));
    let cid = format!("\"{CID_HEX}\"");
    let want = [
        "\"E\"", "\"m\"", &cid, "[]", "null", "-1.5e3", "\"s\"", "2", "\"e\"", "1",
    ]
    .map(Some);
    assert_eq!(got, want);
    agrees(&text);
}

#[test]
fn odd_envelopes_keep_serde_json_s_reading_and_errors() {
    let cases = [
        // Not an object, or not JSON: serde_json's errors.
        "[\"r\"]",
        " [] ",
        "",
        "{",
        "{\"t\":\"r\"",
        "{\"t\":\"r\"} x",
        "{\"t\":\"r\",}",
        "{\"t\" \"r\"}",
        "{\"t\":\"r\\x\"}",
        "{\"t\":\"\u{1}\"}",
        "{\"d\":01}",
        "{\"d\":[1,]}",
        // A known member twice: serde_json's duplicate field.
        "{\"t\":\"N\",\"e\":\"a\",\"e\":\"b\"}",
        "{\"t\":\"N\",\"\\u0065\":\"a\",\"e\":\"b\"}",
        // An escaped name: left to serde_json, which unescapes it.
        "{\"\\u0074\":\"N\",\"e\":\"a\"}",
        "{\"t\":\"N\",\"\\ud800\":1,\"e\":\"a\"}",
        // Unknown members, twice too, and look-alikes.
        "{\"t\":\"N\",\"e\":\"a\",\"x\":1,\"x\":2,\"T\":3,\"ee\":4,\"dat\":5}",
        // Nesting beyond the scan's bound.
        &format!("{{\"t\":\"N\",\"e\":\"a\",\"d\":{}1{}}}", "[".repeat(600), "]".repeat(600)),
        // Member values of the wrong type, and codes.
        "{\"t\":\"E\",\"cid\":\"202122232425262728292a2b2c2d2e2f\",\"code\":1e400,\"message\":\"m\"}",
        "{\"t\":\"E\",\"cid\":\"202122232425262728292a2b2c2d2e2f\",\"code\":2.0,\"message\":\"m\"}",
        "{\"t\":\"E\",\"cid\":\"202122232425262728292a2b2c2d2e2f\",\"code\":\"1\",\"message\":1}",
        "{\"t\":\"r\",\"cid\":\"202122232425262728292a2b2c2d2e2F\",\"m\":\"a\"}",
        "{\"t\":\"r\",\"cid\":\"202122232425262728292a2b2c2d2e2f\",\"m\":\"\\u00e9\\n\"}",
    ];
    for text in cases {
        agrees(text);
    }
}
