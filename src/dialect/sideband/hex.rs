//! Lowercase hex for cids and peer ids (sideband.md §6: the reference
//! decoder rejects uppercase).

/// Lowercase hex of `bytes`.
pub(super) fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push(&mut out, bytes);
    out
}

/// Appends the lowercase hex of `bytes` to `out`.
pub(super) fn push(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

/// Exactly 32 lowercase hex characters as a 16-byte cid.
pub(super) fn decode_cid(text: &str) -> Option<[u8; 16]> {
    let digits = text.as_bytes();
    if digits.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (dst, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *dst = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}
