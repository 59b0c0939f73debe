//! JSON → CBOR → JSON gives the same JSON value under sideband.md §7
//! (integers exact, floats to the nearest float64, last duplicate key wins),
//! and CBOR → JSON → CBOR gives the same bytes back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;
use serde_json::Value;
use switchyard::dialect::sideband::{cbor_to_json, json_to_cbor};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(raw) = serde_json::from_str::<&RawValue>(text) else {
        return;
    };
    // Refused values (float overflow, nesting too deep) are errors, not panics.
    let Ok(cbor) = json_to_cbor(raw) else {
        return;
    };
    let json = cbor_to_json(&cbor).expect("switchyard's own CBOR transcodes back");
    let before: Value = serde_json::from_str(raw.get()).expect("valid JSON");
    let after: Value = serde_json::from_str(json.get()).expect("transcoder writes JSON");
    assert_eq!(before, after, "JSON {text} came back as {}", json.get());
    let cbor_again = json_to_cbor(&json).expect("transcoded JSON transcodes");
    assert_eq!(cbor, cbor_again, "CBOR of {text} is not stable");
});
