//! JSON string literals, written exactly as serde_json writes them: the
//! escape scan ([`unescaped_prefix`], which the validating pass
//! `jsonrpc::scan` also reads strings with) finds the long runs that need
//! no escape (padding, names, messages) in a few steps, and they are
//! copied whole. And read back out of a raw JSON value ([`text_method`]).

use std::borrow::Cow;

use crate::envelope::Method;

/// The string one JSON value's text holds, or `None` if it is no string.
/// The text is one that a validating pass has read (a slice
/// `jsonrpc::scan` gives, or a `RawValue`'s). A string without escapes (a
/// method name, an id, nearly always) is borrowed: the text between its
/// quotes, which that pass has checked already, so it is not parsed a
/// second time.
pub(crate) fn text_string(text: &str) -> Option<Cow<'_, str>> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

/// [`text_string`] as a method name (inline up to 24 bytes).
pub(crate) fn text_method(text: &str) -> Option<Method> {
    text_string(text).map(|text| Method::from(text.as_ref()))
}

/// Eight copies of `byte` in a word.
const fn splat(byte: u8) -> u64 {
    u64::from_le_bytes([byte; 8])
}

/// The high bit of every byte of `word` (read little-endian) that JSON
/// must escape (`"`, `\\`, a control byte below 0x20), by the classic
/// word tricks: a byte below `n` (n <= 0x80) sets its bit in
/// `(x - splat(n)) & !x`, and a byte equal to `b` is a byte below 1 in
/// `x ^ splat(b)`. The subtraction's borrow can set a bit above a true
/// one, never below it: the lowest set bit is exact, which is all the
/// callers read.
fn stop_bits(word: u64) -> u64 {
    let below = |x: u64, n: u8| x.wrapping_sub(splat(n)) & !x;
    let quote = word ^ splat(b'"');
    let backslash = word ^ splat(b'\\');
    (below(word, 0x20) | below(quote, 1) | below(backslash, 1)) & splat(0x80)
}

/// The index of the first byte of `word` that JSON must escape (which
/// also ends a string's plain run when reading one), if any.
fn first_stop(word: &[u8; 8]) -> Option<usize> {
    let bits = stop_bits(u64::from_le_bytes(*word));
    // At most 63 / 8: the cast cannot truncate.
    (bits != 0).then(|| (bits.trailing_zeros() / 8) as usize)
}

/// Words read one by one before the rest is searched.
const FIRST_WORDS: usize = 2;

/// The length of the longest prefix of `bytes` holding nothing JSON must
/// escape: no `"`, no `\` and no control byte below 0x20. That is also a
/// string's plain run when reading one: what ends it is its closing quote,
/// an escape, or a control character JSON refuses. Most strings (names,
/// versions, methods, ids) end within their first [`FIRST_WORDS`]
/// eight-byte words, which a few word operations each tell (no vector
/// set-up, the exact position); in a longer one, memchr (AVX2 where the
/// CPU has it) searches for the quote or backslash, and a vector minimum
/// checks the run before it for control characters.
// Inlined into the validating pass's string loop, as it was when it was
// the pass's own.
#[inline]
pub(crate) fn unescaped_prefix(bytes: &[u8]) -> usize {
    let mut at = 0;
    for _ in 0..FIRST_WORDS {
        let Some(word) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) else {
            let tail = bytes.get(at..).unwrap_or_default();
            return at
                + tail
                    .iter()
                    .position(|&b| needs_escape(b))
                    .unwrap_or(tail.len());
        };
        if let Some(i) = first_stop(word) {
            return at + i;
        }
        at += 8;
    }
    let rest = bytes.get(at..).unwrap_or_default();
    let end = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    let run = rest.get(..end).unwrap_or_default();
    if run.iter().fold(u8::MAX, |low, &b| low.min(b)) < 0x20 {
        return at + run.iter().position(|&b| b < 0x20).unwrap_or(end);
    }
    at + end
}

fn needs_escape(byte: u8) -> bool {
    (byte < 0x20) | (byte == b'"') | (byte == b'\\')
}

/// Appends `text` as a JSON string literal, escaped as serde_json escapes
/// it (`\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other control bytes as
/// `\u00xx`; everything else as is).
pub(crate) fn push_json_string(out: &mut String, text: &str) {
    out.reserve(text.len() + 2);
    out.push('"');
    let mut rest = text;
    loop {
        // Every byte that needs an escape is ASCII, so the cut falls on a
        // character boundary.
        let (run, tail) = rest
            .split_at_checked(unescaped_prefix(rest.as_bytes()))
            .unwrap_or((rest, ""));
        out.push_str(run);
        let Some(&byte) = tail.as_bytes().first() else {
            break;
        };
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => push_unicode_escape(out, byte),
        }
        rest = tail.get(1..).unwrap_or_default();
    }
    out.push('"');
}

/// `\u00XX` for a control byte, lowercase hex as serde_json writes it.
fn push_unicode_escape(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u00");
    out.push(char::from(HEX[usize::from(byte >> 4)]));
    out.push(char::from(HEX[usize::from(byte & 0xf)]));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::value::RawValue;

    use super::{push_json_string, text_method, unescaped_prefix};

    proptest::proptest! {
        /// Read back exactly as serde_json reads it, written plainly or
        /// with escapes serde_json does not write (`\u` for every
        /// character).
        #[test]
        fn a_raw_string_reads_as_serde_json_reads_it(text in "(?s).{0,40}") {
            let plain = serde_json::to_string(&text).unwrap();
            let escaped: String = text
                .encode_utf16()
                .map(|unit| format!("\\u{unit:04x}"))
                .collect();
            for literal in [plain, format!("\"{escaped}\"")] {
                let raw: &RawValue = serde_json::from_str(&literal).unwrap();
                let read = text_method(raw.get());
                proptest::prop_assert_eq!(read.as_deref(), Some(text.as_str()));
            }
        }

        /// Escaped exactly as serde_json escapes a string, whatever it holds.
        #[test]
        fn a_string_is_escaped_as_serde_json_escapes_it(text in "(?s).{0,64}") {
            let mut out = String::from("x");
            push_json_string(&mut out, &text);
            proptest::prop_assert_eq!(&out[1..], serde_json::to_string(&text).unwrap());
        }

        /// Mostly plain text with a rare byte to escape anywhere: the
        /// word-at-a-time scan stops exactly where a byte-by-byte one does.
        #[test]
        fn the_scan_stops_at_the_first_byte_to_escape(
            text in "[a-zA-Z0-9 é~\u{7f}]{0,40}[\"\\\\\u{0}-\u{1f}]?[a-z]{0,20}",
        ) {
            let expected = text
                .bytes()
                .position(|b| b < 0x20 || b == b'"' || b == b'\\')
                .unwrap_or(text.len());
            proptest::prop_assert_eq!(unescaped_prefix(text.as_bytes()), expected);
            let mut out = String::new();
            push_json_string(&mut out, &text);
            proptest::prop_assert_eq!(out, serde_json::to_string(&text).unwrap());
        }

        /// Any bytes: the run ends where a byte-by-byte loop ends it.
        #[test]
        fn a_plain_run_ends_where_a_byte_loop_ends_it(
            bytes in proptest::prelude::prop::collection::vec(
                proptest::prop_oneof![
                    8 => proptest::prelude::prop::sample::select(PLAIN.to_vec()),
                    1 => proptest::prelude::prop::sample::select(STOPS.to_vec()),
                    1 => proptest::prelude::any::<u8>(),
                ],
                0..120,
            ),
        ) {
            proptest::prop_assert_eq!(unescaped_prefix(&bytes), plain_run_by_bytes(&bytes));
        }
    }

    /// A string's plain run as a byte-by-byte loop reads it.
    fn plain_run_by_bytes(bytes: &[u8]) -> usize {
        bytes
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
            .unwrap_or(bytes.len())
    }

    /// Bytes that end a plain run, and bytes that do not (each stop's
    /// neighbours, non-ASCII bytes), for the word and chunk checks.
    const STOPS: [u8; 6] = [b'"', b'\\', 0x00, 0x01, 0x1f, 0x0a];
    const PLAIN: [u8; 10] = [b'a', b' ', b'!', b'#', b'[', b']', 0x7f, 0x80, 0xa2, 0xff];

    /// Every length up to past three chunks, a stop at every position (with
    /// another right after it, which a word's borrow could flag), over every
    /// plain byte: the run ends exactly at the first stop.
    #[test]
    fn a_plain_run_ends_at_its_first_stop_at_every_length_and_position() {
        for len in 0..=110 {
            for filler in PLAIN {
                let plain = vec![filler; len];
                assert_eq!(unescaped_prefix(&plain), len, "{len} × {filler:#x}");
                for at in 0..len {
                    for stop in STOPS {
                        let mut bytes = plain.clone();
                        bytes[at] = stop;
                        assert_eq!(unescaped_prefix(&bytes), at, "{stop:#x} at {at} of {len}");
                        for next in STOPS {
                            if let Some(b) = bytes.get_mut(at + 1) {
                                *b = next;
                            }
                            assert_eq!(unescaped_prefix(&bytes), at, "{stop:#x}{next:#x} at {at}");
                        }
                    }
                }
            }
        }
    }

    /// Each byte that needs an escape is found at every position of a
    /// word, and the bytes just beside the limits (0x1f/0x20, 0x21/0x23,
    /// 0x5b/0x5d, 0x7f, 0x80 and above) are not.
    #[test]
    fn every_escaped_byte_is_found_at_every_offset() {
        for len in 0..24 {
            let plain = vec![b'a'; len];
            assert_eq!(unescaped_prefix(&plain), len);
            for at in 0..len {
                for byte in (0u8..0x20).chain([b'"', b'\\']) {
                    let mut text = plain.clone();
                    text[at] = byte;
                    assert_eq!(unescaped_prefix(&text), at, "{byte:#x} at {at} of {len}");
                }
                for byte in [0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff] {
                    let mut text = plain.clone();
                    text[at] = byte;
                    assert_eq!(unescaped_prefix(&text), len, "{byte:#x} at {at} of {len}");
                }
            }
        }
    }

    #[test]
    fn only_strings_have_a_string_value() {
        for (text, value) in [
            (r#""subtract""#, Some("subtract")),
            (r#""a\/b\n""#, Some("a/b\n")),
            (r#""""#, Some("")),
            ("12", None),
            ("null", None),
            (r#"["x"]"#, None),
            (r#"{"a":"b"}"#, None),
        ] {
            let raw: &RawValue = serde_json::from_str(text).unwrap();
            assert_eq!(text_method(raw.get()).as_deref(), value, "{text}");
        }
    }

    #[test]
    fn control_bytes_and_quotes_are_escaped() {
        let text = "a\"b\\c\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}é😀";
        let mut out = String::new();
        push_json_string(&mut out, text);
        assert_eq!(out, serde_json::to_string(text).unwrap());
        assert_eq!(out, "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0000\\u001f\u{7f}é😀\"");
    }
}
