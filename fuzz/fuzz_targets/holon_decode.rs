//! A holon-rpc text frame: decoding never panics, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::dialect::holon;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = holon::decode(&bytestring::ByteString::from(text));
    }
});
