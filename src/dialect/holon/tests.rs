//! holon-rpc.md §10 inbound table, row by row.

use super::*;
use crate::dialect::jsonrpc::{render, Style};
use bytestring::ByteString;

/// The codec on a copy of `text` in shared bytes.
fn decode(text: &str) -> Inbound {
    super::decode(&ByteString::from(text))
}

fn reply_of(inbound: Inbound) -> String {
    match inbound {
        Inbound::Single(Item::Invalid(m)) => render(&m, Style::Holon).expect("json"),
        other => panic!("expected an error reply, got {other:?}"),
    }
}

#[test]
fn fatal_rows_close_1002() {
    assert_eq!(
        decode("{nope"),
        Inbound::close(CloseCode::ProtocolError, MALFORMED)
    );
    assert_eq!(
        decode("[1]"),
        Inbound::close(CloseCode::ProtocolError, NOT_OBJECT)
    );
    assert_eq!(
        decode("null"),
        Inbound::close(CloseCode::ProtocolError, NOT_OBJECT)
    );
    assert_eq!(
        decode(" \n [1] "),
        Inbound::close(CloseCode::ProtocolError, NOT_OBJECT)
    );
    assert_eq!(
        decode(""),
        Inbound::close(CloseCode::ProtocolError, MALFORMED)
    );
    assert_eq!(
        decode("[1"),
        Inbound::close(CloseCode::ProtocolError, MALFORMED)
    );
    assert_eq!(
        decode(r#"{"id":"a"} {"#),
        Inbound::close(CloseCode::ProtocolError, MALFORMED)
    );
    assert_eq!(
        decode(r#"{"id":"a"}]"#),
        Inbound::close(CloseCode::ProtocolError, MALFORMED)
    );
    // Whitespace around an object is not an error.
    assert!(matches!(
        decode(" \r\n\t{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"m\",\"params\":{}} \n"),
        Inbound::Single(Item::Valid(_))
    ));
    for text in [
        r#"{"jsonrpc":"2.0","method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":"  ","method":"m"}"#,
    ] {
        assert_eq!(
            decode(text),
            Inbound::close(CloseCode::ProtocolError, NO_ID),
            "{text}"
        );
    }
    assert!(NOT_OBJECT.len() <= 123 && NO_ID.len() <= 123);
}

#[test]
fn invalid_requests_with_a_usable_id_are_answered() {
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":"1","method":"m","extra":1}"#,
            "unknown key \\\"extra\\\"",
        ),
        (
            r#"{"jsonrpc":"1.0","id":"1","method":"m"}"#,
            "jsonrpc must be \\\"2.0\\\"",
        ),
        (
            r#"{"jsonrpc":"2.0","id":"1","method":" "}"#,
            "method must be a non-empty string",
        ),
        (
            r#"{"jsonrpc":"2.0","id":"1","method":5}"#,
            "method must be a non-empty string",
        ),
        (
            r#"{"jsonrpc":"2.0","id":"1","method":"m","result":1}"#,
            "a request cannot carry result or error",
        ),
        (
            r#"{"jsonrpc":"2.0","id":"1","method":"m","params":[1]}"#,
            "params must be an object",
        ),
    ];
    for (text, reason) in cases {
        assert_eq!(
            reply_of(decode(text)),
            format!(
                r#"{{"jsonrpc":"2.0","error":{{"code":-32600,"message":"Invalid Request","data":"{reason}"}},"id":"1"}}"#
            ),
            "{text}"
        );
    }
}

#[test]
fn valid_requests_and_null_params() {
    match decode(r#"{"jsonrpc":"2.0","id":"h1","method":"rpc.heartbeat","params":null}"#) {
        Inbound::Single(Item::Valid(Message::Request { id, method, params })) => {
            assert_eq!(id.as_json(), Some("\"h1\""));
            assert_eq!(method, "rpc.heartbeat");
            assert_eq!(
                params
                    .and_then(|p| p.as_json().map(str::to_owned))
                    .as_deref(),
                Some("{}")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        decode(r#"{"jsonrpc":"2.0","id":"2","method":"pkg.Svc/M","params":{"x":1}}"#),
        Inbound::Single(Item::Valid(Message::Request { .. }))
    ));
}

#[test]
fn replies_to_pushes() {
    assert!(matches!(
        decode(r#"{"jsonrpc":"2.0","id":"s1","result":null}"#),
        Inbound::Single(Item::Valid(Message::Response {
            result: Outcome::Value(_),
            ..
        }))
    ));
    assert!(matches!(
        decode(r#"{"jsonrpc":"2.0","id":"s1"}"#),
        Inbound::Single(Item::Valid(Message::Response {
            result: Outcome::Void,
            ..
        }))
    ));
    assert!(matches!(
        decode(
            r#"{"jsonrpc":"2.0","id":"s1","error":{"code":12,"message":"method \"x\" not registered"}}"#
        ),
        Inbound::Single(Item::Valid(Message::Error { .. }))
    ));
    for bad in [
        r#"{"jsonrpc":"2.0","id":"s1","result":1,"error":{"code":1,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":"s1","error":{"code":4.5,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":"s1","error":null}"#,
        r#"{"jsonrpc":"2.0","id":"s1","result":1,"x":1}"#,
    ] {
        assert!(
            matches!(decode(bad), Inbound::Single(Item::BadReply(_))),
            "{bad}"
        );
    }
}

#[test]
fn holon_style_renders_void_as_empty_object() {
    let msg = Message::Response {
        id: WireId::string("7"),
        result: Outcome::Void,
    };
    assert_eq!(
        render(&msg, Style::Holon).expect("json"),
        r#"{"jsonrpc":"2.0","result":{},"id":"7"}"#
    );
}

#[test]
fn params_helpers() {
    assert_eq!(
        object_params(None)
            .and_then(|p| p.as_json().map(str::to_owned))
            .as_deref(),
        Some("{}")
    );
    let arr = Payload::json("[1,2]").expect("json");
    assert!(object_params(Some(&arr)).is_none());
    assert_eq!(
        wrap_params(&arr)
            .and_then(|p| p.as_json().map(str::to_owned))
            .as_deref(),
        Some(r#"{"value":[1,2]}"#)
    );
}

/// Params and results go onto an NDJSON line minified when their text
/// held a line break, and are marked flat (copied without a search) only
/// when the scan saw none: read by the scan, or by serde_json (a key
/// given twice).
#[test]
fn payloads_are_marked_flat_only_from_a_text_without_line_breaks() {
    use crate::dialect::jsonrpc::render_request;

    for brk in ["", "\n", "\r\n"] {
        for repeat in ["", r#""id":"0","#] {
            let request = format!(
                "{{{repeat}\"jsonrpc\":\"2.0\",\"id\":\"1\",\"method\":\"m\",\
                 \"params\":{{\"a\":[1,{brk}2]}}}}"
            );
            let Inbound::Single(Item::Valid(Message::Request {
                params: Some(Payload::Json(raw)),
                ..
            })) = decode(&request)
            else {
                panic!("a request: {request:?}");
            };
            assert_eq!(raw.is_flat(), brk.is_empty() && repeat.is_empty());
            let line = render_request(1, "m", Some(&Payload::Json(raw)), Style::Line);
            assert_eq!(
                line.expect("json"),
                r#"{"jsonrpc":"2.0","method":"m","params":{"a":[1,2]},"id":1}"#
            );

            let reply =
                format!("{{\"jsonrpc\":\"2.0\",{repeat}\"id\":\"s1\",\"result\":[1,{brk}2]}}");
            let Inbound::Single(Item::Valid(msg @ Message::Response { .. })) = decode(&reply)
            else {
                panic!("a reply: {reply:?}");
            };
            let line = render(&msg, Style::Line).expect("json");
            assert!(line.contains(r#""result":[1,2]"#), "{line:?}");
        }
    }
}
