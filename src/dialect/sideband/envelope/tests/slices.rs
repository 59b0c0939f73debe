//! Payloads decoded within their frame are slices of it, in both
//! encodings; decoded alone, or from data outside the frame given, copies.

use super::*;

/// Decoded within its frame, an envelope's payload is a slice of the
/// frame (no copy); decoded alone, a copy. Equal either way.
fn assert_sliced_out_of_its_frame(msg: &Message, enc: Encoding) {
    let data = encode_envelope(msg, enc).expect("encodes");
    // The envelope inside a larger frame, as a Message frame carries it.
    let mut frame = vec![0u8; 7];
    frame.extend_from_slice(&data);
    let frame = Bytes::from(frame);
    let inside = &frame[7..];
    let shared = decode_envelope_in(&frame, inside, enc).expect("decodes");
    let copied = decode_envelope(inside, enc).expect("decodes");
    assert_eq!(&shared, msg);
    assert_eq!(&copied, msg);
    let payload = |m: &Message| {
        let p = match m {
            Message::Request {
                params: Some(p), ..
            }
            | Message::Notification {
                params: Some(p), ..
            }
            | Message::Response {
                result: Outcome::Value(p),
                ..
            } => p,
            other => panic!("a payload: {other:?}"),
        };
        match p {
            Payload::Cbor(b) => b.as_ptr(),
            Payload::Json(raw) => raw.get().as_ptr(),
        }
    };
    let range = frame.as_ptr_range();
    assert!(
        range.contains(&payload(&shared)),
        "sliced out of the frame: {msg:?}"
    );
    assert!(
        !range.contains(&payload(&copied)),
        "a copy of its own: {msg:?}"
    );
}

#[test]
fn cbor_payloads_are_slices_of_the_frame_they_were_read_from() {
    for msg in [
        Message::Request {
            id: WireId::Cid(CID),
            method: "echo".into(),
            params: Some(cbor("a1616b820102")),
        },
        Message::Response {
            id: WireId::Cid(CID),
            result: Outcome::Value(cbor("820102")),
        },
    ] {
        assert_sliced_out_of_its_frame(&msg, Encoding::Cbor);
    }
}

#[test]
fn json_payloads_are_slices_of_the_frame_they_were_read_from() {
    for msg in [
        Message::Request {
            id: WireId::Cid(CID),
            method: "echo".into(),
            params: Some(json(r#"{"k":[1,2],"s":"é\n"}"#)),
        },
        Message::Response {
            id: WireId::Cid(CID),
            result: Outcome::Value(json("[1,2]")),
        },
        Message::Notification {
            method: "tick".into(),
            params: Some(json(r#"{"n":1}"#)),
        },
    ] {
        assert_sliced_out_of_its_frame(&msg, Encoding::Json);
    }
    // Data that does not lie within the frame given is copied, not sliced.
    let msg = Message::Request {
        id: WireId::Cid(CID),
        method: "echo".into(),
        params: Some(json("[true]")),
    };
    let data = encode_envelope(&msg, Encoding::Json).expect("encodes");
    let elsewhere = Bytes::from_static(b"unrelated");
    let decoded = decode_envelope_in(&elsewhere, &data, Encoding::Json).expect("decodes");
    assert_eq!(decoded, msg);
}

/// A JSON payload sliced out of its frame is marked flat (it goes onto
/// an NDJSON line without a search) exactly when the envelope's text held
/// no raw line break, whether the scan or serde_json (a text the scan
/// declines: an escaped member name) read it; and onto a line it goes
/// minified either way.
#[test]
fn json_payloads_are_marked_flat_only_from_a_text_without_line_breaks() {
    use crate::dialect::jsonrpc::{render_request, Style};

    for brk in ["", "\n", "\r", "\r\n"] {
        for name in ["\"p\"", "\"\\u0070\""] {
            let text = format!(
                "{{\"t\":\"r\",\"m\":\"echo\",\"cid\":\"{CID_HEX}\",{name}:{{\"a\":[1,{brk}2]}}}}"
            );
            let frame = Bytes::from(text.clone().into_bytes());
            let msg = decode_envelope_in(&frame, &frame, Encoding::Json).expect("decodes");
            let Message::Request {
                params: Some(Payload::Json(raw)),
                ..
            } = msg
            else {
                panic!("a request with JSON params: {msg:?}");
            };
            assert_eq!(raw.is_flat(), brk.is_empty(), "{text:?}");
            let line = render_request(1, "echo", Some(&Payload::Json(raw)), Style::Line);
            assert_eq!(
                line.expect("json"),
                r#"{"jsonrpc":"2.0","method":"echo","params":{"a":[1,2]},"id":1}"#
            );
        }
    }
}
