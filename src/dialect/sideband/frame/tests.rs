//! Golden-byte tests for the SBP frame codec, from sideband.md §2 and the
//! §9 test vectors (hex copied verbatim), plus every decoder error path.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;
use crate::dialect::sideband::subject::{Channel, SubjectError};
use crate::dialect::sideband::testutil::{id, tohex, unhex, CID_HEX};

mod errors;
mod subjects;

const HANDSHAKE_JSON: &str =
    r#"{"protocol":"sideband","version":"1","peerId":"peer-a","caps":[],"metadata":{}}"#;

/// Decodes `hex` (legacy subjects refused), checks it equals `frame`, and
/// checks `frame` encodes back to exactly `hex`.
fn golden(hex: &str, frame: Frame<'_>) {
    let bytes = unhex(hex);
    assert_eq!(decode(&bytes), Ok(frame.clone()), "decode {hex}");
    assert_eq!(tohex(&encode(&frame)), hex, "encode {frame:?}");
    if let (None, Body::Message { subject, data }) = (frame.ts, &frame.body) {
        let mut wrapped = data.to_vec();
        wrap_message(frame.id, subject, &mut wrapped);
        assert_eq!(tohex(&wrapped), hex, "wrap_message {frame:?}");
    }
}

/// An envelope wrapped in place is the frame `encode` writes, on every
/// kind of subject, legacy ones included.
#[test]
fn wrapping_an_envelope_is_encoding_its_frame() {
    let subjects = [
        Subject::Rpc,
        Subject::Event,
        Subject::Stream,
        Subject::App("chat/room-1".into()),
        Subject::LegacyRpc("user.get".into()),
        Subject::LegacyEvent("user.joined".into()),
        Subject::LegacyStream("logs".into()),
    ];
    for subject in subjects {
        for data in [&b""[..], b"{}", &[0xa1; 300]] {
            let mut wrapped = data.to_vec();
            wrap_message(id(0x10), &subject, &mut wrapped);
            let frame = Frame::message(id(0x10), subject.clone(), data.to_vec());
            assert_eq!(wrapped, encode(&frame), "{subject:?}");
        }
    }
}

fn message(id_base: u8, subject: Subject, data: &str) -> Frame<'static> {
    Frame::message(id(id_base), subject, data.as_bytes().to_vec())
}

fn err(hex: &str) -> FrameError {
    match decode(&unhex(hex)) {
        Err(e) => e,
        Ok(frame) => panic!("{hex} decoded as {frame:?}"),
    }
}

/// `kind flags` + id A + `rest`, all hex.
fn with_a(head: &str, rest: &str) -> String {
    format!("{head}{}{rest}", tohex(&id(0x00)))
}

#[test]
fn p1_handshake() {
    golden(
        "0000000102030405060708090a0b0c0d0e0f007b2270726f746f636f6c223a227369646562616e64222c2276657273696f6e223a2231222c22706565724964223a22706565722d61222c2263617073223a5b5d2c226d65746164617461223a7b7d7d",
        Frame::control(id(0x00), Control::Handshake(HANDSHAKE_JSON.as_bytes().to_vec())),
    );
}

#[test]
fn p3_p4_ping_with_and_without_timestamp() {
    golden(
        "0000000102030405060708090a0b0c0d0e0f01",
        Frame::control(id(0x00), Control::Ping),
    );
    let mut ping = Frame::control(id(0x00), Control::Ping);
    ping.ts = Some(1_700_000_000_000);
    golden(
        "0001000102030405060708090a0b0c0d0e0f0068e5cf8b01000001",
        ping,
    );
    golden(
        &with_a("0000", "02"),
        Frame::control(id(0x00), Control::Pong),
    );
}

#[test]
fn p7_close_with_and_without_reason() {
    golden(
        "0000202122232425262728292a2b2c2d2e2f03627965",
        Frame::control(id(0x20), Control::Close("bye".to_owned())),
    );
    golden(
        &with_a("0000", "03"),
        Frame::control(id(0x00), Control::Close(String::new())),
    );
}

#[test]
fn p8_p9_p11_p12_json_envelopes() {
    golden(
        "0100202122232425262728292a2b2c2d2e2f030000007270637b2274223a2272222c226d223a226563686f222c22636964223a223230323132323233323432353236323732383239326132623263326432653266222c2270223a7b2274657874223a226869227d7d",
        message(0x20, Subject::Rpc, &format!(r#"{{"t":"r","m":"echo","cid":"{CID_HEX}","p":{{"text":"hi"}}}}"#)),
    );
    golden(
        "0100303132333435363738393a3b3c3d3e3f030000007270637b2274223a2252222c22636964223a223230323132323233323432353236323732383239326132623263326432653266222c22726573756c74223a7b2274657874223a226869227d7d",
        message(0x30, Subject::Rpc, &format!(r#"{{"t":"R","cid":"{CID_HEX}","result":{{"text":"hi"}}}}"#)),
    );
    golden(
        "0100404142434445464748494a4b4c4d4e4f030000007270637b2274223a2245222c22636964223a223230323132323233323432353236323732383239326132623263326432653266222c22636f6465223a313130312c226d657373616765223a224d6574686f64206e6f7420666f756e643a206563686f227d",
        message(0x40, Subject::Rpc, &format!(r#"{{"t":"E","cid":"{CID_HEX}","code":1101,"message":"Method not found: echo"}}"#)),
    );
    golden(
        "0100505152535455565758595a5b5c5d5e5f050000006576656e747b2274223a224e222c2265223a22757365722e6a6f696e6564222c2264223a7b226964223a317d7d",
        message(0x50, Subject::Event, r#"{"t":"N","e":"user.joined","d":{"id":1}}"#),
    );
}

#[test]
fn c1_to_c4_cbor_envelopes_frame_alike() {
    let cases = [
        ("0100202122232425262728292a2b2c2d2e2f03000000727063", 0x20, Subject::Rpc, "a461746172616d646563686f6363696450202122232425262728292a2b2c2d2e2f6170a16474657874626869"),
        ("0100303132333435363738393a3b3c3d3e3f03000000727063", 0x30, Subject::Rpc, "a3617461526363696450202122232425262728292a2b2c2d2e2f66726573756c74a16474657874626869"),
        ("0100404142434445464748494a4b4c4d4e4f03000000727063", 0x40, Subject::Rpc, "a4617461456363696450202122232425262728292a2b2c2d2e2f64636f646519044d676d657373616765764d6574686f64206e6f7420666f756e643a206563686f"),
        ("0100505152535455565758595a5b5c5d5e5f050000006576656e74", 0x50, Subject::Event, "a36174614e61656b757365722e6a6f696e65646164a162696401"),
    ];
    for (head, base, subject, data) in cases {
        golden(
            &format!("{head}{data}"),
            Frame::message(id(base), subject, unhex(data)),
        );
    }
}

#[test]
fn p15_ack() {
    golden(
        "0200101112131415161718191a1b1c1d1e1f000102030405060708090a0b0c0d0e0f",
        Frame {
            id: id(0x10),
            ts: None,
            body: Body::Ack { of: id(0x00) },
        },
    );
}

#[test]
fn p16_p17_error_frames() {
    golden(
        "0300202122232425262728292a2b2c2d2e2fea0319000000496e76616c6964207375626a656374206e616d657370616365",
        Frame::error(id(0x20), 1002, "Invalid subject namespace"),
    );
    let mut p17 = Frame::error(id(0x20), 1003, "Unsupported feature: stream");
    if let Body::Error { details, .. } = &mut p17.body {
        details.extend_from_slice(b"{}");
    }
    golden(
        "0300202122232425262728292a2b2c2d2e2feb031b000000556e737570706f7274656420666561747572653a2073747265616d7b7d",
        p17,
    );
}

#[test]
fn empty_message_data_and_app_subjects() {
    golden(
        &with_a("0100", "03000000727063"),
        message(0x00, Subject::Rpc, ""),
    );
    golden(
        &with_a("0100", "090000006170702f782e792f7a01"),
        Frame::message(id(0x00), Subject::App("x.y/z".to_owned()), vec![1]),
    );
    golden(
        &with_a("0100", "040000006170702f"),
        message(0x00, Subject::App(String::new()), ""),
    );
    golden(
        &with_a("0100", "0600000073747265616d"),
        message(0x00, Subject::Stream, ""),
    );
}

#[test]
fn replies_to_bad_frames() {
    let fresh = id(0x90);
    // A payload error is answered with the offending frame's id.
    let reply = err(&with_a("0000", "04")).reply(fresh).expect("answered");
    assert_eq!(reply, Frame::error(id(0x00), 1002, "Unknown control op"));
    // Too short: no id to echo, so a fresh one.
    let reply = err("00").reply(fresh).expect("answered");
    assert_eq!(reply, Frame::error(fresh, 1002, "Invalid frame: too short"));
    // ErrorFrames are never answered, malformed or not.
    for hex in [with_a("0300", "ea"), with_a("0302", ""), "03".to_owned()] {
        let e = err(&hex);
        assert!(e.about_error_frame(), "{hex}");
        assert_eq!(e.reply(fresh), None);
    }
}

#[test]
fn random_ids_differ() {
    assert_ne!(random_id(), random_id());
}

fn subject_strategy() -> impl Strategy<Value = Subject> {
    prop_oneof![
        Just(Subject::Rpc),
        Just(Subject::Event),
        Just(Subject::Stream),
        "[a-zA-Z0-9./_-]{0,40}".prop_map(Subject::App),
        "\\PC{0,20}".prop_map(Subject::LegacyRpc),
        "[a-z.]{0,20}".prop_map(Subject::LegacyEvent),
        "[a-z/]{0,20}".prop_map(Subject::LegacyStream),
    ]
}

fn body_strategy() -> impl Strategy<Value = Body<'static>> {
    prop_oneof![
        vec(any::<u8>(), 1..64).prop_map(|d| Body::Control(Control::Handshake(d))),
        Just(Body::Control(Control::Ping)),
        Just(Body::Control(Control::Pong)),
        "\\PC{0,20}".prop_map(|r| Body::Control(Control::Close(r))),
        (subject_strategy(), vec(any::<u8>(), 0..64)).prop_map(|(subject, data)| Body::Message {
            subject,
            data: data.into(),
        }),
        any::<[u8; 16]>().prop_map(|of| Body::Ack { of }),
        (any::<u16>(), "\\PC{0,30}", vec(any::<u8>(), 0..32)).prop_map(
            |(code, message, details)| Body::Error {
                code,
                message,
                details
            }
        ),
    ]
}

proptest! {
    #[test]
    fn frames_round_trip(id in any::<[u8; 16]>(), ts in any::<Option<i64>>(), body in body_strategy()) {
        let frame = Frame { id, ts, body };
        let bytes = encode(&frame);
        prop_assert_eq!(decode_with(&bytes, SubjectRules::AcceptLegacy), Ok(frame));
    }

    #[test]
    fn decode_never_panics(bytes in vec(any::<u8>(), 0..300)) {
        let _ = decode_with(&bytes, SubjectRules::AcceptLegacy);
        let _ = decode(&bytes);
    }

    #[test]
    fn decode_never_panics_near_valid_headers(kind in 0u8..5, flags in 0u8..3, rest in vec(any::<u8>(), 16..120)) {
        let mut bytes = vec![kind, flags];
        bytes.extend(rest);
        if let Err(e) = decode(&bytes) {
            // Every error past the header names the frame.
            prop_assert_eq!(e.frame_id(), Some(bytes[2..18].try_into().expect("16 bytes")));
        }
    }
}

/// A decoded Message frame's data is the input's own bytes, not a copy;
/// `into_owned` gives an equal frame that no longer borrows them.
#[test]
fn message_data_is_borrowed_from_the_input() {
    let sent = message(0x10, Subject::Rpc, r#"{"t":"N","e":"x"}"#);
    let bytes = encode(&sent);
    let frame = decode(&bytes).expect("valid");
    let Body::Message { data, .. } = &frame.body else {
        panic!("{frame:?}")
    };
    let std::borrow::Cow::Borrowed(data) = data else {
        panic!("the data was copied")
    };
    assert!(bytes.as_ptr_range().contains(&data.as_ptr()));
    assert_eq!(data.len(), 17);
    let owned = frame.clone().into_owned();
    assert_eq!(owned, frame);
    assert_eq!(owned, sent);
    assert!(matches!(
        owned.body,
        Body::Message {
            data: std::borrow::Cow::Owned(_),
            ..
        }
    ));
}
