//! An SBP binary frame, under both subject rules: decoding never panics, and
//! a frame that decodes encodes back to a frame that decodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::dialect::sideband::{decode_with, encode, SubjectRules};

fuzz_target!(|data: &[u8]| {
    for rules in [SubjectRules::Current, SubjectRules::AcceptLegacy] {
        if let Ok(frame) = decode_with(data, rules) {
            let bytes = encode(&frame);
            let again = decode_with(&bytes, rules);
            assert_eq!(again.as_ref(), Ok(&frame), "frame round trip");
        }
    }
});
