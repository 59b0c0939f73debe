//! Golden tests for the JSON-RPC 2.0 codec, from jsonrpc-ws.md §4.

use super::*;
use super::{render, render_batch, Style};

/// The client codec on a copy of `text` in shared bytes.
fn decode(text: &str, max_batch_items: usize) -> Inbound {
    super::decode(&ByteString::from(text), max_batch_items)
}

/// The upstream codec on a copy of `text` in shared bytes.
fn decode_upstream(text: &str) -> Result<Message, ReplyError> {
    super::decode_upstream(&ByteString::from(text))
}

/// True when `payload` lies within `source`'s bytes (no copy was made).
fn shares(source: &ByteString, payload: Option<&Payload>) -> bool {
    let Some(Payload::Json(raw)) = payload else {
        return false;
    };
    source
        .as_bytes()
        .as_ptr_range()
        .contains(&raw.get().as_ptr())
}

/// Params, results and batch items' params are slices of the text read;
/// error data (rare) is a copy.
#[test]
fn payloads_are_slices_of_the_text_decoded() {
    let text = ByteString::from(r#"{"jsonrpc":"2.0","method":"m","params":[1,{"a":2}],"id":7}"#);
    let Inbound::Single(Item::Valid(Message::Request { params, .. })) = super::decode(&text, 10)
    else {
        panic!("a request");
    };
    assert_eq!(
        params.as_ref().and_then(Payload::as_json),
        Some(r#"[1,{"a":2}]"#)
    );
    assert!(shares(&text, params.as_ref()));

    let batch = ByteString::from(
        r#"[{"jsonrpc":"2.0","method":"a","params":[1],"id":1},{"jsonrpc":"2.0","method":"b","params":{"x":"y"}}]"#,
    );
    let Inbound::Batch(items) = super::decode(&batch, 10) else {
        panic!("a batch");
    };
    for item in &items {
        let Item::Valid(Message::Request { params, .. } | Message::Notification { params, .. }) =
            item
        else {
            panic!("valid items: {item:?}");
        };
        assert!(shares(&batch, params.as_ref()), "{item:?}");
    }

    let reply = ByteString::from(r#"{"jsonrpc":"2.0","result":{"ok":true},"id":3}"#);
    let Ok(Message::Response {
        result: Outcome::Value(result),
        ..
    }) = super::decode_upstream(&reply)
    else {
        panic!("a response");
    };
    assert_eq!(result.as_json(), Some(r#"{"ok":true}"#));
    assert!(shares(&reply, Some(&result)));

    let batch_reply = ByteString::from(r#"[{"jsonrpc":"2.0","result":[5],"id":1}]"#);
    let item = batch_reply
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'));
    let Ok(Message::Response {
        result: Outcome::Value(result),
        ..
    }) = decode_upstream_in(&batch_reply, item.expect("one item"))
    else {
        panic!("a response");
    };
    assert!(shares(&batch_reply, Some(&result)));
}

fn reply_text(inbound: Inbound) -> String {
    match inbound {
        Inbound::Rejected(msg) | Inbound::Single(Item::Invalid(msg)) => {
            render(&msg, Style::Frame).expect("json")
        }
        Inbound::Batch(items) => {
            let msgs: Vec<Message> = items
                .into_iter()
                .map(|i| match i {
                    Item::Invalid(m) => m,
                    other => panic!("expected invalid item, got {other:?}"),
                })
                .collect();
            render_batch(&msgs, Style::Frame).expect("json")
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

const PARSE: &str =
    r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#;
const INVALID_NULL: &str =
    r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}"#;

#[test]
fn parse_errors() {
    assert_eq!(
        reply_text(decode(
            r#"{"jsonrpc":"2.0","method":"foobar, "params":"bar","baz]"#,
            100
        )),
        PARSE
    );
    assert_eq!(
        reply_text(decode(
            r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"jsonrpc":"2.0","method"]"#,
            100
        )),
        PARSE
    );
    assert_eq!(reply_text(decode("{} x", 100)), PARSE);
    assert_eq!(reply_text(decode("   ", 100)), PARSE);
}

#[test]
fn invalid_shapes_get_id_null() {
    assert_eq!(reply_text(decode("[]", 100)), INVALID_NULL);
    for text in [
        "1",
        "\"x\"",
        "true",
        "null",
        r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#,
        r#"{"jsonrpc":"2.0","method":"m","id":{"a":1}}"#,
        r#"{"jsonrpc":"2.0","method":"m","id":true}"#,
    ] {
        assert_eq!(reply_text(decode(text, 100)), INVALID_NULL, "{text}");
    }
    assert_eq!(reply_text(decode("[1]", 100)), format!("[{INVALID_NULL}]"));
    assert_eq!(
        reply_text(decode("[1,2,3]", 100)),
        format!("[{INVALID_NULL},{INVALID_NULL},{INVALID_NULL}]")
    );
}

#[test]
fn invalid_with_usable_id_echoes_it() {
    let want = r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":7}"#;
    for text in [
        r#"{"jsonrpc":"2.1","method":"m","id":7}"#,
        r#"{"method":"m","id":7}"#,
        r#"{"jsonrpc":2.0,"method":"m","id":7}"#,
        r#"{"jsonrpc":"2.0","id":7}"#,
        r#"{"jsonrpc":"2.0","method":"m","params":"x","id":7}"#,
        r#"{"jsonrpc":"2.0","method":"m","params":null,"id":7}"#,
    ] {
        assert_eq!(reply_text(decode(text, 100)), want, "{text}");
    }
}

#[test]
fn batch_limit_error_is_exact() {
    let items = [r#"{"jsonrpc":"2.0","method":"m","id":1}"#; 3].join(",");
    let text = format!("[{items}]");
    assert_eq!(
        reply_text(decode(&text, 2)),
        r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request","data":"Batch size exceeds maximum of 2"},"id":null}"#
    );
    assert!(matches!(decode(&text, 3), Inbound::Batch(items) if items.len() == 3));
}

#[test]
fn ids_are_kept_byte_for_byte() {
    for id in [
        "1",
        "1.0",
        "-0",
        "1e3",
        "\"1\"",
        "\"\\u0031\"",
        "12345678901234567890",
        "null",
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","method":"echo","params":[1],"id":{id}}}"#);
        match decode(&text, 100) {
            Inbound::Single(Item::Valid(Message::Request {
                id: got,
                method,
                params,
            })) => {
                assert_eq!(got.as_json(), Some(id));
                assert_eq!(method, "echo");
                assert_eq!(
                    params
                        .and_then(|p| p.as_json().map(str::to_owned))
                        .as_deref(),
                    Some("[1]")
                );
            }
            other => panic!("{id}: {other:?}"),
        }
    }
}

/// The id of a request or a daemon's reply, as decoded: its token, and
/// whether it was stored without a heap allocation.
fn id_of(msg: &Message) -> (&str, bool) {
    match msg {
        Message::Request {
            id: WireId::Json(token),
            ..
        }
        | Message::Response {
            id: WireId::Json(token),
            ..
        } => (token.get(), token.is_inline()),
        other => panic!("no JSON id: {other:?}"),
    }
}

#[test]
fn ids_and_methods_up_to_24_bytes_are_decoded_without_an_allocation() {
    let long = format!("\"{}\"", "x".repeat(40));
    for (id, inline) in [
        ("7", true),
        ("18446744073709551615", true),
        ("\"client-1234\"", true),
        ("\"abcdefghijklmnopqrstuv\"", true),
        (long.as_str(), false),
    ] {
        let request = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{id}}}"#);
        let Inbound::Single(Item::Valid(msg)) = decode(&request, 1) else {
            panic!("{id}: not a valid request");
        };
        assert_eq!(id_of(&msg), (id, inline), "request id {id}");
        let reply = format!(r#"{{"jsonrpc":"2.0","result":1,"id":{id}}}"#);
        let msg = decode_upstream(&reply).expect("reply");
        assert_eq!(id_of(&msg), (id, inline), "reply id {id}");
    }
    let long = "m".repeat(30);
    for (method, inline) in [
        ("subtract", true),
        ("a\\u0062c", true),
        ("exactly.twenty-four.byte", true),
        (long.as_str(), false),
    ] {
        let request = format!(r#"{{"jsonrpc":"2.0","method":"{method}","id":1}}"#);
        let text = serde_json::from_str::<String>(&format!("\"{method}\"")).expect("string");
        let from_client = decode(&request, 1);
        let from_daemon = decode_upstream(&request).map(Item::Valid);
        for item in [from_client, Inbound::Single(from_daemon.expect("request"))] {
            match item {
                Inbound::Single(Item::Valid(Message::Request { method: got, .. })) => {
                    assert_eq!(got, text);
                    assert_eq!(!got.is_heap_allocated(), inline, "{method}");
                }
                other => panic!("{method}: {other:?}"),
            }
        }
    }
}

#[test]
fn notifications_and_replies() {
    assert!(matches!(
        decode(
            r#"{"jsonrpc":"2.0","method":"update","params":[1,2,3]}"#,
            100
        ),
        Inbound::Single(Item::Valid(Message::Notification { .. }))
    ));
    assert!(matches!(
        decode(r#"{"jsonrpc":"2.0","result":19,"id":"s1"}"#, 100),
        Inbound::Single(Item::Valid(Message::Response { .. }))
    ));
    assert!(matches!(
        decode(
            r#"{"jsonrpc":"2.0","error":{"code":-1,"message":"x"},"id":"s1"}"#,
            100
        ),
        Inbound::Single(Item::Valid(Message::Error { .. }))
    ));
}

#[test]
fn render_round_trips_exact_bytes() {
    let text = r#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend": 42, "subtrahend":23},"id":1.0}"#;
    let Inbound::Single(Item::Valid(msg)) = decode(text, 100) else {
        panic!()
    };
    assert_eq!(
        render(&msg, Style::Frame).expect("json"),
        r#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend": 42, "subtrahend":23},"id":1.0}"#
    );
}

#[test]
fn line_style_minifies_only_multiline_payloads() {
    let text = "{\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":{\n  \"a b\": \"x\\n y\",\n  \"c\": [1, 2]\n},\"id\":1}";
    let Inbound::Single(Item::Valid(msg)) = decode(text, 100) else {
        panic!()
    };
    assert_eq!(
        render(&msg, Style::Line).expect("json"),
        r#"{"jsonrpc":"2.0","method":"echo","params":{"a b":"x\n y","c":[1,2]},"id":1}"#
    );
}

#[test]
fn upstream_replies_decode() {
    let ok = decode_upstream(r#"{"jsonrpc":"2.0","result":{"a":1},"id":3}"#).expect("reply");
    assert!(matches!(ok, Message::Response { .. }));
    let err = decode_upstream(
        r#"{"jsonrpc":"2.0","error":{"code":-32603,"message":"session_id is required"},"id":null}"#,
    )
    .expect("reply");
    match err {
        Message::Error { id, error } => {
            assert_eq!(
                id.and_then(|i| i.as_json().map(str::to_owned)).as_deref(),
                Some("null")
            );
            assert_eq!(error.code, -32603);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        decode_upstream(r#"{"jsonrpc":"2.0","error":{"code":"x","message":"m"},"id":1}"#).is_err()
    );
    assert!(decode_upstream("nope").is_err());
    assert!(matches!(
        decode_upstream(r#"{"jsonrpc":"2.0","method":"tick"}"#),
        Ok(Message::Notification { .. })
    ));
}

#[test]
fn a_push_id_answers_its_number() {
    assert_eq!(push_number(&push_wire_id(42)), Some(42));
    assert_eq!(push_number(&WireId::string("42")), None);
    assert_eq!(push_number(&WireId::number(42)), None);
}
