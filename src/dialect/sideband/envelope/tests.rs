//! Golden tests for the RPC envelope in JSON (§6) and CBOR (§7), using the
//! data of the §9 vectors P8–P12 and C1–C4, plus round-trip properties.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::dialect::sideband::testutil::{tohex, unhex, CID_HEX};
use crate::dialect::sideband::transcode::{json_to_cbor, TranscodeError};

mod invalid;
mod oracle;
mod props;
mod slices;

const CID: Cid = [
    0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
];

fn json(text: &str) -> Payload {
    Payload::json(text).expect("valid JSON")
}

fn cbor(hex: &str) -> Payload {
    Payload::Cbor(unhex(hex).into())
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
        method: "echo".into(),
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
        method: "user.joined".into(),
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

/// Method names up to 24 bytes decode without a heap allocation, from
/// either encoding.
#[test]
fn short_method_names_are_decoded_inline() {
    for (text, hex, _, _) in vectors() {
        for decoded in [decode_json(&text), decode_cbor(hex)] {
            match decoded.expect("a vector decodes") {
                Message::Request { method, .. } | Message::Notification { method, .. } => {
                    assert!(!method.is_heap_allocated(), "{method}");
                }
                Message::Response { .. } | Message::Error { .. } => {}
            }
        }
    }
    let long = "m".repeat(30);
    let text = format!(r#"{{"t":"N","e":"{long}"}}"#);
    match decode_json(&text) {
        Ok(Message::Notification { method, .. }) => assert_eq!(method, long),
        other => panic!("{other:?}"),
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
        method: "x".into(),
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
            method: "a".into(),
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
fn encode_errors() {
    let json_id = Message::Request {
        id: WireId::number(7),
        method: "m".into(),
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
        method: "m".into(),
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
        method: "e".into(),
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
