//! Envelopes that break §6/§7: decode errors (and the cid they still
//! expose), the CBOR rules, the replies to invalid envelopes, the nesting
//! limit.

use super::*;
use crate::dialect::sideband::Frame;

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
        format!("a36174f7617461526363696450{CID_HEX}"), // duplicate key, the first undefined
        format!("a4617801617802617461526363696450{CID_HEX}"), // duplicate unknown key
        format!("a3617461526363696450{CID_HEX}01f6"),   // non-text envelope key
        format!("a3617461526363696450{CID_HEX}6170a2616101616102"), // duplicate key in a payload
        "80".to_owned(),                                // not a map
        "a1617462ff".to_owned(),                        // invalid UTF-8 in a text string
        "a2".to_owned(),                                // truncated
        "bf6174".to_owned(),                            // unterminated indefinite map
    ];
    for hex in malformed {
        assert!(
            matches!(decode_cbor(&hex), Err(EnvelopeError::Malformed(_))),
            "{hex}"
        );
    }
    // Without their duplicates, the two envelopes above are fine.
    for hex in [
        format!("a2617461526363696450{CID_HEX}"),
        format!("a3617802617461526363696450{CID_HEX}"),
    ] {
        assert!(decode_cbor(&hex).is_ok(), "{hex}");
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
