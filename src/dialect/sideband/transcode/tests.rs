//! §7's transcoding tables, row by row, with the C5 and C6 vectors.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::dialect::sideband::scalar::{base64, format_f64};
use crate::dialect::sideband::testutil::{tohex, unhex};

mod from_json;
mod props;

/// Through both entry points: `json_to_cbor`, and `json_to_cbor_into`
/// after bytes already written, which it must leave alone on error.
fn to_cbor(json: &str) -> Result<String, TranscodeError> {
    let raw = RawValue::from_string(json.to_owned()).expect("valid JSON");
    let result = json_to_cbor(&raw).map(|b| tohex(&b));
    let mut out = vec![0x82, 0x00];
    let into = json_to_cbor_into(&raw, &mut out);
    match &result {
        Ok(cbor) => assert_eq!(tohex(&out), format!("8200{cbor}"), "{json}"),
        Err(e) => {
            assert_eq!(into.as_ref().err(), Some(e), "{json}");
            assert_eq!(
                out,
                [0x82, 0x00],
                "{json}: a failed transcoding leaves nothing"
            );
        }
    }
    result
}

/// Through both entry points: `cbor_to_json`, and `cbor_to_json_into`
/// after text already written, which it must leave alone on error.
fn to_json(hex: &str) -> Result<String, TranscodeError> {
    let result = cbor_to_json(&unhex(hex)).map(|raw| raw.get().to_owned());
    let mut out = String::from("[0,");
    let into = cbor_to_json_into(&unhex(hex), &mut out);
    match &result {
        Ok(json) => assert_eq!(out, format!("[0,{json}"), "{hex}"),
        Err(e) => {
            assert_eq!(into.as_ref().err(), Some(e), "{hex}");
            assert_eq!(out, "[0,", "{hex}: a failed transcoding leaves nothing");
        }
    }
    result
}

#[test]
fn c5_and_c6() {
    let c5_json = r#"{"n":1,"f":1.0,"big":18446744073709551616,"s":"hi"}"#;
    let c5 = "a4616e016166fb3ff000000000000063626967c2490100000000000000006173626869";
    assert_eq!(to_cbor(c5_json).as_deref(), Ok(c5));
    assert_eq!(to_json(c5).as_deref(), Ok(c5_json));
    assert_eq!(to_json("a161624300fffe").as_deref(), Ok(r#"{"b":"AP_-"}"#));
}

#[test]
fn cbor_to_json_rows() {
    let ok = [
        // Integers, full range.
        ("00", "0"),
        ("17", "23"),
        ("1bffffffffffffffff", "18446744073709551615"),
        ("20", "-1"),
        ("3bffffffffffffffff", "-18446744073709551616"),
        // Floats of every width: shortest round trip, always `.` or exponent.
        ("f93c00", "1.0"),
        ("f98000", "-0.0"),
        ("fa3fc00000", "1.5"),
        ("fb3fb999999999999a", "0.1"),
        ("fb7e37e43c8800759c", "1e+300"),
        ("f90001", "5.960464477539063e-8"),
        // Byte strings as base64url without padding; text; arrays; literals.
        ("4100", r#""AA""#),
        ("43fbff00", r#""-_8A""#),
        ("62c3a9", r#""é""#),
        ("63220a5c", r#""\"\n\\""#),
        ("83f4f5f6", "[false,true,null]"),
        ("f7", "null"),
        ("a26162016161 02", r#"{"b":1,"a":2}"#),
        // Indefinite lengths.
        ("5f4100410fff", r#""AA8""#),
        ("7f61616162ff", r#""ab""#),
        ("9f01ff", "[1]"),
        ("bf616101ff", r#"{"a":1}"#),
        // Tags of the table.
        (
            "c074323031332d30332d32315432303a30343a30305a",
            r#""2013-03-21T20:04:00Z""#,
        ),
        ("d8206161", r#""a""#),
        ("c11a514b67b0", "1363896240"),
        ("c1fb41d452d9ec200000", "1363896240.5"),
        ("c249010000000000000000", "18446744073709551616"),
        ("c349010000000000000000", "-18446744073709551617"),
        ("c24100", "0"),
        ("c34100", "-1"),
        ("d54300fffe", r#""AP_-""#),
        ("d64200ff", r#""AP8=""#),
        ("d74200ff", r#""00ff""#),
        ("d9d9f7a1616101", r#"{"a":1}"#),
    ];
    for (cbor, json) in ok {
        assert_eq!(
            to_json(&cbor.replace(' ', "")).as_deref(),
            Ok(json),
            "{cbor}"
        );
    }
}

#[test]
fn cbor_to_json_errors() {
    let errors = [
        ("f97e00", TranscodeError::NonFinite),
        ("f97c00", TranscodeError::NonFinite),
        ("f9fc00", TranscodeError::NonFinite),
        ("fb7ff8000000000000", TranscodeError::NonFinite),
        ("a10101", TranscodeError::NonTextKey),
        ("a1f500", TranscodeError::NonTextKey),
        ("e0", TranscodeError::SimpleValue(0)),
        ("f3", TranscodeError::SimpleValue(19)),
        ("f8ff", TranscodeError::SimpleValue(255)),
        ("c401", TranscodeError::UnsupportedTag(4)),
        ("d8254100", TranscodeError::UnsupportedTag(37)),
        (
            "c001",
            TranscodeError::BadTagContent {
                tag: 0,
                expected: "a text string",
            },
        ),
        (
            "c16161",
            TranscodeError::BadTagContent {
                tag: 1,
                expected: "a number",
            },
        ),
        ("c1f97e00", TranscodeError::NonFinite),
        (
            "c201",
            TranscodeError::BadTagContent {
                tag: 2,
                expected: "a byte string",
            },
        ),
        (
            "d56161",
            TranscodeError::BadTagContent {
                tag: 21,
                expected: "a byte string",
            },
        ),
    ];
    for (cbor, expected) in errors {
        assert_eq!(to_json(cbor), Err(expected), "{cbor}");
    }
    let malformed = [
        ("", CborError::Truncated),
        ("0100", CborError::Trailing),
        (
            "1c",
            CborError::Malformed("reserved additional information"),
        ),
        (
            "1f",
            CborError::Malformed("indefinite length on an integer or tag"),
        ),
        (
            "df01",
            CborError::Malformed("indefinite length on an integer or tag"),
        ),
        (
            "f800",
            CborError::Malformed("two-byte simple value below 32"),
        ),
        (
            "ff",
            CborError::Malformed("break outside an indefinite-length item"),
        ),
        (
            "5f6161ff",
            CborError::Malformed("bad chunk in an indefinite-length string"),
        ),
        (
            "7f7f6161ffff",
            CborError::Malformed("bad chunk in an indefinite-length string"),
        ),
        ("62c3", CborError::Truncated),
        ("5bffffffffffffffff00", CborError::Truncated),
        ("9bffffffffffffffff", CborError::Truncated),
        ("61ff", CborError::InvalidUtf8),
        ("7f61c361a9ff", CborError::InvalidUtf8),
        ("a2616101616102", CborError::DuplicateKey),
        ("a2f93c00 01 fb3ff0000000000000 02", CborError::DuplicateKey),
        ("a201011801 02", CborError::DuplicateKey),
    ];
    for (cbor, expected) in malformed {
        assert_eq!(
            to_json(&cbor.replace(' ', "")),
            Err(TranscodeError::Cbor(expected)),
            "{cbor}"
        );
    }
    // 1 and 1.0 are different keys; both are non-text, so still refused.
    assert_eq!(
        to_json("a201 01 f93c00 02".replace(' ', "").as_str()),
        Err(TranscodeError::NonTextKey)
    );
}

/// Maps past the few-keys scan (16 keys) still refuse a duplicate, in
/// whichever part of the map it falls, and still accept distinct keys.
#[test]
fn duplicate_keys_in_large_maps() {
    for len in [16usize, 17, 40] {
        // Text keys "k00", "k01", …, each mapped to null.
        let entry = |i: usize| format!("63{}f6", tohex(format!("k{i:02}").as_bytes()));
        let distinct: String = (0..len).map(entry).collect();
        let map = format!("b8{len:02x}{distinct}");
        let json = to_json(&map).expect("distinct keys");
        assert_eq!(
            serde_json::from_str::<Value>(&json)
                .expect("JSON")
                .as_object()
                .map(|m| m.len()),
            Some(len)
        );
        for (dup_of, at) in [(0, len - 1), (len - 2, len - 1), (3, 1)] {
            let mut entries: Vec<String> = (0..len).map(entry).collect();
            entries[at] = format!("63{}f6", tohex(format!("k{dup_of:02}").as_bytes()));
            let map = format!("b8{len:02x}{}", entries.concat());
            assert_eq!(
                to_json(&map),
                Err(TranscodeError::Cbor(CborError::DuplicateKey)),
                "{len} keys, key {at} repeats key {dup_of}"
            );
        }
    }
}

#[test]
fn nesting_limits() {
    let arrays = |n: usize| format!("{}80", "81".repeat(n - 1));
    assert!(to_json(&arrays(MAX_PAYLOAD_DEPTH)).is_ok());
    assert_eq!(
        to_json(&arrays(MAX_PAYLOAD_DEPTH + 1)),
        Err(TranscodeError::Cbor(CborError::TooDeep(MAX_PAYLOAD_DEPTH)))
    );
    // Maps count as arrays do: {"a": {"a": … {}}}.
    let maps = |n: usize| format!("{}a0", "a16161".repeat(n - 1));
    assert_eq!(
        to_json(&maps(MAX_PAYLOAD_DEPTH)).map(|j| j.matches('{').count()),
        Ok(MAX_PAYLOAD_DEPTH)
    );
    assert_eq!(
        to_json(&maps(MAX_PAYLOAD_DEPTH + 1)),
        Err(TranscodeError::Cbor(CborError::TooDeep(MAX_PAYLOAD_DEPTH)))
    );
    assert!(
        to_json(&maps(100_000)).is_err(),
        "deep maps must not overflow the stack"
    );
    let tags = |n: usize| format!("{}00", "d9d9f7".repeat(n));
    assert!(to_json(&tags(MAX_PAYLOAD_DEPTH)).is_ok());
    assert!(
        to_json(&tags(100_000)).is_err(),
        "deep tags must not overflow the stack"
    );
    let json = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert!(to_cbor(&json(MAX_PAYLOAD_DEPTH)).is_ok());
    assert_eq!(
        to_cbor(&json(MAX_PAYLOAD_DEPTH + 1)),
        Err(TranscodeError::TooDeep)
    );
}

#[test]
fn bignum_cap() {
    let at_cap = format!("1{}", "0".repeat(2465));
    assert!(to_cbor(&at_cap).is_ok());
    let over = "9".repeat(2467);
    assert_eq!(to_cbor(&over), Err(TranscodeError::BignumTooLarge));
    let max = format!("c25904 00{}", "ff".repeat(1024)).replace(' ', "");
    let digits = to_json(&max).expect("at the cap");
    assert_eq!(to_cbor(&digits).as_deref(), Ok(max.as_str()));
    let over = format!("c25904 01{}", "ff".repeat(1025)).replace(' ', "");
    assert_eq!(to_json(&over), Err(TranscodeError::BignumTooLarge));
}

#[test]
fn float_text() {
    let cases = [
        (1.0, "1.0"),
        (-0.0, "-0.0"),
        (1e300, "1e+300"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000.0"),
        (123.456, "123.456"),
        (1.5e-6, "0.0000015"),
        (1e-7, "1e-7"),
        (-2.5e-10, "-2.5e-10"),
        (5e-324, "5e-324"),
        (f64::MAX, "1.7976931348623157e+308"),
    ];
    for (value, text) in cases {
        assert_eq!(format_f64(value), text);
        assert_eq!(text.parse::<f64>(), Ok(value));
    }
    assert_eq!(base64(b"", true), "");
    assert_eq!(base64(b"f", false), "Zg==");
    assert_eq!(base64(b"fo", false), "Zm8=");
    assert_eq!(base64(b"foobar", true), "Zm9vYmFy");
}
