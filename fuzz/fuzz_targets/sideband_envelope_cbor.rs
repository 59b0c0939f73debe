//! A Sideband CBOR (v2) envelope: decoding never panics, however deep,
//! indefinite, tagged or truncated the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::dialect::sideband::{decode_envelope, Encoding};

fuzz_target!(|data: &[u8]| {
    let _ = decode_envelope(data, Encoding::Cbor);
});
