//! Property tests: every message survives encode → decode in both
//! encodings.

use super::*;

fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec(("[a-z]{0,3}", inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

fn message(payload: impl Strategy<Value = Payload> + Clone) -> impl Strategy<Value = Message> {
    let cid = any::<Cid>().prop_map(WireId::Cid);
    let text = "\\PC{0,12}";
    prop_oneof![
        (cid.clone(), text, proptest::option::of(payload.clone())).prop_map(
            |(id, method, params)| Message::Request {
                id,
                method: method.into(),
                params
            }
        ),
        (cid.clone(), proptest::option::of(payload.clone())).prop_map(|(id, r)| {
            Message::Response {
                id,
                result: r.map_or(Outcome::Void, Outcome::Value),
            }
        }),
        (
            cid,
            any::<i64>(),
            text,
            proptest::option::of(payload.clone())
        )
            .prop_map(|(id, code, message, data)| {
                Message::Error {
                    id: Some(id),
                    error: ErrorObject {
                        code,
                        message,
                        data,
                    },
                }
            }),
        (text, proptest::option::of(payload)).prop_map(|(method, params)| Message::Notification {
            method: method.into(),
            params
        }),
    ]
}

fn json_payload() -> impl Strategy<Value = Payload> + Clone {
    json_value().prop_map(|v| json(&v.to_string()))
}

fn cbor_payload() -> impl Strategy<Value = Payload> + Clone {
    json_value().prop_map(|v| {
        let raw = serde_json::value::to_raw_value(&v).expect("serializable");
        Payload::Cbor(json_to_cbor(&raw).expect("finite values transcode").into())
    })
}

proptest! {
    #[test]
    fn json_envelopes_round_trip(msg in message(json_payload())) {
        let bytes = encode_envelope(&msg, Encoding::Json).expect("encodes");
        prop_assert_eq!(Encoding::detect(&bytes), Encoding::Json);
        prop_assert_eq!(decode_envelope(&bytes, Encoding::Json), Ok(msg));
    }

    #[test]
    fn cbor_envelopes_round_trip(msg in message(cbor_payload())) {
        let bytes = encode_envelope(&msg, Encoding::Cbor).expect("encodes");
        prop_assert_eq!(Encoding::detect(&bytes), Encoding::Cbor);
        // An independent decoder agrees the envelope is one CBOR map.
        let value: ciborium::Value = ciborium::from_reader(&bytes[..]).expect("ciborium reads it");
        prop_assert!(value.is_map());
        prop_assert_eq!(decode_envelope(&bytes, Encoding::Cbor), Ok(msg));
    }

    #[test]
    fn cross_encoding_is_stable(msg in message(json_payload())) {
        // JSON → CBOR → JSON → CBOR gives the same CBOR bytes.
        let cbor1 = encode_envelope(&msg, Encoding::Cbor).expect("transcodes");
        let back = decode_envelope(&cbor1, Encoding::Cbor).expect("decodes");
        let json2 = encode_envelope(&back, Encoding::Json).expect("transcodes");
        let again = decode_envelope(&json2, Encoding::Json).expect("decodes");
        prop_assert_eq!(encode_envelope(&again, Encoding::Cbor).expect("transcodes"), cbor1);
    }

    #[test]
    fn decode_never_panics(bytes in vec(any::<u8>(), 0..200)) {
        let _ = decode_envelope(&bytes, Encoding::Json);
        let _ = decode_envelope(&bytes, Encoding::Cbor);
    }
}
