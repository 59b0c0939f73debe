//! A minimal, strict CBOR (RFC 8949) reader and writer for the v2 envelope
//! (sideband.md §7).
//!
//! Hand-written rather than built on `ciborium` because §7 needs things its
//! data model hides: the raw byte span of each item (payloads pass through
//! untouched), duplicate-key detection in every map, a nesting limit that
//! counts tags, and floats always written as float64 (ciborium shrinks them
//! to the shortest lossless width). The tests use ciborium as an independent
//! oracle.
//!
//! The reader never allocates more than the input's length: declared
//! lengths are checked against the remaining bytes before slicing, and
//! containers are walked item by item rather than pre-allocated. The
//! writer is in `write`, map keys for duplicate detection in `keys`.

use std::borrow::Cow;

mod keys;
mod write;

use self::keys::key_id;
pub(super) use self::keys::{KeyId, MapKeys};
pub(super) use self::write::{write_bytes, write_f64};
pub(crate) use self::write::{write_head, write_int, write_text};

/// The deepest nesting of arrays, maps and tags accepted in one envelope
/// (the envelope map itself counts as one).
pub const MAX_DEPTH: usize = 128;

/// Why bytes are not one well-formed, valid CBOR item under §7's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CborError {
    /// The data ends inside an item.
    #[error("CBOR data ends early")]
    Truncated,
    /// Not well-formed CBOR (reserved additional information, a misplaced
    /// break, a bad indefinite-length chunk, …).
    #[error("malformed CBOR: {0}")]
    Malformed(&'static str),
    /// Bytes follow the item.
    #[error("trailing bytes after the CBOR item")]
    Trailing,
    /// A map has the same key twice.
    #[error("duplicate map key")]
    DuplicateKey,
    /// Arrays, maps and tags nest deeper than the limit.
    #[error("CBOR nesting deeper than {0}")]
    TooDeep(usize),
    /// A text string is not valid UTF-8.
    #[error("invalid UTF-8 in a CBOR text string")]
    InvalidUtf8,
}

/// An item's initial byte and argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    /// Major type, 0–7.
    pub(super) major: u8,
    /// Additional information, 0–31 (31: indefinite length or break).
    pub(super) info: u8,
    /// The argument (count, length, value, tag number or float bits).
    pub(super) arg: u64,
}

/// A cursor over CBOR bytes. Cheap to copy, so callers can peek.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

pub(super) const MAJOR_UINT: u8 = 0;
pub(super) const MAJOR_NINT: u8 = 1;
pub(super) const MAJOR_BYTES: u8 = 2;
pub(super) const MAJOR_TEXT: u8 = 3;
pub(super) const MAJOR_ARRAY: u8 = 4;
pub(crate) const MAJOR_MAP: u8 = 5;
pub(super) const MAJOR_TAG: u8 = 6;
pub(super) const MAJOR_SIMPLE: u8 = 7;
/// Additional information meaning "indefinite length" (or break, in major 7).
pub(super) const INDEFINITE: u8 = 31;
/// `undefined`: as an envelope member's value, the member is absent.
pub(super) const UNDEFINED: u8 = 0xf7;
const BREAK: u8 = 0xff;

/// Checks that `data` is exactly one valid item nesting at most
/// `max_depth` arrays, maps and tags.
pub(super) fn validate(data: &[u8], max_depth: usize) -> Result<(), CborError> {
    let mut reader = Reader::new(data);
    reader.skip(0, max_depth)?;
    if reader.at_end() {
        Ok(())
    } else {
        Err(CborError::Trailing)
    }
}

// === impl Reader ===

impl<'a> Reader<'a> {
    /// A reader at the start of `data`.
    pub(super) fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    /// True when every byte has been read.
    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// Reads one head. Rejects reserved additional information (28–30),
    /// indefinite integers and tags, and two-byte simple values below 32.
    #[inline]
    pub(super) fn head(&mut self) -> Result<Head, CborError> {
        let initial = self.byte()?;
        let (major, info) = (initial >> 5, initial & 0x1f);
        let arg = match info {
            0..=23 => u64::from(info),
            24 => u64::from(self.byte()?),
            25 => u64::from(u16::from_be_bytes(self.chunk()?)),
            26 => u64::from(u32::from_be_bytes(self.chunk()?)),
            27 => u64::from_be_bytes(self.chunk()?),
            28..=30 => return Err(CborError::Malformed("reserved additional information")),
            _ if matches!(major, MAJOR_UINT | MAJOR_NINT | MAJOR_TAG) => {
                return Err(CborError::Malformed(
                    "indefinite length on an integer or tag",
                ))
            }
            _ => 0,
        };
        if major == MAJOR_SIMPLE && info == 24 && arg < 32 {
            return Err(CborError::Malformed("two-byte simple value below 32"));
        }
        Ok(Head { major, info, arg })
    }

    /// The content of a byte or text string whose head was just read;
    /// chunks of an indefinite string are concatenated. Text is checked
    /// to be UTF-8 chunk by chunk.
    pub(super) fn string(&mut self, head: Head) -> Result<Cow<'a, [u8]>, CborError> {
        self.string_checked(head, head.major == MAJOR_TEXT)
    }

    /// The content of a text string whose head was just read, checked to
    /// be UTF-8 once (chunk by chunk when indefinite, as [`Self::string`]).
    pub(super) fn text(&mut self, head: Head) -> Result<Cow<'a, str>, CborError> {
        if head.info != INDEFINITE {
            let bytes = self.take(head.arg)?;
            return std::str::from_utf8(bytes)
                .map(Cow::Borrowed)
                .map_err(|_| CborError::InvalidUtf8);
        }
        let joined = self.string_checked(head, true)?.into_owned();
        String::from_utf8(joined)
            .map(Cow::Owned)
            .map_err(|_| CborError::InvalidUtf8)
    }

    /// [`Self::string`], with the UTF-8 check of text only when `text`.
    fn string_checked(&mut self, head: Head, text: bool) -> Result<Cow<'a, [u8]>, CborError> {
        if head.info != INDEFINITE {
            let bytes = self.take(head.arg)?;
            check_utf8(text, bytes)?;
            return Ok(Cow::Borrowed(bytes));
        }
        let mut joined = Vec::new();
        while !self.eat_break()? {
            let chunk = self.head()?;
            if chunk.major != head.major || chunk.info == INDEFINITE {
                return Err(CborError::Malformed(
                    "bad chunk in an indefinite-length string",
                ));
            }
            let bytes = self.take(chunk.arg)?;
            check_utf8(text, bytes)?;
            joined.extend_from_slice(bytes);
        }
        Ok(Cow::Owned(joined))
    }

    /// Validates one item and returns its raw bytes. `depth` is the number
    /// of arrays, maps and tags around it.
    pub(super) fn skip(&mut self, depth: usize, max_depth: usize) -> Result<&'a [u8], CborError> {
        let start = self.pos;
        let head = self.head()?;
        match head.major {
            MAJOR_BYTES | MAJOR_TEXT => {
                self.string(head)?;
            }
            MAJOR_ARRAY => {
                let inner = enter(depth, max_depth)?;
                let mut left = head.arg;
                while self.more(head, &mut left)? {
                    self.skip(inner, max_depth)?;
                }
            }
            MAJOR_MAP => self.skip_map(head, enter(depth, max_depth)?, max_depth)?,
            MAJOR_TAG => {
                self.skip(enter(depth, max_depth)?, max_depth)?;
            }
            MAJOR_SIMPLE if head.info == INDEFINITE => {
                return Err(CborError::Malformed(
                    "break outside an indefinite-length item",
                ))
            }
            _ => {}
        }
        Ok(self.slice(start))
    }

    /// True while a container has more items: counts down a definite
    /// length, or looks for the break of an indefinite one.
    #[inline]
    pub(super) fn more(&mut self, head: Head, left: &mut u64) -> Result<bool, CborError> {
        if head.info == INDEFINITE {
            return Ok(!self.eat_break()?);
        }
        if *left == 0 {
            return Ok(false);
        }
        *left -= 1;
        Ok(true)
    }

    fn skip_map(&mut self, head: Head, inner: usize, max_depth: usize) -> Result<(), CborError> {
        let mut keys = MapKeys::new();
        let mut left = head.arg;
        while self.more(head, &mut left)? {
            let key = self.skip(inner, max_depth)?;
            if !keys.insert(key_id(key)?) {
                return Err(CborError::DuplicateKey);
            }
            self.skip(inner, max_depth)?;
        }
        Ok(())
    }

    #[inline]
    fn eat_break(&mut self) -> Result<bool, CborError> {
        match self.data.get(self.pos) {
            Some(&BREAK) => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Err(CborError::Truncated),
        }
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, CborError> {
        let byte = *self.data.get(self.pos).ok_or(CborError::Truncated)?;
        self.pos += 1;
        Ok(byte)
    }

    #[inline]
    fn chunk<const N: usize>(&mut self) -> Result<[u8; N], CborError> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let (&chunk, _) = rest.split_first_chunk::<N>().ok_or(CborError::Truncated)?;
        self.pos += N;
        Ok(chunk)
    }

    #[inline]
    fn take(&mut self, len: u64) -> Result<&'a [u8], CborError> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let len = usize::try_from(len).map_err(|_| CborError::Truncated)?;
        let bytes = rest.get(..len).ok_or(CborError::Truncated)?;
        self.pos += len;
        Ok(bytes)
    }

    /// How many bytes have been read.
    pub(super) fn position(&self) -> usize {
        self.pos
    }

    /// Adds the map key read since `start` to `keys`: a key the map had
    /// already is [`CborError::DuplicateKey`].
    pub(super) fn note_key(&self, start: usize, keys: &mut MapKeys<'a>) -> Result<(), CborError> {
        if keys.insert(key_id(self.slice(start))?) {
            Ok(())
        } else {
            Err(CborError::DuplicateKey)
        }
    }

    fn slice(&self, start: usize) -> &'a [u8] {
        self.data.get(start..self.pos).unwrap_or_default()
    }
}

// === impl Head ===

impl Head {
    /// The float value of a half, single or double float head.
    pub(super) fn float(self) -> Option<f64> {
        if self.major != MAJOR_SIMPLE {
            return None;
        }
        match self.info {
            25 => Some(f16_to_f64(self.arg as u16)),
            26 => Some(f64::from(f32::from_bits(self.arg as u32))),
            27 => Some(f64::from_bits(self.arg)),
            _ => None,
        }
    }
}

pub(super) fn enter(depth: usize, max_depth: usize) -> Result<usize, CborError> {
    if depth >= max_depth {
        Err(CborError::TooDeep(max_depth))
    } else {
        Ok(depth + 1)
    }
}

fn check_utf8(text: bool, bytes: &[u8]) -> Result<(), CborError> {
    if text && std::str::from_utf8(bytes).is_err() {
        return Err(CborError::InvalidUtf8);
    }
    Ok(())
}

/// IEEE 754 half precision to double (exact).
fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let mant = f64::from(bits & 0x03ff);
    let magnitude = match exp {
        0 => mant * 2f64.powi(-24),
        31 if mant == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + mant / 1024.0) * 2f64.powi(exp - 15),
    };
    sign * magnitude
}
