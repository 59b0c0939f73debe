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
    // A raw value may hold what a Value refuses (a lone surrogate escape in
    // a duplicate key's earlier value, which the transcoder drops: the last
    // one wins); there is nothing to compare against then.
    let Ok(before) = serde_json::from_str::<Value>(raw.get()) else {
        return;
    };
    let after: Value = serde_json::from_str(json.get()).expect("transcoder writes JSON");
    assert!(
        same(&before, &after),
        "JSON {text} came back as {}",
        json.get()
    );
    let cbor_again = json_to_cbor(&json).expect("transcoded JSON transcodes");
    assert_eq!(cbor, cbor_again, "CBOR of {text} is not stable");
});

/// Equal JSON values, numbers compared by value: `-0` (an integer token,
/// which serde_json reads as the float -0.0) comes back as the integer `0`,
/// as the transcoding rules say (no fraction, no exponent: an integer).
/// Floats are read correctly rounded (serde_json's `float_roundtrip`, in
/// this crate only), as the transcoder reads them.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_u64(), y.as_u64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_i64(), y.as_i64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}
