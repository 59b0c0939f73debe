//! Golden tests for the RPC envelope in JSON (§6) and CBOR (§7), using the
//! data of the §9 vectors P8–P12 and C1–C4, plus round-trip properties.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::dialect::sideband::testutil::{tohex, unhex, CID_HEX};
use crate::dialect::sideband::transcode::json_to_cbor;

const CID: Cid = [
    0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
];

fn json(text: &str) -> Payload {
    Payload::json(text).expect("valid JSON")
}

fn cbor(hex: &str) -> Payload {
    Payload::Cbor(unhex(hex))
}

fn decode_json(text: &str) -> Result<Message, EnvelopeError> {
    decode_envelope(text.as_bytes(), Encoding::Json)
}

fn decode_cbor(hex: &str) -> Result<Message, EnvelopeError> {
    decode_envelope(&unhex(hex), Encoding::Cbor)
}

/// (JSON v1 text, CBOR v2 hex, message with JSON payloads, with CBOR payloads).
fn vectors() -> Vec<(String, &'static str, Message, Message)> {
    let request = |p| Message::Request {
        id: WireId::Cid(CID),
        method: "echo".to_owned(),
        params: Some(p),
    };
    let response = |r| Message::Response {
        id: WireId::Cid(CID),
        result: Outcome::Value(r),
    };
    let error = Message::Error {
        id: Some(WireId::Cid(CID)),
        error: ErrorObject {
            code: 1101,
            message: "Method not found: echo".to_owned(),
            data: None,
        },
    };
    let note = |d| Message::Notification {
        method: "user.joined".to_owned(),
        params: Some(d),
    };
    vec![
        (
            format!(r#"{{"t":"r","m":"echo","cid":"{CID_HEX}","p":{{"text":"hi"}}}}"#),
            "a461746172616d646563686f6363696450202122232425262728292a2b2c2d2e2f6170a16474657874626869",
            request(json(r#"{"text":"hi"}"#)),
            request(cbor("a16474657874626869")),
        ),
        (
            format!(r#"{{"t":"R","cid":"{CID_HEX}","result":{{"text":"hi"}}}}"#),
            "a3617461526363696450202122232425262728292a2b2c2d2e2f66726573756c74a16474657874626869",
            response(json(r#"{"text":"hi"}"#)),
            response(cbor("a16474657874626869")),
        ),
        (
            format!(r#"{{"t":"E","cid":"{CID_HEX}","code":1101,"message":"Method not found: echo"}}"#),
            "a4617461456363696450202122232425262728292a2b2c2d2e2f64636f646519044d676d657373616765764d6574686f64206e6f7420666f756e643a206563686f",
            error.clone(),
            error,
        ),
        (
            r#"{"t":"N","e":"user.joined","d":{"id":1}}"#.to_owned(),
            "a36174614e61656b757365722e6a6f696e65646164a162696401",
            note(json(r#"{"id":1}"#)),
            note(cbor("a162696401")),
        ),
    ]
}

#[test]
fn p8_to_p12_json_golden() {
    for (text, _, msg, _) in vectors() {
        assert_eq!(decode_json(&text), Ok(msg.clone()), "{text}");
        assert_eq!(
            encode_envelope(&msg, Encoding::Json).map(String::from_utf8),
            Ok(Ok(text))
        );
    }
}

#[test]
fn c1_to_c4_cbor_golden() {
    for (_, hex, _, msg) in vectors() {
        assert_eq!(decode_cbor(hex), Ok(msg.clone()), "{hex}");
        assert_eq!(
            encode_envelope(&msg, Encoding::Cbor).map(|b| tohex(&b)),
            Ok(hex.to_owned())
        );
    }
}

/// P8 ⇄ C1 etc.: payloads transcode to exactly the other vector.
#[test]
fn cross_encoding_matches_the_other_vector() {
    for (text, hex, json_msg, cbor_msg) in vectors() {
        let as_cbor = encode_envelope(&json_msg, Encoding::Cbor).expect("transcodes");
        assert_eq!(tohex(&as_cbor), hex);
        let as_json = encode_envelope(&cbor_msg, Encoding::Json).expect("transcodes");
        assert_eq!(String::from_utf8(as_json).expect("utf-8"), text);
    }
}

#[test]
fn void_null_and_absent_members() {
    let void = Message::Response {
        id: WireId::Cid(CID),
        result: Outcome::Void,
    };
    let null = Message::Response {
        id: WireId::Cid(CID),
        result: Outcome::Value(json("null")),
    };
    assert_eq!(
        decode_json(&format!(r#"{{"t":"R","cid":"{CID_HEX}"}}"#)),
        Ok(void.clone())
    );
    assert_eq!(
        decode_json(&format!(r#"{{"t":"R","cid":"{CID_HEX}","result":null}}"#)),
        Ok(null.clone())
    );
    let void_cbor = format!("a2617461526363696450{CID_HEX}");
    assert_eq!(
        encode_envelope(&void, Encoding::Cbor).map(|b| tohex(&b)),
        Ok(void_cbor.clone())
    );
    assert_eq!(decode_cbor(&void_cbor), Ok(void.clone()));
    // `undefined` as a member's value means absent; `null` is present.
    let undefined = format!("a3617461526363696450{CID_HEX}66726573756c74f7");
    assert_eq!(decode_cbor(&undefined), Ok(void));
    let null_cbor = format!("a3617461526363696450{CID_HEX}66726573756c74f6");
    assert_eq!(
        decode_cbor(&null_cbor),
        Ok(Message::Response {
            id: WireId::Cid(CID),
            result: Outcome::Value(cbor("f6"))
        })
    );
    assert_eq!(
        encode_envelope(&null, Encoding::Cbor).map(|b| tohex(&b)),
        Ok(null_cbor)
    );
    // `N` without `d`; a cid on `N` is ignored, even a bad one.
    let bare = Message::Notification {
        method: "x".to_owned(),
        params: None,
    };
    assert_eq!(
        decode_json(r#"{"t":"N","e":"x","cid":"NOT-HEX","extra":[1]}"#),
        Ok(bare.clone())
    );
    assert_eq!(
        encode_envelope(&bare, Encoding::Json).map(String::from_utf8),
        Ok(Ok(r#"{"t":"N","e":"x"}"#.to_owned()))
    );
    assert_eq!(
        decode_cbor("a26174614e61656161"),
        Ok(Message::Notification {
            method: "a".to_owned(),
            params: None
        })
    );
}

#[test]
fn error_data_and_codes() {
    let with_data =
        format!(r#"{{"t":"E","cid":"{CID_HEX}","code":-5,"message":"m","data":[1, 2]}}"#);
    let Ok(Message::Error { error, .. }) = decode_json(&with_data) else {
        panic!("decodes")
    };
    assert_eq!((error.code, error.data), (-5, Some(json("[1, 2]"))));
    // An integral float code is accepted, as §7 allows for CBOR.
    let float = format!(r#"{{"t":"E","cid":"{CID_HEX}","code":1101.0,"message":"m"}}"#);
    assert!(matches!(
        decode_json(&float),
        Ok(Message::Error {
            error: ErrorObject { code: 1101, .. },
            ..
        })
    ));
    let cbor_float =
        format!("a4617461456363696450{CID_HEX}64636f6465fb4091340000000000676d657373616765616d");
    assert!(matches!(
        decode_cbor(&cbor_float),
        Ok(Message::Error {
            error: ErrorObject { code: 1101, .. },
            ..
        })
    ));
    let cbor_nint = format!(
        "a4617461456363696450{CID_HEX}64636f6465{}676d657373616765616d",
        "3b7fffffffffffffff"
    );
    assert!(matches!(
        decode_cbor(&cbor_nint),
        Ok(Message::Error {
            error: ErrorObject { code: i64::MIN, .. },
            ..
        })
    ));
}

#[test]
fn json_decode_errors_expose_the_cid_when_readable() {
    let c = Some(CID);
    let cases: Vec<(String, EnvelopeError)> = vec![
        ("[1]".to_owned(), EnvelopeError::Malformed(String::new())),
        ("{".to_owned(), EnvelopeError::Malformed(String::new())),
        (
            r#"{"t":"r","t":"r"}"#.to_owned(),
            EnvelopeError::Malformed(String::new()),
        ),
        (
            format!(r#"{{"cid":"{CID_HEX}"}}"#),
            EnvelopeError::Missing {
                member: Member::T,
                cid: c,
            },
        ),
        (
            format!(r#"{{"t":1,"cid":"{CID_HEX}"}}"#),
            EnvelopeError::WrongType {
                member: Member::T,
                cid: c,
            },
        ),
        (
            format!(r#"{{"t":"x","cid":"{CID_HEX}"}}"#),
            EnvelopeError::UnknownType {
                t: "x".to_owned(),
                cid: c,
            },
        ),
        (
            format!(r#"{{"t":"r","cid":"{CID_HEX}"}}"#),
            EnvelopeError::Missing {
                member: Member::M,
                cid: c,
            },
        ),
        (
            format!(r#"{{"t":"r","m":7,"cid":"{CID_HEX}"}}"#),
            EnvelopeError::WrongType {
                member: Member::M,
                cid: c,
            },
        ),
        (
            r#"{"t":"r","m":"x"}"#.to_owned(),
            EnvelopeError::Missing {
                member: Member::Cid,
                cid: None,
            },
        ),
        (
            format!(r#"{{"t":"R","cid":"{}"}}"#, CID_HEX.to_uppercase()),
            EnvelopeError::BadCid,
        ),
        (
            r#"{"t":"R","cid":"2021"}"#.to_owned(),
            EnvelopeError::BadCid,
        ),
        (r#"{"t":"R","cid":7}"#.to_owned(), EnvelopeError::BadCid),
        (
            format!(r#"{{"t":"E","cid":"{CID_HEX}","message":"m"}}"#),
            EnvelopeError::Missing {
                member: Member::Code,
                cid: c,
            },
        ),
        (
            format!(r#"{{"t":"E","cid":"{CID_HEX}","code":"1","message":"m"}}"#),
            EnvelopeError::WrongType {
                member: Member::Code,
                cid: c,
            },
        ),
        (
            format!(r#"{{"t":"E","cid":"{CID_HEX}","code":1.5,"message":"m"}}"#),
            EnvelopeError::BadCode {
                raw: "1.5".to_owned(),
                cid: CID,
            },
        ),
        (
            format!(r#"{{"t":"E","cid":"{CID_HEX}","code":9223372036854775808,"message":"m"}}"#),
            EnvelopeError::BadCode {
                raw: "9223372036854775808".to_owned(),
                cid: CID,
            },
        ),
        (
            format!(r#"{{"t":"E","cid":"{CID_HEX}","code":1}}"#),
            EnvelopeError::Missing {
                member: Member::Message,
                cid: c,
            },
        ),
        (
            r#"{"t":"N"}"#.to_owned(),
            EnvelopeError::Missing {
                member: Member::E,
                cid: None,
            },
        ),
        (
            format!(r#"{{"t":"N","e":null,"cid":"{CID_HEX}"}}"#),
            EnvelopeError::WrongType {
                member: Member::E,
                cid: None,
            },
        ),
    ];
    for (text, expected) in cases {
        let e = decode_json(&text).expect_err(&text);
        match expected {
            EnvelopeError::Malformed(_) => {
                assert!(matches!(e, EnvelopeError::Malformed(_)), "{text}: {e:?}")
            }
            expected => assert_eq!(e, expected, "{text}"),
        }
        assert!(e.is_decode() && e.can_continue());
        assert_eq!(e.code(), 1100);
    }
    assert!(matches!(
        decode_envelope(b"{\"t\":\"\xff\"}", Encoding::Json),
        Err(EnvelopeError::Malformed(_))
    ));
}

#[test]
fn cbor_decode_rules() {
    let c1 =
        "a461746172616d646563686f6363696450202122232425262728292a2b2c2d2e2f6170a16474657874626869";
    let malformed = [
        format!("{c1}00"),                                          // trailing bytes
        "a2617461526174615280".to_owned(),                          // duplicate envelope key
        format!("a3617461526363696450{CID_HEX}01f6"),               // non-text envelope key
        format!("a3617461526363696450{CID_HEX}6170a2616101616102"), // duplicate key in a payload
        "80".to_owned(),                                            // not a map
        "a1617462ff".to_owned(), // invalid UTF-8 in a text string
        "a2".to_owned(),         // truncated
        "bf6174".to_owned(),     // unterminated indefinite map
    ];
    for hex in malformed {
        assert!(
            matches!(decode_cbor(&hex), Err(EnvelopeError::Malformed(_))),
            "{hex}"
        );
    }
    // Equal keys in different encodings are duplicates too.
    assert!(matches!(
        decode_cbor("a2617461527f6174ff6152"),
        Err(EnvelopeError::Malformed(_))
    ));
    // Indefinite map, chunked strings and a chunked cid are accepted.
    let chunked = "bf7f6174ff6152636369645f4820212223242526274828292a2b2c2d2e2fffff";
    assert_eq!(
        decode_cbor(chunked),
        Ok(Message::Response {
            id: WireId::Cid(CID),
            result: Outcome::Void
        })
    );
    // Typed members.
    let c = Some(CID);
    assert_eq!(
        decode_cbor(&format!("a2617461526363696450{}", &CID_HEX[2..])).map_err(|e| e.cid()),
        Err(None)
    );
    assert_eq!(
        decode_cbor(&format!(
            "a261746152636369647820{}",
            tohex(CID_HEX.as_bytes())
        )),
        Err(EnvelopeError::BadCid)
    );
    assert_eq!(
        decode_cbor(&format!("a26174016363696450{CID_HEX}")),
        Err(EnvelopeError::WrongType {
            member: Member::T,
            cid: c
        })
    );
    assert_eq!(
        decode_cbor(&format!("a3617461726363696450{CID_HEX}616d40")),
        Err(EnvelopeError::WrongType {
            member: Member::M,
            cid: c
        })
    );
    let code = |item: &str| {
        decode_cbor(&format!(
            "a4617461456363696450{CID_HEX}64636f6465{item}676d657373616765616d"
        ))
    };
    assert_eq!(
        code("6131"),
        Err(EnvelopeError::WrongType {
            member: Member::Code,
            cid: c
        })
    );
    assert_eq!(
        code("f93e00"),
        Err(EnvelopeError::BadCode {
            raw: "1.5".to_owned(),
            cid: CID
        })
    );
    assert_eq!(
        code("1bffffffffffffffff"),
        Err(EnvelopeError::BadCode {
            raw: "18446744073709551615".to_owned(),
            cid: CID
        })
    );
    assert!(matches!(
        code("f93c00"),
        Ok(Message::Error {
            error: ErrorObject { code: 1, .. },
            ..
        })
    ));
}

#[test]
fn replies_to_invalid_envelopes() {
    let frame_id = [9; 16];
    let with_cid = decode_json(&format!(r#"{{"t":"r","cid":"{CID_HEX}"}}"#)).expect_err("no m");
    let Some(EnvelopeReply::Envelope(Message::Error { id, error })) = with_cid.reply(frame_id)
    else {
        panic!("E reply expected");
    };
    assert_eq!(
        (id, error.code, error.message.as_str()),
        (Some(WireId::Cid(CID)), 1100, "Invalid envelope")
    );
    assert_eq!(
        error.data.as_ref().and_then(Payload::as_json),
        Some(r#""Invalid envelope: missing m""#)
    );
    let without = decode_json("nope").expect_err("not JSON");
    assert_eq!(
        without.reply(frame_id),
        Some(EnvelopeReply::Frame(Frame::error(
            frame_id,
            1002,
            "Malformed RPC envelope"
        )))
    );
    assert_eq!(EnvelopeError::NoId.reply(frame_id), None);
}

#[test]
fn cbor_nesting_limit_is_128_including_the_envelope() {
    let nested = |depth: usize| {
        format!(
            "a3617461526363696450{CID_HEX}66726573756c74{}{}",
            "81".repeat(depth - 1),
            "80"
        )
    };
    assert!(decode_cbor(&nested(127)).is_ok());
    assert!(matches!(
        decode_cbor(&nested(128)),
        Err(EnvelopeError::Malformed(_))
    ));
}

#[test]
fn encode_errors() {
    let json_id = Message::Request {
        id: WireId::number(7),
        method: "m".to_owned(),
        params: None,
    };
    let no_id = Message::Error {
        id: None,
        error: ErrorObject {
            code: 1,
            message: "m".to_owned(),
            data: None,
        },
    };
    for enc in [Encoding::Json, Encoding::Cbor] {
        assert_eq!(encode_envelope(&json_id, enc), Err(EnvelopeError::NotCid));
        assert_eq!(encode_envelope(&no_id, enc), Err(EnvelopeError::NoId));
    }
    let overflow = Message::Request {
        id: WireId::Cid(CID),
        method: "m".to_owned(),
        params: Some(json("[1e400]")),
    };
    let e = encode_envelope(&overflow, Encoding::Cbor).expect_err("overflow");
    assert!(
        matches!(
            e,
            EnvelopeError::Transcode {
                member: Member::P,
                ..
            }
        ) && !e.is_decode()
    );
    let nan = Message::Response {
        id: WireId::Cid(CID),
        result: Outcome::Value(cbor("f97e00")),
    };
    assert!(matches!(
        encode_envelope(&nan, Encoding::Json),
        Err(EnvelopeError::Transcode {
            member: Member::Result,
            source: TranscodeError::NonFinite
        })
    ));
    let broken = Message::Notification {
        method: "e".to_owned(),
        params: Some(cbor("a1")),
    };
    assert!(matches!(
        encode_envelope(&broken, Encoding::Cbor),
        Err(EnvelopeError::Transcode {
            member: Member::D,
            source: TranscodeError::Cbor(_)
        })
    ));
}

#[test]
fn detection_negotiation_and_subjects() {
    assert_eq!(Encoding::detect(&unhex("a0")), Encoding::Cbor);
    assert_eq!(Encoding::detect(&unhex("bf")), Encoding::Cbor);
    assert_eq!(Encoding::detect(b"{}"), Encoding::Json);
    assert_eq!(Encoding::detect(&unhex("9f")), Encoding::Json);
    assert_eq!(Encoding::detect(b""), Encoding::Json);
    let hs = |caps: &[&str]| Handshake {
        peer_id: "p".to_owned(),
        caps: caps.iter().map(|c| c.to_string()).collect(),
        metadata: Default::default(),
    };
    let ours = Handshake::local("me".to_owned(), true);
    assert_eq!(
        Encoding::negotiate(&ours, &hs(&["encoding/cbor"])),
        Encoding::Cbor
    );
    assert_eq!(
        Encoding::negotiate(&ours, &hs(&["encoding:cbor"])),
        Encoding::Cbor
    );
    assert_eq!(Encoding::negotiate(&ours, &hs(&[])), Encoding::Json);
    assert_eq!(
        Encoding::negotiate(
            &Handshake::local("me".to_owned(), false),
            &hs(&["encoding/cbor"])
        ),
        Encoding::Json
    );
    let (_, _, request, _) = vectors().remove(0);
    let (_, _, note, _) = vectors().remove(3);
    assert!(
        fits_subject(&request, &Subject::Rpc)
            && fits_subject(&request, &Subject::LegacyRpc("x".to_owned()))
    );
    assert!(!fits_subject(&request, &Subject::Event) && !fits_subject(&note, &Subject::Rpc));
    assert!(
        fits_subject(&note, &Subject::Event) && !fits_subject(&note, &Subject::App(String::new()))
    );
}

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
        (cid.clone(), text, proptest::option::of(payload.clone()))
            .prop_map(|(id, method, params)| Message::Request { id, method, params }),
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
        (text, proptest::option::of(payload))
            .prop_map(|(method, params)| Message::Notification { method, params }),
    ]
}

fn json_payload() -> impl Strategy<Value = Payload> + Clone {
    json_value().prop_map(|v| json(&v.to_string()))
}

fn cbor_payload() -> impl Strategy<Value = Payload> + Clone {
    json_value().prop_map(|v| {
        let raw = serde_json::value::to_raw_value(&v).expect("serializable");
        Payload::Cbor(json_to_cbor(&raw).expect("finite values transcode"))
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
