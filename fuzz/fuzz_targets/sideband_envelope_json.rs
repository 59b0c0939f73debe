//! A Sideband JSON (v1) envelope: decoding never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::dialect::sideband::{decode_envelope, Encoding};

fuzz_target!(|data: &[u8]| {
    let _ = decode_envelope(data, Encoding::Json);
});
