//! A JSON-RPC client text (WebSocket frame or NDJSON line): decoding never
//! panics, whatever the bytes; and the decoders' one validating pass
//! (`jsonrpc::scan`) agrees with serde_json, its oracle: it accepts exactly
//! what serde_json accepts, with the same slices, except for the texts it
//! declines as unsure (which the decoders hand to serde_json).
#![no_main]

use std::ops::Range;

use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;
use switchyard::dialect::jsonrpc::{self, scan};

fn range(text: &str, part: &str) -> Range<usize> {
    let start = part.as_ptr() as usize - text.as_ptr() as usize;
    start..start + part.len()
}

/// The reasons the scan may leave a text serde_json accepts to serde_json
/// (escaped member names, arrays, nesting deeper than the scan follows).
fn may_be_unsure(text: &str) -> bool {
    text.contains('\\')
        || text.trim_start_matches([' ', '\t', '\n', '\r']).starts_with('[')
        || text.bytes().filter(|b| matches!(b, b'[' | b'{')).count() > scan::MAX_DEPTH
}

fn object_agrees(text: &str) {
    let scanned = scan::object(text);
    match (scanned, jsonrpc::serde_members(text)) {
        (Ok(m), Ok(o)) => {
            let got = [m.jsonrpc, m.id, m.method, m.params, m.result, m.error];
            let want = [o.jsonrpc, o.id, o.method, o.params, o.result, o.error];
            for (g, w) in got.iter().zip(want) {
                assert_eq!(
                    g.map(|g| range(text, g)),
                    w.map(|w| range(text, w)),
                    "{text:?}"
                );
            }
        }
        (Err(scan::Declined::Invalid), Err(_)) => {}
        (Err(scan::Declined::Unsure), _) => assert!(may_be_unsure(text), "unsure: {text:?}"),
        (Ok(_), Err(e)) => panic!("scan accepts, serde_json: {e} in {text:?}"),
        (Err(scan::Declined::Invalid), Ok(_)) => panic!("scan refuses {text:?}"),
    }
}

fn array_agrees(text: &str) {
    let mut items = Vec::new();
    let scanned = scan::array(text, &mut items);
    match (scanned, serde_json::from_str::<Vec<&RawValue>>(text)) {
        (Ok(()), Ok(o)) => {
            let want: Vec<_> = o.iter().map(|v| range(text, v.get())).collect();
            let got: Vec<_> = items.iter().map(|v| range(text, v)).collect();
            assert_eq!(got, want, "{text:?}");
        }
        (Err(scan::Declined::Invalid), Err(_)) => {}
        (Err(scan::Declined::Unsure), _) => assert!(may_be_unsure(text), "unsure: {text:?}"),
        (Ok(()), Err(e)) => panic!("scan accepts, serde_json: {e} in {text:?}"),
        (Err(scan::Declined::Invalid), Ok(_)) => panic!("scan refuses {text:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = jsonrpc::decode(&bytestring::ByteString::from(text), 100);
        object_agrees(text);
        array_agrees(text);
    }
});
