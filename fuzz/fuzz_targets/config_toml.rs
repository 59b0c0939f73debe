//! Configuration text: loading and validation never panic; every problem is
//! an error value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::config::Config;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Config::from_toml(text);
    }
});
