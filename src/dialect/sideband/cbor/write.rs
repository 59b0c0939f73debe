//! The CBOR writer: definite-length heads with the shortest argument,
//! text and byte strings, integers, and floats always as float64 (§7).

use super::{MAJOR_BYTES, MAJOR_NINT, MAJOR_TEXT, MAJOR_UINT};

/// Writes a head with the shortest argument encoding.
pub(crate) fn write_head(out: &mut Vec<u8>, major: u8, arg: u64) {
    let major = major << 5;
    if arg < 24 {
        out.push(major | arg as u8);
    } else if let Ok(a) = u8::try_from(arg) {
        out.extend_from_slice(&[major | 24, a]);
    } else if let Ok(a) = u16::try_from(arg) {
        out.push(major | 25);
        out.extend_from_slice(&a.to_be_bytes());
    } else if let Ok(a) = u32::try_from(arg) {
        out.push(major | 26);
        out.extend_from_slice(&a.to_be_bytes());
    } else {
        out.push(major | 27);
        out.extend_from_slice(&arg.to_be_bytes());
    }
}

/// Writes a definite text string.
pub(crate) fn write_text(out: &mut Vec<u8>, text: &str) {
    write_head(out, MAJOR_TEXT, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

/// Writes a definite byte string.
pub(in crate::dialect::sideband) fn write_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    write_head(out, MAJOR_BYTES, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Writes an integer with the shortest head.
pub(crate) fn write_int(out: &mut Vec<u8>, value: i64) {
    match u64::try_from(value) {
        Ok(n) => write_head(out, MAJOR_UINT, n),
        // -1 - value ≥ 0 here, and fits u64 because value ≥ i64::MIN.
        Err(_) => write_head(out, MAJOR_NINT, (-1 - i128::from(value)) as u64),
    }
}

/// Writes a float, always as float64 (§7).
pub(in crate::dialect::sideband) fn write_f64(out: &mut Vec<u8>, value: f64) {
    out.push(0xfb);
    out.extend_from_slice(&value.to_bits().to_be_bytes());
}
