//! Rendering: requests from borrowed parts, exact-length replies, line
//! breaks on NDJSON lines, CBOR params.
#![allow(clippy::unwrap_used)]

use super::{
    render, render_exact, render_request, render_request_into, NotJson, Style, SCRATCH,
    SCRATCH_KEPT,
};
use crate::envelope::{raw_from_string, Message, Payload, WireId};

/// `render_request` writes what `render` writes for the same request.
#[test]
fn render_request_matches_render() {
    let params = [
        None,
        Some(r#"{"pad":"x"}"#),
        Some("[1, 2,\n 3]"),
        Some(r#"{"s":"a\nb"}"#),
    ];
    for style in [Style::Frame, Style::Line, Style::Holon] {
        for p in params {
            for method in ["echo", "we\"ird\n"] {
                // The id is written last, digit by digit: the shortest and
                // the longest too.
                for id in [0, 42, u64::MAX] {
                    let payload = p.map(|t| Payload::Json(raw_from_string(t.to_string())));
                    let msg = Message::Request {
                        id: WireId::number(id),
                        method: method.into(),
                        params: payload.clone(),
                    };
                    let expected = render(&msg, style).unwrap();
                    assert_eq!(
                        render_request(id, method, payload.as_ref(), style).unwrap(),
                        expected
                    );
                    // Appended after what the buffer already holds.
                    let mut out = String::from("before\n");
                    render_request_into(id, method, payload.as_ref(), style, &mut out).unwrap();
                    assert_eq!(out, format!("before\n{expected}"));
                }
            }
        }
    }
}

/// On a line, a payload with a line break of either kind, anywhere, is
/// minified onto the line; one without is copied as it is, spaces and
/// all (and every payload in a frame).
#[test]
fn a_line_break_anywhere_in_a_payload_minifies_it_on_a_line() {
    let long = "x".repeat(5_000);
    for (text, minified) in [
        ("[1,\n2]", "[1,2]"),
        ("[1,\r2]", "[1,2]"),
        ("[1,\r\n2]", "[1,2]"),
        ("{\"a\": 1}", "{\"a\": 1}"),
    ] {
        for at in [0, 31, 32, 33, 4_999] {
            // The break (or the space) moved to every offset of a long
            // value, where a SIMD search changes lanes.
            let text = text.replacen('1', &format!("[\"{}\",1]", &long[..at]), 1);
            let minified = minified.replacen('1', &format!("[\"{}\",1]", &long[..at]), 1);
            let payload = Payload::Json(raw_from_string(text.clone()));
            let line = render_request(1, "m", Some(&payload), Style::Line).unwrap();
            assert_eq!(
                line,
                format!(r#"{{"jsonrpc":"2.0","method":"m","params":{minified},"id":1}}"#)
            );
            let frame = render_request(1, "m", Some(&payload), Style::Frame).unwrap();
            assert!(frame.contains(&text), "a frame keeps the text as it is");
        }
    }
}

/// CBOR params (Sideband v2 clients) are transcoded where the request
/// is written, into what their JSON twin renders; a line keeps its
/// line breaks escaped. Params JSON cannot carry leave nothing behind.
#[test]
fn cbor_params_render_as_their_json_twin() {
    let twin = r#"{"pad":"a\nb","n":[1,-2,1.5],"t":true,"z":null}"#;
    let cbor =
        crate::dialect::sideband::json_to_cbor(raw_from_string(twin.into()).to_raw()).unwrap();
    let json = Payload::Json(raw_from_string(twin.into()));
    for style in [Style::Frame, Style::Line, Style::Holon] {
        let mut out = String::from("before\n");
        render_request_into(
            7,
            "echo",
            Some(&Payload::Cbor(cbor.clone().into())),
            style,
            &mut out,
        )
        .unwrap();
        let expected = render_request(7, "echo", Some(&json), style).unwrap();
        assert_eq!(out, format!("before\n{expected}"), "{style:?}");
        assert!(!out["before\n".len()..].contains('\n'));
    }
    // NaN (half float 0x7e00) has no JSON form.
    let nan = Payload::Cbor(vec![0xf9, 0x7e, 0x00].into());
    assert_eq!(
        render_request(7, "echo", Some(&nan), Style::Line),
        Err(NotJson)
    );
}

/// `render_exact` writes what `render` writes, with no spare capacity,
/// and keeps no scratch buffer above its bound.
#[test]
fn render_exact_is_render_without_spare_capacity() {
    let reply = |len: usize| Message::Response {
        id: WireId::number(7),
        result: crate::envelope::Outcome::Value(Payload::Json(raw_from_string(format!(
            "\"{}\"",
            "x".repeat(len)
        )))),
    };
    for len in [0, 10, 300, 5_000, SCRATCH_KEPT + 1, 200] {
        let msg = reply(len);
        let exact = render_exact(&msg, Style::Frame).unwrap();
        assert_eq!(exact, render(&msg, Style::Frame).unwrap(), "{len}");
        assert_eq!(exact.capacity(), exact.len(), "{len}");
        let kept = SCRATCH.with_borrow(String::capacity);
        assert!(kept <= SCRATCH_KEPT, "{len}: scratch keeps {kept} bytes");
    }
}

/// Params and results decoded by the scan from a text without line
/// breaks are marked so and copied onto a line without a search; from a
/// text with one (anywhere: before, inside or after the value), they are
/// minified onto the line, whichever decoder read them.
#[test]
fn decoded_payloads_go_onto_a_line_minified_unless_the_scan_saw_no_break() {
    use bytestring::ByteString;

    use crate::dialect::{Inbound, Item};
    use crate::envelope::Outcome;

    for brk in ["", "\n", "\r", "\r\n"] {
        let params = format!("{{\"a\":[1,{brk}2],{brk}\"s\":\"x y\"}}");
        for (request, reply) in [
            (
                format!(r#"{{"jsonrpc":"2.0","method":"m","params":{params},"id":7}}"#),
                format!(r#"{{"jsonrpc":"2.0","result":{params},"id":7}}"#),
            ),
            (
                format!("{{{brk}\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":[1],\"id\":7}}"),
                format!("{{\"jsonrpc\":\"2.0\",\"result\":[1],{brk}\"id\":7}}"),
            ),
            (
                format!("{{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":[1],\"id\":7}}{brk}"),
                format!("{{\"jsonrpc\":\"2.0\",\"result\":[1],\"id\":7}} {brk}"),
            ),
        ] {
            let source = ByteString::from(request.as_str());
            let Inbound::Single(Item::Valid(Message::Request {
                params: Some(Payload::Json(raw)),
                ..
            })) = super::decode(&source, 10)
            else {
                panic!("a request: {request:?}");
            };
            assert_eq!(raw.is_flat(), brk.is_empty(), "{request:?}");
            let line = render_request(1, "m", Some(&Payload::Json(raw.clone())), Style::Line);
            let mut expected = String::new();
            super::minify_into(raw.get(), &mut expected);
            assert!(!expected.contains(['\n', '\r']));
            assert_eq!(
                line.unwrap(),
                format!(r#"{{"jsonrpc":"2.0","method":"m","params":{expected},"id":1}}"#)
            );

            let source = ByteString::from(reply.as_str());
            let Ok(
                msg @ Message::Response {
                    result: Outcome::Value(Payload::Json(_)),
                    ..
                },
            ) = super::decode_upstream(&source)
            else {
                panic!("a response: {reply:?}");
            };
            let Message::Response {
                result: Outcome::Value(Payload::Json(raw)),
                ..
            } = &msg
            else {
                unreachable!()
            };
            assert_eq!(raw.is_flat(), brk.is_empty(), "{reply:?}");
            let line = render(&msg, Style::Line).unwrap();
            assert!(!line.contains(['\n', '\r']), "{line:?}");
        }
    }
}
