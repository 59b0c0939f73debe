//! decode → encode → decode is stable for each dialect: the first byte picks
//! the codec, the rest is the input. A message that decodes is encoded, and
//! the encoding decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::dialect::jsonrpc::{minify_into, render, Style};
use bytestring::ByteString;
use switchyard::dialect::sideband::{decode_envelope, encode_envelope, Encoding};
use switchyard::dialect::{holon, jsonrpc, Inbound, Item};
use switchyard::envelope::{Message, Outcome, Payload, WireId};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    match pick % 4 {
        0 => text(input, Style::Frame, |t| jsonrpc::decode(&ByteString::from(t), 100)),
        1 => text(input, Style::Line, |t| jsonrpc::decode(&ByteString::from(t), 100)),
        2 => text(input, Style::Holon, |t| holon::decode(&ByteString::from(t))),
        _ => {
            for enc in [Encoding::Json, Encoding::Cbor] {
                if let Ok(msg) = decode_envelope(input, enc) {
                    // A payload the other encoding cannot carry is an error,
                    // never a panic; in its own encoding it always encodes.
                    let bytes = encode_envelope(&msg, enc).expect("re-encode");
                    let again = decode_envelope(&bytes, enc).expect("re-decode");
                    assert_eq!(again, msg, "{enc:?} envelope round trip");
                }
            }
        }
    }
});

/// Every valid message of a text dialect renders to text that decodes to the
/// same message.
fn text(input: &[u8], style: Style, decode: impl Fn(&str) -> Inbound) {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    let valid: Vec<Message> = match decode(text) {
        Inbound::Single(Item::Valid(m)) => vec![m],
        Inbound::Batch(items) => items
            .into_iter()
            .filter_map(|i| match i {
                Item::Valid(m) => Some(m),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    for msg in valid {
        let Ok(rendered) = render(&msg, style) else {
            continue;
        };
        let again = match decode(&rendered) {
            Inbound::Single(Item::Valid(again)) => again,
            other => panic!("{style:?}: {text:?} rendered as {rendered:?} decodes to {other:?}"),
        };
        // Encoding what was decoded is a fixed point.
        let rerendered = render(&again, style).expect("renders again");
        assert_eq!(rerendered, rendered, "{style:?}: {text:?} is not stable");
        if style == Style::Line {
            // NDJSON minifies raw values that hold line breaks (render.rs):
            // the same JSON, other bytes.
            // Compared minified (whitespace outside strings dropped), as
            // serde_json's Value cannot hold every number a raw value can.
            let frame = render(&msg, Style::Frame).expect("renders as a frame");
            let minified = |t: &str| {
                let mut out = String::new();
                minify_into(t, &mut out);
                out
            };
            assert_eq!(minified(&frame), minified(&rendered), "{text:?} as a line");
        } else {
            assert_eq!(
                again,
                expected(msg, style),
                "{style:?}: {text:?} rendered as {rendered:?}"
            );
        }
    }
}

/// What a message comes back as: itself, except that holon-rpc renders a
/// void result as `{}` (holon-rpc.md: browsers reject a reply without
/// `result`), and an error without an id is written with `"id":null`
/// (jsonrpc-ws.md §2: never omit it).
fn expected(msg: Message, style: Style) -> Message {
    match msg {
        Message::Error { id: None, error } => Message::Error {
            id: Some(WireId::null()),
            error,
        },
        Message::Response {
            id,
            result: Outcome::Void,
        } if style == Style::Holon => Message::Response {
            id,
            result: Outcome::Value(Payload::Json(
                serde_json::value::RawValue::from_string("{}".into())
                    .expect("valid JSON")
                    .into(),
            )),
        },
        other => other,
    }
}
