//! An SBP handshake payload: parsing never panics, and a parsed handshake
//! serialises back to one that parses to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::dialect::sideband::Handshake;

fuzz_target!(|data: &[u8]| {
    if let Ok(hs) = Handshake::parse(data) {
        let again = Handshake::parse(&hs.to_bytes());
        assert_eq!(again.as_ref(), Ok(&hs), "handshake round trip");
    }
});
