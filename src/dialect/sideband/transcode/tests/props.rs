//! Property tests: JSON → CBOR → JSON keeps the value, CBOR output is
//! standard, no input panics.

use super::*;

fn json_value(floats: bool) -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::String),
    ];
    let float = any::<f64>()
        .prop_filter("finite", |f| f.is_finite())
        .prop_map(Value::from);
    let leaf = if floats {
        prop_oneof![4 => scalar, 1 => float].boxed()
    } else {
        scalar.boxed()
    };
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec(("\\PC{0,4}", inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn json_cbor_json_keeps_the_value(value in json_value(false)) {
        let raw = serde_json::value::to_raw_value(&value).expect("serializable");
        let cbor = json_to_cbor(&raw).expect("transcodes");
        let back: Value = serde_json::from_str(cbor_to_json(&cbor).expect("transcodes").get()).expect("JSON");
        prop_assert_eq!(back, value);
    }

    #[test]
    fn cbor_output_is_standard_and_stable(value in json_value(true)) {
        let raw = serde_json::value::to_raw_value(&value).expect("serializable");
        let cbor = json_to_cbor(&raw).expect("transcodes");
        // An independent decoder reads the same value.
        let oracle: ciborium::Value = ciborium::from_reader(&cbor[..]).expect("ciborium reads it");
        prop_assert_eq!(oracle, ciborium::Value::serialized(&value).expect("serializable"));
        // CBOR → JSON → CBOR is byte-stable (floats included).
        let again = json_to_cbor(&cbor_to_json(&cbor).expect("transcodes")).expect("transcodes");
        prop_assert_eq!(again, cbor);
    }

    #[test]
    fn cbor_to_json_never_panics(bytes in vec(any::<u8>(), 0..200)) {
        let _ = cbor_to_json(&bytes);
    }
}
