//! JSON → CBOR (§7) in one walk over the JSON text, writing as it reads.
//!
//! The text is a `RawValue`, so it is already known to be JSON: the walk
//! finds token boundaries and converts, it does not validate (anything
//! unexpected is still an error, never a panic). Strings without escapes
//! are copied straight from the text; only escaped ones are decoded, by
//! serde_json. A container's CBOR head needs its item count, known at its
//! end: one byte is held for it, and the rare longer head is rotated in.

use std::ops::Range;

use smallvec::SmallVec;

use super::{nest, scalar, TranscodeError};
use crate::dialect::json_string::unescaped_prefix;
use crate::dialect::sideband::cbor;

/// Members an object may have before its duplicates are found by sorting
/// instead of comparing each key with the others.
const FEW_KEYS: usize = 16;

/// Appends the CBOR form of the JSON value `text` to `out`.
pub(super) fn transcode(text: &str, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    let mut walk = Walk {
        src: text,
        text: text.as_bytes(),
        pos: 0,
        out,
        members: SmallVec::new(),
    };
    walk.value(0)?;
    walk.skip_space();
    if walk.pos != walk.text.len() {
        return Err(unexpected(walk.pos));
    }
    Ok(())
}

/// A walk over one JSON text.
struct Walk<'a> {
    src: &'a str,
    /// `src`'s bytes.
    text: &'a [u8],
    pos: usize,
    out: &'a mut Vec<u8>,
    /// The members of the objects being walked, innermost last: where
    /// each key and value was written in `out`. The first few are held
    /// without an allocation.
    members: SmallVec<[Member; 8]>,
}

/// One object member, as ranges of the CBOR written so far.
#[derive(Clone)]
struct Member {
    key: Range<usize>,
    value: Range<usize>,
}

impl<'a> Walk<'a> {
    /// Converts the value at `pos` (after any whitespace), nested `depth`
    /// containers deep.
    fn value(&mut self, depth: usize) -> Result<(), TranscodeError> {
        self.skip_space();
        match self.peek() {
            Some(b'{') => self.object(nest(depth)?),
            Some(b'[') => self.array(nest(depth)?),
            Some(b'"') => self.string(),
            Some(b't') => self.literal("true", 0xf5),
            Some(b'f') => self.literal("false", 0xf4),
            Some(b'n') => self.literal("null", 0xf6),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(unexpected(self.pos)),
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), TranscodeError> {
        self.pos += 1;
        let head = self.hold_head();
        let mut count = 0;
        if !self.eat(b']') {
            loop {
                self.value(depth)?;
                count += 1;
                if self.eat(b',') {
                    continue;
                }
                self.expect(b']')?;
                break;
            }
        }
        self.put_head(head, cbor::MAJOR_ARRAY, count);
        Ok(())
    }

    fn object(&mut self, depth: usize) -> Result<(), TranscodeError> {
        self.pos += 1;
        let head = self.hold_head();
        let base = self.members.len();
        if !self.eat(b'}') {
            loop {
                self.skip_space();
                let key_start = self.out.len();
                if self.peek() != Some(b'"') {
                    return Err(unexpected(self.pos));
                }
                self.string()?;
                let key = key_start..self.out.len();
                self.expect(b':')?;
                self.value(depth)?;
                let value = key.end..self.out.len();
                self.members.push(Member { key, value });
                if self.eat(b',') {
                    continue;
                }
                self.expect(b'}')?;
                break;
            }
        }
        let count = self.drop_duplicates(base, head + 1);
        self.members.truncate(base);
        self.put_head(head, cbor::MAJOR_MAP, count);
        Ok(())
    }

    /// A repeated key keeps its first place and takes its last value
    /// (§7). Rewrites the members from `body` on when a key repeats, and
    /// returns how many members are left.
    fn drop_duplicates(&mut self, base: usize, body: usize) -> u64 {
        let members = self.members.get(base..).unwrap_or_default();
        let out: &[u8] = self.out;
        let Some(winners) = winners(members, |m| out.get(m.key.clone()).unwrap_or_default()) else {
            return members.len() as u64;
        };
        let mut rebuilt = Vec::with_capacity(out.len().saturating_sub(body));
        let mut kept = 0;
        for (m, won) in members.iter().zip(&winners) {
            if let Some(w) = won.and_then(|w| members.get(w)) {
                rebuilt.extend_from_slice(out.get(m.key.clone()).unwrap_or_default());
                rebuilt.extend_from_slice(out.get(w.value.clone()).unwrap_or_default());
                kept += 1;
            }
        }
        self.out.truncate(body);
        self.out.extend_from_slice(&rebuilt);
        kept
    }

    /// A string token, as CBOR text: copied as is when nothing in it is
    /// escaped, decoded by serde_json otherwise.
    fn string(&mut self) -> Result<(), TranscodeError> {
        let start = self.pos;
        let body = start + 1;
        // In JSON text the first `"`, `\` or control byte after the
        // opening quote is the closing quote or an escape.
        let mut at = body + unescaped_prefix(self.rest(body));
        if self.text.get(at) == Some(&b'"') {
            let text = self.slice(body..at)?;
            cbor::write_text(self.out, text);
            self.pos = at + 1;
            return Ok(());
        }
        while self.text.get(at) == Some(&b'\\') {
            at += 2;
            at += unescaped_prefix(self.rest(at));
        }
        if self.text.get(at) != Some(&b'"') {
            return Err(unexpected(at));
        }
        let token = self.slice(start..at + 1)?;
        let decoded: String =
            serde_json::from_str(token).map_err(|e| TranscodeError::Json(e.to_string()))?;
        cbor::write_text(self.out, &decoded);
        self.pos = at + 1;
        Ok(())
    }

    fn number(&mut self) -> Result<(), TranscodeError> {
        let start = self.pos;
        let len = self
            .rest(start)
            .iter()
            .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .unwrap_or(self.text.len() - start);
        self.pos = start + len;
        let token = self.slice(start..self.pos)?;
        number(token, self.out)
    }

    fn literal(&mut self, word: &str, byte: u8) -> Result<(), TranscodeError> {
        if !self.rest(self.pos).starts_with(word.as_bytes()) {
            return Err(unexpected(self.pos));
        }
        self.pos += word.len();
        self.out.push(byte);
        Ok(())
    }

    /// Holds one byte for a container's head; returns where it is.
    fn hold_head(&mut self) -> usize {
        self.out.push(0);
        self.out.len() - 1
    }

    /// Writes the head held at `at`: in place when it is one byte (fewer
    /// than 24 items), else spliced in.
    fn put_head(&mut self, at: usize, major: u8, count: u64) {
        if count < 24 {
            if let Some(held) = self.out.get_mut(at) {
                *held = (major << 5) | count as u8;
            }
            return;
        }
        let mut head = Vec::with_capacity(9);
        cbor::write_head(&mut head, major, count);
        self.out.splice(at..at + 1, head);
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Skips whitespace, then `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        let found = self.peek() == Some(byte);
        if found {
            self.pos += 1;
        }
        found
    }

    fn expect(&mut self, byte: u8) -> Result<(), TranscodeError> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(unexpected(self.pos))
        }
    }

    /// A part of the text cut at ASCII bytes, so always on character
    /// boundaries.
    fn slice(&self, range: Range<usize>) -> Result<&'a str, TranscodeError> {
        let start = range.start;
        self.src.get(range).ok_or_else(|| unexpected(start))
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn rest(&self, from: usize) -> &[u8] {
        self.text.get(from..).unwrap_or_default()
    }
}

/// For each member, the member whose value it takes (the last with its
/// key), or `None` when an earlier member has its key; `None` overall when
/// no key repeats. Few members are compared pairwise, with no allocation;
/// more are sorted by (key, position), which puts each key's first and
/// last members at the ends of one run: no hashing, so no flooding.
fn winners<'k>(
    members: &[Member],
    key: impl Fn(&Member) -> &'k [u8],
) -> Option<Vec<Option<usize>>> {
    let mut winners: Vec<Option<usize>>;
    if members.len() <= FEW_KEYS {
        let repeats = |i: usize| {
            let m = members.get(i)?;
            let later = members.get(i + 1..)?;
            later
                .iter()
                .rposition(|l| key(l) == key(m))
                .map(|j| i + 1 + j)
        };
        if !(0..members.len()).any(|i| repeats(i).is_some()) {
            return None;
        }
        winners = (0..members.len()).map(Some).collect();
        for i in 0..members.len() {
            if winners.get(i).is_some_and(Option::is_some) {
                if let Some(last) = repeats(i) {
                    winners[i] = Some(last);
                    for (j, m) in members.iter().enumerate().skip(i + 1) {
                        if key(m) == key(&members[i]) {
                            winners[j] = None;
                        }
                    }
                }
            }
        }
    } else {
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by(|&a, &b| key(&members[a]).cmp(key(&members[b])).then(a.cmp(&b)));
        let same = |a: &usize, b: &usize| key(&members[*a]) == key(&members[*b]);
        if !order.windows(2).any(|w| same(&w[0], &w[1])) {
            return None;
        }
        winners = (0..members.len()).map(Some).collect();
        for run in order.chunk_by(same) {
            if let [first, rest @ ..] = run {
                if let Some(&last) = rest.last() {
                    winners[*first] = Some(last);
                    for &later in rest {
                        winners[later] = None;
                    }
                }
            }
        }
    }
    Some(winners)
}

/// A JSON number token: an integer (a bignum past 64 bits), or a float64.
fn number(token: &str, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    if token.contains(['.', 'e', 'E']) {
        let value: f64 = token
            .parse()
            .map_err(|_| TranscodeError::Json(format!("bad number {token}")))?;
        if !value.is_finite() {
            return Err(TranscodeError::FloatOverflow(token.to_owned()));
        }
        cbor::write_f64(out, value);
        return Ok(());
    }
    let (negative, digits) = match token.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, token),
    };
    if !negative {
        if let Ok(n) = digits.parse::<u64>() {
            cbor::write_head(out, cbor::MAJOR_UINT, n);
            return Ok(());
        }
    } else if let Ok(m) = digits.parse::<u128>() {
        // -m with 1 ≤ m ≤ 2⁶⁴ is a CBOR negative integer -1 - (m - 1).
        match m.checked_sub(1).map(u64::try_from) {
            None => {
                // "-0": integer zero.
                cbor::write_head(out, cbor::MAJOR_UINT, 0);
                return Ok(());
            }
            Some(Ok(n)) => {
                cbor::write_head(out, cbor::MAJOR_NINT, n);
                return Ok(());
            }
            Some(Err(_)) => {}
        }
    }
    let magnitude =
        scalar::decimal_to_bignum(digits, negative).ok_or(TranscodeError::BignumTooLarge)?;
    cbor::write_head(out, cbor::MAJOR_TAG, if negative { 3 } else { 2 });
    cbor::write_bytes(out, &magnitude);
    Ok(())
}

fn unexpected(at: usize) -> TranscodeError {
    TranscodeError::Json(format!("unexpected JSON at byte {at}"))
}
