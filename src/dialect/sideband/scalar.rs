//! Scalar conversions for §7 transcoding: float text, bignums and base64.
//! Small and dependency-free on purpose.

/// The largest bignum magnitude transcoded, in bytes (≈ 2,466 decimal
/// digits). Decimal ⇄ binary conversion is quadratic, so a cap keeps one
/// 1 MiB message from costing seconds of CPU.
pub const MAX_BIGNUM_BYTES: usize = 1024;

/// More decimal digits than this cannot fit in [`MAX_BIGNUM_BYTES`].
const MAX_BIGNUM_DIGITS: usize = 2467;

/// A finite float as JSON: the shortest decimal that reads back as the same
/// float64, always with a `.` or an exponent (`1.0`, `-0.0`, `1e+300`).
/// Fixed notation is used for decimal exponents in -7…20, as JavaScript does.
pub(super) fn format_f64(value: f64) -> String {
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .to_owned();
    }
    let sign = if value < 0.0 { "-" } else { "" };
    // `{:e}` gives the shortest round-trip digits: "1.2345e-7", "1e300".
    let sci = format!("{:e}", value.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i64;
    // The decimal point sits after `n` digits: value = 0.d₁d₂… × 10ⁿ.
    let n = exp + 1;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}.0", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n as usize);
        format!("{int}.{frac}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        let e = n - 1;
        let esign = if e < 0 { '-' } else { '+' };
        format!("{first}{dot}{rest}e{esign}{}", e.abs())
    };
    format!("{sign}{body}")
}

/// Base64 (RFC 4648): the URL-safe alphabet without padding, or the
/// standard alphabet with padding.
pub(super) fn base64(bytes: &[u8], url: bool) -> String {
    const STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let alphabet = if url { URL } else { STD };
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            group.get(1).copied().unwrap_or(0),
            group.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = group.len() + 1;
        for i in 0..4 {
            if i < chars {
                out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 0x3f) as usize]));
            } else if !url {
                out.push('=');
            }
        }
    }
    out
}

/// A big-endian magnitude as decimal digits; `None` above the cap.
/// `plus_one` adds one first (tag 3 encodes -1 - n).
pub(super) fn bignum_to_decimal(bytes: &[u8], plus_one: bool) -> Option<String> {
    let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    let bytes = &bytes[start..];
    if bytes.len() > MAX_BIGNUM_BYTES {
        return None;
    }
    // Little-endian base-2³² limbs.
    let mut limbs: Vec<u32> = bytes
        .rchunks(4)
        .map(|c| c.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)))
        .collect();
    if plus_one {
        add_small(&mut limbs, 1, 1);
    }
    let mut groups = Vec::new();
    while limbs.iter().any(|l| *l != 0) {
        let mut rem = 0u64;
        for limb in limbs.iter_mut().rev() {
            let cur = (rem << 32) | u64::from(*limb);
            *limb = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        groups.push(rem as u32);
    }
    let Some((last, rest)) = groups.split_last() else {
        return Some("0".to_owned());
    };
    let mut out = last.to_string();
    for g in rest.iter().rev() {
        out.push_str(&format!("{g:09}"));
    }
    Some(out)
}

/// Decimal digits as a big-endian magnitude without leading zeros, less
/// one when `minus_one` (for tag 3); `None` above the cap.
pub(super) fn decimal_to_bignum(digits: &str, minus_one: bool) -> Option<Vec<u8>> {
    if digits.len() > MAX_BIGNUM_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut limbs: Vec<u32> = Vec::new();
    for chunk in digits.as_bytes().chunks(9) {
        let value = chunk
            .iter()
            .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'));
        let scale = 10u32.pow(chunk.len() as u32);
        add_small(&mut limbs, scale, value);
    }
    if minus_one {
        // The magnitude is ≥ 2⁶⁴ here, so it never underflows.
        for limb in limbs.iter_mut() {
            let (v, borrow) = limb.overflowing_sub(1);
            *limb = v;
            if !borrow {
                break;
            }
        }
    }
    let mut out: Vec<u8> = limbs.iter().rev().flat_map(|l| l.to_be_bytes()).collect();
    let start = out.iter().position(|b| *b != 0).unwrap_or(out.len());
    out.drain(..start);
    (out.len() <= MAX_BIGNUM_BYTES).then_some(out)
}

/// limbs = limbs × mul + add.
fn add_small(limbs: &mut Vec<u32>, mul: u32, add: u32) {
    let mut carry = u64::from(add);
    for limb in limbs.iter_mut() {
        let cur = u64::from(*limb) * u64::from(mul) + carry;
        *limb = cur as u32;
        carry = cur >> 32;
    }
    if carry != 0 {
        limbs.push(carry as u32);
    }
}
