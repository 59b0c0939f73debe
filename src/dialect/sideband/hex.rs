//! Lowercase hex for cids and peer ids (sideband.md §6: the reference
//! decoder rejects uppercase).

/// Lowercase hex of `bytes`.
pub(super) fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push(&mut out, bytes);
    out
}

/// Appends the lowercase hex of `bytes` to `out`: 16 bytes at a time
/// written into a buffer and appended whole (a cid in one append, not 32
/// pushes).
pub(super) fn push(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for chunk in bytes.chunks(16) {
        let mut buf = [0u8; 32];
        let (pairs, _) = buf.as_chunks_mut::<2>();
        for ([hi, lo], b) in pairs.iter_mut().zip(chunk) {
            *hi = DIGITS[usize::from(b >> 4)];
            *lo = DIGITS[usize::from(b & 0x0f)];
        }
        let digits = buf.get(..chunk.len() * 2).unwrap_or_default();
        // Hex digits are ASCII: the check cannot fail.
        out.push_str(std::str::from_utf8(digits).unwrap_or_default());
    }
}

/// Exactly 32 lowercase hex characters as a 16-byte cid.
pub(super) fn decode_cid(text: &str) -> Option<[u8; 16]> {
    let digits: &[u8; 32] = text.as_bytes().try_into().ok()?;
    let (pairs, _) = digits.as_chunks::<2>();
    let mut out = [0u8; 16];
    // Every digit's value is or-ed into `bad`, whose high bit only a
    // non-digit sets: one test at the end instead of one per digit.
    let mut bad = 0u8;
    for (dst, [hi, lo]) in out.iter_mut().zip(pairs) {
        let (hi, lo) = (NIBBLES[usize::from(*hi)], NIBBLES[usize::from(*lo)]);
        bad |= hi | lo;
        *dst = (hi << 4) | (lo & 0x0f);
    }
    (bad & NOT_HEX == 0).then_some(out)
}

/// What [`NIBBLES`] holds for a byte that is no lowercase hex digit.
const NOT_HEX: u8 = 0x80;

/// Each byte's value as a lowercase hex digit, [`NOT_HEX`] for the others.
const NIBBLES: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut c = 0;
    while c < 256 {
        table[c] = match c as u8 {
            b @ b'0'..=b'9' => b - b'0',
            b @ b'a'..=b'f' => b - b'a' + 10,
            _ => NOT_HEX,
        };
        c += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cid_is_exactly_32_lowercase_hex_digits() {
        let all: [u8; 16] = std::array::from_fn(|i| (i as u8) * 17);
        let text = encode(&all);
        assert_eq!(text, "00112233445566778899aabbccddeeff");
        assert_eq!(decode_cid(&text), Some(all));
        for at in 0..32 {
            for c in 0..=255u8 {
                let mut bytes = text.clone().into_bytes();
                bytes[at] = c;
                let Ok(odd) = String::from_utf8(bytes) else {
                    continue;
                };
                let want = (c.is_ascii_digit() || (b'a'..=b'f').contains(&c)).then(|| {
                    let mut cid = all;
                    let v = if c.is_ascii_digit() {
                        c - b'0'
                    } else {
                        c.wrapping_sub(b'a') + 10
                    };
                    cid[at / 2] = if at % 2 == 0 {
                        (v << 4) | (cid[at / 2] & 0x0f)
                    } else {
                        (cid[at / 2] & 0xf0) | v
                    };
                    cid
                });
                assert_eq!(decode_cid(&odd), want, "{odd:?}");
            }
        }
        for short in ["", "0011", &text[..31], &format!("{text}0")] {
            assert_eq!(decode_cid(short), None, "{short:?}");
        }
    }

    #[test]
    fn hex_is_lowercase_two_digits_a_byte_at_any_length() {
        for len in [0, 1, 15, 16, 17, 33] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 5) as u8).collect();
            let want: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(encode(&bytes), want);
        }
    }
}
