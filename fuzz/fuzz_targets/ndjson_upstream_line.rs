//! One line from an NDJSON (or JSON-RPC WebSocket) upstream: decoding never
//! panics, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::dialect::jsonrpc;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = jsonrpc::decode_upstream(&bytestring::ByteString::from(text));
    }
});
