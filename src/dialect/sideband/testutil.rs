//! Helpers shared by the Sideband golden tests.

use super::frame::FrameId;

/// Bytes from a hex string (test vectors are written in hex).
pub(in crate::dialect) fn unhex(text: &str) -> Vec<u8> {
    let text: String = text.split_whitespace().collect();
    assert!(text.len().is_multiple_of(2), "odd hex length");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// Lowercase hex of bytes.
pub(super) fn tohex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The §9 fixed ids: `id(0x00)` is A (`000102…0f`), `id(0x10)` is B, …
pub(super) fn id(base: u8) -> FrameId {
    std::array::from_fn(|i| base + i as u8)
}

/// The §9 cid `2021…2f`.
pub(in crate::dialect) const CID_HEX: &str = "202122232425262728292a2b2c2d2e2f";
