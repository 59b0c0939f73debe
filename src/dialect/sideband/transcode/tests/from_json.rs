//! JSON → CBOR: §7's rows, duplicate keys, and the walk's own cases
//! (container heads past one byte, whitespace, escaped strings).

use super::*;

#[test]
fn json_to_cbor_rows() {
    let ok = [
        ("0", "00"),
        ("-0", "00"),
        ("24", "1818"),
        ("-1", "20"),
        ("18446744073709551615", "1bffffffffffffffff"),
        ("-18446744073709551616", "3bffffffffffffffff"),
        ("18446744073709551616", "c249010000000000000000"),
        ("-18446744073709551617", "c349010000000000000000"),
        ("1.0", "fb3ff0000000000000"),
        ("1e2", "fb4059000000000000"),
        ("-0.0", "fb8000000000000000"),
        ("1E-400", "fb0000000000000000"),
        ("0.1", "fb3fb999999999999a"),
        (r#""a\u00e9\"""#, "6461c3a922"),
        (r#""AP_-""#, "6441505f2d"),
        ("[true,false,null]", "83f5f4f6"),
        (r#"{"b":1,"a":2}"#, "a2616201616102"),
        // Duplicate keys: the last value wins, at the first key's position.
        (r#"{"a":1,"b":2,"a":3}"#, "a2616103616202"),
        (" [ 1 , { } ] ", "8201a0"),
    ];
    for (json, cbor) in ok {
        assert_eq!(to_cbor(json).as_deref(), Ok(cbor), "{json}");
    }
    assert_eq!(
        to_cbor("1e400"),
        Err(TranscodeError::FloatOverflow("1e400".to_owned()))
    );
    assert_eq!(
        to_cbor("[-1.8e308]"),
        Err(TranscodeError::FloatOverflow("-1.8e308".to_owned()))
    );
    assert!(matches!(
        to_cbor(r#""\ud800""#),
        Err(TranscodeError::Json(_))
    ));
}

/// Objects past the few-keys scan (16 keys) keep the same rule: a
/// repeated key keeps its first place and takes its last value.
#[test]
#[allow(clippy::unwrap_used)]
fn json_duplicate_keys_in_large_objects() {
    for len in [15, 16, 17, 18, 40] {
        // Keys k00..k{len-1}, then k03 again (value 100) and the last key
        // again (value 101).
        let mut members: Vec<String> = (0..len).map(|i| format!("\"k{i:02}\":{i}")).collect();
        members.push("\"k03\":100".to_owned());
        members.push(format!("\"k{:02}\":101", len - 1));
        let json = format!("{{{}}}", members.join(","));
        let cbor = unhex(&to_cbor(&json).unwrap());
        let map: Vec<(String, u64)> = ciborium::from_reader(&cbor[..])
            .map(|v: ciborium::Value| {
                v.into_map()
                    .unwrap()
                    .into_iter()
                    .map(|(k, v)| {
                        let k = k.into_text().unwrap();
                        let v = u64::try_from(v.into_integer().unwrap()).unwrap();
                        (k, v)
                    })
                    .collect()
            })
            .unwrap();
        let want: Vec<(String, u64)> = (0..len)
            .map(|i| {
                let v = match i {
                    3 => 100,
                    i if i == len - 1 => 101,
                    i => i,
                };
                (format!("k{i:02}"), v)
            })
            .collect();
        assert_eq!(map, want, "{len} keys");
    }
}

/// Every way a repeated key can appear: three times, nested, spelled
/// with an escape, in objects past the few-keys scan.
#[test]
#[allow(clippy::unwrap_used)]
fn repeated_keys_keep_the_first_place_and_the_last_value() {
    let json = r#"{"a":1,"b":[1,{"a":2,"a":3}],"a":{"x":1},"\u0061":4,"c":5}"#;
    let cbor = json_to_cbor(&RawValue::from_string(json.into()).unwrap()).unwrap();
    assert_eq!(
        cbor_to_json(&cbor).unwrap().get(),
        r#"{"a":4,"b":[1,{"a":3}],"c":5}"#
    );
    // 40 keys, of which k05 three times and k07 twice.
    let mut members: Vec<String> = (0..40).map(|i| format!("\"k{i:02}\":{i}")).collect();
    members.insert(20, "\"k05\":500".into());
    members.push("\"k07\":700".into());
    members.push("\"k05\":501".into());
    let json = format!("{{{}}}", members.join(","));
    let cbor = json_to_cbor(&RawValue::from_string(json).unwrap()).unwrap();
    let back: Value = serde_json::from_str(cbor_to_json(&cbor).unwrap().get()).unwrap();
    let want: Value = (0..40)
        .map(|i| {
            let v = match i {
                5 => 501,
                7 => 700,
                i => i,
            };
            (format!("k{i:02}"), Value::from(v))
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    assert_eq!(back, want);
    assert_eq!(cbor[0], 0xb8, "a map head of two bytes");
    assert_eq!(cbor[1], 40);
}

/// Arrays and objects around the head-size limits (23/24 items, 255/256),
/// pretty-printed, with escaped strings: what an independent encoder
/// (ciborium) writes for the same value.
#[test]
#[allow(clippy::unwrap_used)]
fn long_containers_and_pretty_text_match_an_independent_encoder() {
    for len in [0, 1, 23, 24, 255, 256, 300] {
        let array: Vec<Value> = (0..len).map(|i| Value::from(i * 1000)).collect();
        let object: serde_json::Map<String, Value> = (0..len)
            .map(|i| (format!("k\"{i}\n"), Value::from(format!("v\t{i}é"))))
            .collect();
        let value = serde_json::json!({ "array": array, "object": object, "nested": [[array]] });
        for text in [
            value.to_string(),
            serde_json::to_string_pretty(&value).unwrap(),
        ] {
            let cbor = json_to_cbor(&RawValue::from_string(text).unwrap()).unwrap();
            let oracle: ciborium::Value = ciborium::from_reader(&cbor[..]).unwrap();
            assert_eq!(
                oracle,
                ciborium::Value::serialized(&value).unwrap(),
                "{len}"
            );
            let mut standard = Vec::new();
            ciborium::into_writer(&value, &mut standard).unwrap();
            assert_eq!(cbor, standard, "{len}: the same bytes");
        }
    }
}
