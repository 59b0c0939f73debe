//! Payload transcoding between JSON and CBOR, by sideband.md §7's tables.
//!
//! Used only when the source and target encodings differ; otherwise
//! payload bytes pass through untouched. Anything that has no faithful
//! form in the target (NaN, non-text map keys, unknown tags, simple values,
//! float overflow) is a [`TranscodeError`], never a silent change.

use serde_json::value::RawValue;

use crate::dialect::json_string::push_json_string;

use super::cbor::{self, CborError, Head, MapKeys, Reader};
use super::scalar;

/// The deepest nesting of arrays, maps and tags in one payload: one less
/// than [`cbor::MAX_DEPTH`], so a payload always fits inside an envelope.
pub const MAX_PAYLOAD_DEPTH: usize = cbor::MAX_DEPTH - 1;

/// A payload value with no faithful form in the target encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscodeError {
    /// The CBOR payload is not one valid item (§7 decoding rules).
    #[error(transparent)]
    Cbor(#[from] CborError),
    /// NaN or ±Infinity: JSON has none.
    #[error("non-finite float has no JSON form")]
    NonFinite,
    /// A CBOR map with a key that is not a text string.
    #[error("CBOR map key is not a text string")]
    NonTextKey,
    /// A CBOR simple value other than false, true, null and undefined.
    #[error("CBOR simple value {0} has no JSON form")]
    SimpleValue(u64),
    /// A CBOR tag outside §7's table.
    #[error("CBOR tag {0} has no JSON form")]
    UnsupportedTag(u64),
    /// A known tag around the wrong kind of item.
    #[error("CBOR tag {tag} must enclose {expected}")]
    BadTagContent {
        /// The tag number.
        tag: u64,
        /// What it must enclose.
        expected: &'static str,
    },
    /// A JSON number whose nearest float64 is infinite.
    #[error("JSON number {0} overflows float64")]
    FloatOverflow(String),
    /// An integer beyond the bignum cap ([`scalar::MAX_BIGNUM_BYTES`]).
    #[error("integer too large to transcode")]
    BignumTooLarge,
    /// A JSON payload nested deeper than [`MAX_PAYLOAD_DEPTH`].
    #[error("JSON nesting deeper than {MAX_PAYLOAD_DEPTH}")]
    TooDeep,
    /// JSON that serde_json refused while re-reading a raw value.
    #[error("invalid JSON: {0}")]
    Json(String),
}

/// Transcodes a JSON payload to one CBOR item (§7, JSON → CBOR): integers
/// as integers or tag 2/3 bignums, other numbers as float64, objects as
/// text-keyed maps in source order (the last duplicate wins, at the first
/// one's position).
pub fn json_to_cbor(json: &RawValue) -> Result<Vec<u8>, TranscodeError> {
    let mut out = Vec::with_capacity(json.get().len());
    json_to_cbor_into(json, &mut out)?;
    Ok(out)
}

/// [`json_to_cbor`], appended to `out` (left as it was on error).
pub fn json_to_cbor_into(json: &RawValue, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    json_text_to_cbor_into(json.get(), out)
}

/// [`json_to_cbor_into`] for JSON text read already (a
/// [`RawJson`](crate::envelope::RawJson)); text that is no valid JSON is
/// an error.
pub fn json_text_to_cbor_into(json: &str, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    let start = out.len();
    let result = from_json::transcode(json, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Transcodes one CBOR item to JSON (§7, CBOR → JSON). The whole input
/// must be one valid item.
pub fn cbor_to_json(cbor: &[u8]) -> Result<Box<RawValue>, TranscodeError> {
    let mut out = String::with_capacity(cbor.len() * 2);
    cbor_to_json_into(cbor, &mut out)?;
    RawValue::from_string(out).map_err(|e| TranscodeError::Json(e.to_string()))
}

/// [`cbor_to_json`], appended to `out` (left as it was on error): for a
/// renderer that writes the JSON where it goes. The text holds no
/// whitespace outside strings, so no raw line break either.
pub fn cbor_to_json_into(cbor: &[u8], out: &mut String) -> Result<(), TranscodeError> {
    let start = out.len();
    let mut reader = Reader::new(cbor);
    let result = match cbor_value(&mut reader, out, 0) {
        Ok(()) if reader.at_end() => Ok(()),
        Ok(()) => Err(CborError::Trailing.into()),
        Err(e @ TranscodeError::Cbor(_)) => Err(e),
        // Malformed CBOR anywhere in the item is the error to report,
        // before what JSON cannot carry: the rest of the item is checked.
        Err(e) => cbor::validate(cbor, MAX_PAYLOAD_DEPTH)
            .map_err(TranscodeError::from)
            .and(Err(e)),
    };
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn nest(depth: usize) -> Result<usize, TranscodeError> {
    if depth >= MAX_PAYLOAD_DEPTH {
        Err(TranscodeError::TooDeep)
    } else {
        Ok(depth + 1)
    }
}

/// Converts one item at nesting `depth`, checking it as it goes as
/// [`cbor::validate`] does (well-formed heads and strings, UTF-8 text,
/// nesting up to [`MAX_PAYLOAD_DEPTH`], no duplicate map keys): one walk
/// over the payload instead of a validation pass and then this one.
fn cbor_value(r: &mut Reader<'_>, out: &mut String, depth: usize) -> Result<(), TranscodeError> {
    let head = r.head()?;
    match head.major {
        cbor::MAJOR_UINT => out.push_str(&head.arg.to_string()),
        cbor::MAJOR_NINT => out.push_str(&(-1 - i128::from(head.arg)).to_string()),
        cbor::MAJOR_BYTES => {
            push_json_string(out, &scalar::base64(&r.string(head)?, true));
        }
        cbor::MAJOR_TEXT => push_text(r, head, out)?,
        cbor::MAJOR_ARRAY => {
            let inner = cbor::enter(depth, MAX_PAYLOAD_DEPTH)?;
            out.push('[');
            let mut left = head.arg;
            let mut first = true;
            while r.more(head, &mut left)? {
                if !std::mem::take(&mut first) {
                    out.push(',');
                }
                cbor_value(r, out, inner)?;
            }
            out.push(']');
        }
        cbor::MAJOR_MAP => {
            let inner = cbor::enter(depth, MAX_PAYLOAD_DEPTH)?;
            let mut keys = MapKeys::new();
            out.push('{');
            let mut left = head.arg;
            let mut first = true;
            while r.more(head, &mut left)? {
                if !std::mem::take(&mut first) {
                    out.push(',');
                }
                let start = r.position();
                let key = r.head()?;
                if key.major != cbor::MAJOR_TEXT {
                    return Err(TranscodeError::NonTextKey);
                }
                push_text(r, key, out)?;
                r.note_key(start, &mut keys)?;
                out.push(':');
                cbor_value(r, out, inner)?;
            }
            out.push('}');
        }
        cbor::MAJOR_TAG => cbor_tag(r, head.arg, out, cbor::enter(depth, MAX_PAYLOAD_DEPTH)?)?,
        _ => match head.info {
            20 => out.push_str("false"),
            21 => out.push_str("true"),
            22 | 23 => out.push_str("null"),
            25..=27 => out.push_str(&finite(head)?),
            cbor::INDEFINITE => {
                return Err(CborError::Malformed("break outside an indefinite-length item").into())
            }
            _ => return Err(TranscodeError::SimpleValue(head.arg)),
        },
    }
    Ok(())
}

/// Tags of §7's table; any other tag is an error.
fn cbor_tag(
    r: &mut Reader<'_>,
    tag: u64,
    out: &mut String,
    depth: usize,
) -> Result<(), TranscodeError> {
    let bad = |expected| TranscodeError::BadTagContent { tag, expected };
    match tag {
        55799 => cbor_value(r, out, depth),
        0 | 32 => {
            let head = r.head()?;
            if head.major != cbor::MAJOR_TEXT {
                return Err(bad("a text string"));
            }
            push_text(r, head, out)
        }
        1 => {
            let head = r.head()?;
            match head.major {
                cbor::MAJOR_UINT => out.push_str(&head.arg.to_string()),
                cbor::MAJOR_NINT => out.push_str(&(-1 - i128::from(head.arg)).to_string()),
                _ if head.float().is_some() => out.push_str(&finite(head)?),
                _ => return Err(bad("a number")),
            }
            Ok(())
        }
        2 | 3 | 21..=23 => {
            let head = r.head()?;
            if head.major != cbor::MAJOR_BYTES {
                return Err(bad("a byte string"));
            }
            let bytes = r.string(head)?;
            match tag {
                2 | 3 => {
                    let digits = scalar::bignum_to_decimal(&bytes, tag == 3)
                        .ok_or(TranscodeError::BignumTooLarge)?;
                    if tag == 3 {
                        out.push('-');
                    }
                    out.push_str(&digits);
                }
                21 => push_json_string(out, &scalar::base64(&bytes, true)),
                22 => push_json_string(out, &scalar::base64(&bytes, false)),
                _ => push_json_string(out, &super::hex::encode(&bytes)),
            }
            Ok(())
        }
        other => Err(TranscodeError::UnsupportedTag(other)),
    }
}

fn push_text(r: &mut Reader<'_>, head: Head, out: &mut String) -> Result<(), TranscodeError> {
    let text = r.text(head)?;
    push_json_string(out, &text);
    Ok(())
}

fn finite(head: Head) -> Result<String, TranscodeError> {
    match head.float() {
        Some(v) if v.is_finite() => Ok(scalar::format_f64(v)),
        _ => Err(TranscodeError::NonFinite),
    }
}

mod from_json;

#[cfg(test)]
mod tests;
