//! Session rules of [`Sbp`] that need no socket: legacy subjects in
//! return, invalid envelopes reported with their cid, repeated frames.

use super::shared::{SCRATCH, SCRATCH_KEPT};
use super::*;
use crate::dialect::sideband::decode_envelope;
use crate::envelope::{Outcome, Payload};

/// A session whose peer has sent its handshake.
fn ready(legacy: bool) -> Sbp {
    let mut sbp = Sbp::new(false).with_subjects(legacy, false);
    let hello = Handshake::local(random_peer_id(), false).to_bytes();
    let frame = frame::encode(&Frame::control(random_id(), Control::Handshake(hello)));
    assert!(matches!(sbp.on_frame(&frame), SbpEvent::Ready));
    sbp
}

fn message(subject: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = vec![1, 0];
    out.extend_from_slice(&random_id());
    out.extend_from_slice(&u32::try_from(subject.len()).expect("valid").to_le_bytes());
    out.extend_from_slice(subject);
    out.extend_from_slice(data);
    out
}

fn subject_of(bytes: &[u8]) -> Subject {
    match frame::decode_with(bytes, SubjectRules::AcceptLegacy)
        .expect("valid")
        .body
    {
        Body::Message { subject, .. } => subject,
        other => panic!("{other:?}"),
    }
}

fn notification() -> Message {
    Message::Notification {
        method: "user.joined".into(),
        params: None,
    }
}

fn request() -> Message {
    Message::Request {
        id: WireId::Cid(random_id()),
        method: "ask".into(),
        params: None,
    }
}

/// §5: a connection that sent a legacy subject gets legacy subjects in
/// return: replies on the request's own subject, requests on
/// `rpc/<m>`, events on `event/<e>`. Until then, current subjects.
#[test]
fn a_legacy_peer_gets_legacy_subjects() {
    let mut sbp = ready(true);
    assert_eq!(
        subject_of(&sbp.encode(&notification()).expect("valid")),
        Subject::Event
    );
    assert_eq!(
        subject_of(&sbp.encode(&request()).expect("valid")),
        Subject::Rpc
    );
    let cid = "21".repeat(16);
    let req = format!(r#"{{"t":"r","m":"echo","cid":"{cid}"}}"#);
    assert!(matches!(
        sbp.on_frame(&message(b"rpc/other", req.as_bytes())),
        SbpEvent::Rpc(_)
    ));
    let reply = Message::Response {
        id: WireId::Cid([0x21; 16]),
        result: Outcome::Value(Payload::json("1").expect("valid")),
    };
    let legacy = |s: &str| Subject::LegacyRpc(s.into());
    assert_eq!(
        subject_of(&sbp.encode(&reply).expect("valid")),
        legacy("other")
    );
    // Once answered, the cid is forgotten.
    assert_eq!(
        subject_of(&sbp.encode(&reply).expect("valid")),
        Subject::Rpc
    );
    assert_eq!(
        subject_of(&sbp.encode(&request()).expect("valid")),
        legacy("ask")
    );
    assert_eq!(
        subject_of(&sbp.encode(&notification()).expect("valid")),
        Subject::LegacyEvent("user.joined".into())
    );
}

/// §6: an invalid `rpc` envelope with a readable cid carries the cid,
/// the `E` 1100 reply and the envelope quoted for a pending call.
#[test]
fn an_invalid_envelope_with_a_cid_is_reported_with_its_text() {
    let mut sbp = ready(false);
    let cid = "22".repeat(16);
    let bad = format!(r#"{{"t":"E","cid":"{cid}","code":"x","message":"m"}}"#);
    match sbp.on_frame(&message(b"rpc", bad.as_bytes())) {
        SbpEvent::InvalidEnvelope { cid, reply, detail } => {
            assert_eq!(cid, [0x22; 16]);
            assert!(detail.contains(&bad), "{detail}");
            let reply = reply.expect("valid");
            let reply = frame::decode(&reply).expect("valid");
            let Body::Message { data, .. } = reply.body else {
                panic!("{reply:?}")
            };
            match decode_envelope(&data, Encoding::Json).expect("valid") {
                Message::Error { id, error } => {
                    assert_eq!(id, Some(WireId::Cid([0x22; 16])));
                    assert_eq!(error.code, 1100);
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(quote(&[0xa1, 0x61]), "CBOR a161");
    assert_eq!(quote(&[b'x'; 600]).len(), QUOTED_BYTES + "…".len());
}

/// §10: a Message frame whose id came in the last 1,024 frames is dropped
/// and counted, whatever it carries; one from before that is taken.
#[test]
fn a_repeated_message_frame_is_dropped() {
    let mut sbp = ready(false);
    let envelope = |n: usize| {
        let cid = format!("{n:032x}");
        format!(r#"{{"t":"N","e":"tick","d":"{cid}"}}"#)
    };
    let frame = |id: u32, n: usize| {
        let mut bytes = message(b"event", envelope(n).as_bytes());
        bytes[2..6].copy_from_slice(&id.to_le_bytes());
        bytes[6..18].fill(0);
        bytes
    };
    assert!(matches!(sbp.on_frame(&frame(0, 0)), SbpEvent::Rpc(_)));
    let dropped = sbp.on_frame(&frame(0, 1));
    assert!(
        matches!(dropped, SbpEvent::Dropped(SbpDrop::DuplicateFrame)),
        "{dropped:?}"
    );
    for id in 1..SEEN_FRAMES as u32 {
        assert!(matches!(sbp.on_frame(&frame(id, 2)), SbpEvent::Rpc(_)));
    }
    assert!(matches!(
        sbp.on_frame(&frame(0, 3)),
        SbpEvent::Dropped(SbpDrop::DuplicateFrame)
    ));
    assert!(matches!(
        sbp.on_frame(&frame(SEEN_FRAMES as u32, 4)),
        SbpEvent::Rpc(_)
    ));
    assert!(matches!(sbp.on_frame(&frame(0, 5)), SbpEvent::Rpc(_)));
}

/// A session with CBOR offered by both sides when `cbor`.
fn ready_with(cbor: bool) -> Sbp {
    let mut sbp = Sbp::new(cbor);
    let hello = Handshake::local(random_peer_id(), cbor).to_bytes();
    let frame = frame::encode(&Frame::control(random_id(), Control::Handshake(hello)));
    assert!(matches!(sbp.on_frame(&frame), SbpEvent::Ready));
    assert_eq!(sbp.encoding == Encoding::Cbor, cbor);
    sbp
}

/// An encoded frame is the envelope `encode_envelope` gives in a Message
/// frame, in an allocation of exactly its length, whatever the buffer
/// reused from call to call held before (a larger frame, a failed
/// encode); the reused buffer keeps at most its bound.
#[test]
fn encoded_frames_are_exact_whatever_came_before() {
    let reply = |len: usize| Message::Response {
        id: WireId::Cid([7; 16]),
        result: Outcome::Value(Payload::Json(crate::envelope::raw_from_string(format!(
            "[\"{}\",1.5,{{\"k\":null}}]",
            "x".repeat(len)
        )))),
    };
    // Not encodable in a Sideband envelope: a JSON-RPC id, not a cid.
    let unencodable = Message::Response {
        id: WireId::number(3),
        result: Outcome::Void,
    };
    for cbor in [false, true] {
        let mut sbp = ready_with(cbor);
        for len in [0, 10, 300, 5_000, SCRATCH_KEPT + 1, 200, 0] {
            assert!(sbp.encode(&unencodable).is_err(), "cbor={cbor}");
            let msg = reply(len);
            let bytes = sbp.encode(&msg).expect("encodable");
            assert_eq!(bytes.capacity(), bytes.len(), "cbor={cbor} len={len}");
            let frame = frame::decode(&bytes).expect("a valid frame");
            let Body::Message { subject, data } = frame.body else {
                panic!("not a Message frame: {frame:?}");
            };
            assert_eq!(subject, Subject::Rpc);
            let want = encode_envelope(&msg, sbp.encoding).expect("encodable");
            assert!(data == want, "cbor={cbor} len={len}: another envelope");
            let kept = SCRATCH.with_borrow(Vec::capacity);
            assert!(kept <= SCRATCH_KEPT, "scratch keeps {kept} bytes");
        }
    }
}
