//! One validating pass over a JSON-RPC text: the members the decoders use
//! (`jsonrpc`, `id`, `method`, `params`, `result`, `error`) sliced out of
//! the text, every other byte validated as JSON and skipped, nothing
//! decoded, copied or allocated.
//!
//! serde_json is the oracle: [`object`] returns members exactly when
//! `serde_json::from_str` of a struct with those six members (each a
//! borrowed `&RawValue`) succeeds, with the same slices
//! (`RawValue::get()`). The rules it follows are serde_json's: JSON
//! whitespace only (space, `\t`, `\n`, `\r`), control characters refused in
//! strings, any `\u` followed by four hex digits accepted in a string it
//! skips (a lone surrogate included, as serde_json's skip does), JSON's
//! number grammar with no range check, unknown members skipped, a second
//! known member refused, nothing but whitespace after the value. Whatever
//! it does not accept it declines ([`Declined`]), and the decoders then ask
//! serde_json, which gives the error (class and text) they give today:
//! rejections are rare, so a rejected text pays for two passes and an
//! accepted one for this one. It also declines, as [`Declined::Unsure`],
//! three things serde_json may accept, for serde_json to settle: a member
//! name with an escape (serde_json compares names after unescaping, and
//! refuses a lone surrogate there), a text that is an array (serde_json
//! fills a struct from an array, member by member in order), and nesting
//! deeper than [`MAX_DEPTH`] (serde_json skips values of any depth).
//!
//! A string is checked for a quote, a backslash or a control character
//! eight bytes at a time by word arithmetic for its first 16 bytes (most
//! names, versions, methods and ids end there: a few operations each, no
//! vector set-up, the exact position); the rest of a longer one by
//! memchr's SIMD search for the quote or backslash and a vector minimum
//! (plain code the compiler vectorises: the crate has no `unsafe`).
//!
//! The scan also tells whether the text holds a raw line break
//! ([`Members::flat`]): valid JSON has one only as whitespace between
//! tokens, which the scan skips anyway, so an NDJSON line copies a value
//! from a text without one and need not search it.
//!
//! Bound: the scan keeps one bit per open array or object on the stack
//! ([`MAX_DEPTH`] bits, 64 bytes), no allocation; [`array()`] pushes one
//! slice per item into the caller's vector (the batch's item list, which
//! the decoder builds anyway).
//!
//! Why not a crate. `sonic-rs` (0.5) accepts `"\u12G4"` in a string it
//! skips, which serde_json refuses, and overflows its stack on a value
//! nested 3,000 deep; `jiter` (0.19) refuses lone surrogates in strings it
//! skips and values nested deeper than 200, both of which serde_json
//! accepts, brings nine more crates (bitvec, num-bigint, lexical, ahash…)
//! and reads strings a byte at a time. This pass is serde_json's grammar
//! over word compares and `memchr`.

use crate::dialect::json_string::unescaped_prefix;
use crate::envelope::Flat;

/// Deepest nesting of arrays and objects the scan follows; a text nested
/// deeper is declined as [`Declined::Unsure`] (serde_json skips any depth).
pub const MAX_DEPTH: usize = 512;

/// The members of one JSON-RPC object, as slices of the text scanned.
/// `Some` means present, even when the value is `null`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Members<'a> {
    /// `jsonrpc`.
    pub jsonrpc: Option<&'a str>,
    /// `id`.
    pub id: Option<&'a str>,
    /// `method`.
    pub method: Option<&'a str>,
    /// `params`.
    pub params: Option<&'a str>,
    /// `result`.
    pub result: Option<&'a str>,
    /// `error`.
    pub error: Option<&'a str>,
    /// Whether a member other than these six was skipped (JSON-RPC
    /// ignores them; holon-rpc names one in its error, so it reads such a
    /// text again).
    pub unknown: bool,
    /// Whether the text holds no raw line break (`\n`, `\r`: whitespace
    /// between tokens, the only place valid JSON has one), so neither do
    /// its members: an NDJSON line copies them without a search.
    pub(crate) flat: Flat,
}

/// Why the scan gave no answer; the decoders ask serde_json either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Declined {
    /// serde_json refuses the text too: not JSON, trailing characters, not
    /// an object (nor an array), or a known member twice.
    Invalid,
    /// serde_json may accept it: a member name with an escape, an array,
    /// or nesting deeper than [`MAX_DEPTH`].
    Unsure,
}

/// Scans `text` as one JSON object and slices its known members.
pub fn object(text: &str) -> Result<Members<'_>, Declined> {
    let mut members = Members::default();
    object_of(text, &mut members)?;
    Ok(members)
}

/// The member names an object scan slices out: one dialect's envelope
/// (JSON-RPC's six in [`Members`]; Sideband's ten in its JSON envelope).
/// Every name is known to hold nothing to escape.
pub(crate) trait Names<'a> {
    /// The slot of the known member whose name, then its closing quote,
    /// `rest` (the text after the name's opening quote) starts with, and
    /// the length of that name and quote; `None` for any other name.
    fn slot(&mut self, rest: &[u8]) -> Option<(usize, &mut Option<&'a str>)>;

    /// A member of another name was skipped.
    fn unknown(&mut self) {}

    /// The text scanned holds no raw line break (told once the scan
    /// succeeds).
    fn flat(&mut self) {}
}

/// [`object`] for any set of known names: scans `text` as one JSON object
/// into `names`' slots, by the same rules (a known member twice is
/// [`Declined::Invalid`], as serde_json refuses a struct field twice). On
/// `Err`, some slots may be filled.
pub(crate) fn object_of<'a>(text: &'a str, names: &mut impl Names<'a>) -> Result<(), Declined> {
    let mut cur = Cursor::new(text);
    members_of(text, &mut cur, names)?;
    if !cur.breaks {
        names.flat();
    }
    Ok(())
}

/// [`object_of`]'s scan, with `cur` at the start of `text` (inlined: the
/// cursor stays in registers).
#[inline(always)]
fn members_of<'a>(
    text: &'a str,
    cur: &mut Cursor<'a>,
    names: &mut impl Names<'a>,
) -> Result<(), Declined> {
    cur.ws();
    match cur.rest.split_first() {
        Some((b'{', tail)) => cur.rest = tail,
        Some((b'[', _)) => return Err(Declined::Unsure),
        _ => return Err(Declined::Invalid),
    }
    cur.ws();
    if cur.eat(b'}') {
        return cur.end();
    }
    loop {
        if !cur.eat(b'"') {
            return Err(Declined::Invalid);
        }
        let slot = match names.slot(cur.rest) {
            Some((_, slot)) if slot.is_some() => return Err(Declined::Invalid),
            Some((len, slot)) => {
                cur.skip(len);
                Some(slot)
            }
            None => {
                // Any other name without an escape is no known one.
                if cur.string()? {
                    return Err(Declined::Unsure);
                }
                names.unknown();
                None
            }
        };
        cur.ws();
        if !cur.eat(b':') {
            return Err(Declined::Invalid);
        }
        cur.ws();
        let start = cur.pos();
        cur.member_value()?;
        if let Some(slot) = slot {
            *slot = text.get(start..cur.pos());
        }
        cur.ws();
        match cur.next() {
            Some(b',') => cur.ws(),
            Some(b'}') => return cur.end(),
            _ => return Err(Declined::Invalid),
        }
    }
}

/// Scans `text` as one JSON array, pushing each item's slice onto `items`
/// (what serde_json gives for a `Vec<&RawValue>`). On `Err`, `items` may
/// hold some of the items.
pub fn array<'a>(text: &'a str, items: &mut Vec<&'a str>) -> Result<(), Declined> {
    let mut cur = Cursor::new(text);
    cur.ws();
    if !cur.eat(b'[') {
        return Err(Declined::Invalid);
    }
    cur.ws();
    if cur.eat(b']') {
        return cur.end();
    }
    loop {
        let start = cur.pos();
        cur.value()?;
        items.extend(text.get(start..cur.pos()));
        cur.ws();
        match cur.next() {
            Some(b',') => cur.ws(),
            Some(b']') => return cur.end(),
            _ => return Err(Declined::Invalid),
        }
    }
}

/// For [`Names::slot`]: `slot` if `rest` starts with `quoted` (a known
/// name and its closing quote), with the length to skip. A comparison of a
/// known length, which the compiler makes a word compare or two.
#[inline]
pub(crate) fn name<'s, 'a, const N: usize>(
    rest: &[u8],
    quoted: &[u8; N],
    slot: &'s mut Option<&'a str>,
) -> Option<(usize, &'s mut Option<&'a str>)> {
    (rest.get(..N) == Some(quoted.as_slice())).then_some((N, slot))
}

/// A position in the text scanned: the text not yet scanned, a slice
/// that shrinks from the front (its first byte is read and dropped with no
/// index to check against the text's length).
struct Cursor<'a> {
    rest: &'a [u8],
    /// The whole text's length: the position is `len - rest.len()`.
    len: usize,
    /// A raw line break was skipped as whitespace.
    breaks: bool,
}

/// Open arrays and objects: one bit per level, set for an object.
struct Nesting {
    bits: [u64; MAX_DEPTH / 64],
    depth: usize,
}

// === impl Members ===

impl<'a> Names<'a> for Members<'a> {
    // Inlined into the scan's loop (a call per member otherwise: the
    // scan is instantiated in its callers' code units, this is not).
    #[inline]
    fn slot(&mut self, rest: &[u8]) -> Option<(usize, &mut Option<&'a str>)> {
        // One comparison of a known length per name, picked by its first
        // byte.
        match rest.first()? {
            b'j' => name(rest, b"jsonrpc\"", &mut self.jsonrpc),
            b'i' => name(rest, b"id\"", &mut self.id),
            b'm' => name(rest, b"method\"", &mut self.method),
            b'p' => name(rest, b"params\"", &mut self.params),
            b'r' => name(rest, b"result\"", &mut self.result),
            b'e' => name(rest, b"error\"", &mut self.error),
            _ => None,
        }
    }

    fn unknown(&mut self) {
        self.unknown = true;
    }

    fn flat(&mut self) {
        self.flat = Flat::Yes;
    }
}

// === impl Cursor ===

impl<'a> Cursor<'a> {
    fn new(text: &'a str) -> Self {
        Cursor {
            rest: text.as_bytes(),
            len: text.len(),
            breaks: false,
        }
    }

    /// How many bytes of the text were scanned (`rest` is a suffix of
    /// the text: no underflow).
    fn pos(&self) -> usize {
        self.len - self.rest.len()
    }

    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn next(&mut self) -> Option<u8> {
        let (&b, tail) = self.rest.split_first()?;
        self.rest = tail;
        Some(b)
    }

    /// Drops the next `n` bytes (all that is left if fewer).
    fn skip(&mut self, n: usize) {
        self.rest = self.rest.get(n..).unwrap_or_default();
    }

    /// Consumes `b` if it comes next.
    fn eat(&mut self, b: u8) -> bool {
        match self.rest.split_first() {
            Some((&first, tail)) if first == b => {
                self.rest = tail;
                true
            }
            _ => false,
        }
    }

    /// Skips JSON whitespace, noting a line break. Most texts have none
    /// between their tokens: one compare, inlined, tells that.
    #[inline(always)]
    fn ws(&mut self) {
        if let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.skip_ws();
        }
    }

    /// [`ws`](Cursor::ws) where there is some.
    #[inline(never)]
    fn skip_ws(&mut self) {
        while let [b @ (b' ' | b'\t' | b'\n' | b'\r'), tail @ ..] = self.rest {
            self.breaks |= matches!(b, b'\n' | b'\r');
            self.rest = tail;
        }
    }

    /// Nothing but whitespace is left.
    fn end(&mut self) -> Result<(), Declined> {
        self.ws();
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(Declined::Invalid)
        }
    }

    /// Consumes `word` if it comes next (a comparison of a known length,
    /// which the compiler makes a word compare or two).
    fn eat_word<const N: usize>(&mut self, word: &[u8; N]) -> bool {
        match self.rest.split_first_chunk::<N>() {
            Some((head, tail)) if head == word => {
                self.rest = tail;
                true
            }
            _ => false,
        }
    }

    /// The rest of a string after its opening quote; whether it held an
    /// escape.
    fn string(&mut self) -> Result<bool, Declined> {
        let mut escaped = false;
        loop {
            let stop = unescaped_prefix(self.rest);
            match self.rest.get(stop..).and_then(<[u8]>::split_first) {
                Some((b'"', tail)) => {
                    self.rest = tail;
                    return Ok(escaped);
                }
                Some((b'\\', tail)) => {
                    self.rest = tail;
                    escaped = true;
                    self.escape()?;
                }
                // A control character, or the end of the text.
                _ => return Err(Declined::Invalid),
            }
        }
    }

    /// One escape after its backslash: what serde_json's skip accepts
    /// (`\u` and any four hex digits, a lone surrogate included).
    fn escape(&mut self) -> Result<(), Declined> {
        match self.next() {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(()),
            Some(b'u') => match self.rest.split_first_chunk::<4>() {
                Some((hex, tail)) if hex.iter().all(u8::is_ascii_hexdigit) => {
                    self.rest = tail;
                    Ok(())
                }
                _ => Err(Declined::Invalid),
            },
            _ => Err(Declined::Invalid),
        }
    }

    /// A number, by JSON's grammar (no range check, as serde_json's skip).
    fn number(&mut self) -> Result<(), Declined> {
        self.eat(b'-');
        match self.next() {
            Some(b'0') => {}
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(Declined::Invalid),
        }
        if self.eat(b'.') {
            self.some_digits()?;
        }
        if let [b'e' | b'E', tail @ ..] = self.rest {
            self.rest = tail;
            if let [b'+' | b'-', tail @ ..] = self.rest {
                self.rest = tail;
            }
            self.some_digits()?;
        }
        Ok(())
    }

    fn digits(&mut self) {
        while let [b'0'..=b'9', tail @ ..] = self.rest {
            self.rest = tail;
        }
    }

    /// At least one digit.
    fn some_digits(&mut self) -> Result<(), Declined> {
        match self.peek() {
            Some(b'0'..=b'9') => {
                self.digits();
                Ok(())
            }
            _ => Err(Declined::Invalid),
        }
    }

    /// A member's value: a string or a number read straight (`jsonrpc`,
    /// `id` and `method` nearly always are), anything else by [`value`].
    ///
    /// [`value`]: Cursor::value
    fn member_value(&mut self) -> Result<(), Declined> {
        match self.rest.split_first() {
            Some((b'"', tail)) => {
                self.rest = tail;
                self.string().map(|_| ())
            }
            Some((b'-' | b'0'..=b'9', _)) => self.number(),
            _ => self.value(),
        }
    }

    /// One value of any kind, validated and skipped; the cursor is on its
    /// first byte and ends after its last.
    fn value(&mut self) -> Result<(), Declined> {
        let mut open = Nesting::new();
        loop {
            // A value starts here.
            match self.rest.split_first() {
                Some((b'{', tail)) => {
                    self.rest = tail;
                    open.push(true)?;
                    self.ws();
                    if !self.eat(b'}') {
                        self.member_key()?;
                        continue;
                    }
                    open.pop();
                }
                Some((b'[', tail)) => {
                    self.rest = tail;
                    open.push(false)?;
                    self.ws();
                    if !self.eat(b']') {
                        continue;
                    }
                    open.pop();
                }
                Some((b'"', tail)) => {
                    self.rest = tail;
                    self.string()?;
                }
                Some((b't', _)) if self.eat_word(b"true") => {}
                Some((b'f', _)) if self.eat_word(b"false") => {}
                Some((b'n', _)) if self.eat_word(b"null") => {}
                Some((b'-' | b'0'..=b'9', _)) => self.number()?,
                _ => return Err(Declined::Invalid),
            }
            // A value ended: close what it ends, or go on to the next one.
            loop {
                let Some(in_object) = open.top() else {
                    return Ok(());
                };
                self.ws();
                match self.next() {
                    Some(b',') => {
                        self.ws();
                        if in_object {
                            self.member_key()?;
                        }
                        break;
                    }
                    Some(b'}') if in_object => open.pop(),
                    Some(b']') if !in_object => open.pop(),
                    _ => return Err(Declined::Invalid),
                }
            }
        }
    }

    /// A member name and its colon inside a skipped object, up to the
    /// value.
    fn member_key(&mut self) -> Result<(), Declined> {
        if !self.eat(b'"') {
            return Err(Declined::Invalid);
        }
        self.string()?;
        self.ws();
        if !self.eat(b':') {
            return Err(Declined::Invalid);
        }
        self.ws();
        Ok(())
    }
}

// === impl Nesting ===

impl Nesting {
    fn new() -> Self {
        Nesting {
            bits: [0; MAX_DEPTH / 64],
            depth: 0,
        }
    }

    fn push(&mut self, object: bool) -> Result<(), Declined> {
        let word = self.bits.get_mut(self.depth / 64).ok_or(Declined::Unsure)?;
        let bit = 1u64 << (self.depth % 64);
        if object {
            *word |= bit;
        } else {
            *word &= !bit;
        }
        self.depth += 1;
        Ok(())
    }

    fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Whether the innermost open value is an object; `None` at the top.
    fn top(&self) -> Option<bool> {
        let at = self.depth.checked_sub(1)?;
        let word = self.bits.get(at / 64)?;
        Some(word & (1u64 << (at % 64)) != 0)
    }
}

#[cfg(test)]
pub(in crate::dialect) mod tests;
