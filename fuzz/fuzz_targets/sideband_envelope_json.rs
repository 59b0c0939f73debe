//! A Sideband JSON (v1) envelope: decoding never panics; and its reading
//! by the JSON dialects' validating pass agrees with serde_json, its
//! oracle: the scan slices the same members serde_json reads, or refuses
//! what serde_json refuses, except for the texts it declines as unsure
//! (which the decoder hands to serde_json); and a whole decode gives what
//! serde_json's reading alone gives, message or error.
#![no_main]

use std::ops::Range;

use libfuzzer_sys::fuzz_target;
use switchyard::dialect::jsonrpc::scan;
use switchyard::dialect::sideband::{
    decode_envelope, decode_json_by_serde, Encoding, JsonMembers, Member,
};

fn range(text: &str, part: &str) -> Range<usize> {
    let start = part.as_ptr() as usize - text.as_ptr() as usize;
    start..start + part.len()
}

fn ranges(text: &str, m: &JsonMembers<'_>) -> [Option<Range<usize>>; 10] {
    Member::ALL.map(|member| m.get(member).map(|v| range(text, v)))
}

/// The reasons the scan may leave a text serde_json accepts to serde_json
/// (escaped member names, arrays, nesting deeper than the scan follows).
fn may_be_unsure(text: &str) -> bool {
    text.contains('\\')
        || text
            .trim_start_matches([' ', '\t', '\n', '\r'])
            .starts_with('[')
        || text.bytes().filter(|b| matches!(b, b'[' | b'{')).count() > scan::MAX_DEPTH
}

fn members_agree(text: &str) {
    match (JsonMembers::scan(text), JsonMembers::by_serde(text)) {
        (Ok(s), Ok(o)) => assert_eq!(ranges(text, &s), ranges(text, &o), "{text:?}"),
        (Err(scan::Declined::Invalid), Err(_)) => {}
        (Err(scan::Declined::Unsure), _) => assert!(may_be_unsure(text), "unsure: {text:?}"),
        (Ok(_), Err(e)) => panic!("scan accepts, serde_json: {e} in {text:?}"),
        (Err(scan::Declined::Invalid), Ok(_)) => panic!("scan refuses {text:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let decoded = decode_envelope(data, Encoding::Json);
    assert_eq!(decoded, decode_json_by_serde(data), "{data:?}");
    if let Ok(text) = std::str::from_utf8(data) {
        members_agree(text);
    }
});
