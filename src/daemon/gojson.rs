//! Go `encoding/json` output quirks, for the daemon's hld mode.
//!
//! hld echoes ids after a round trip through Go's `interface{}`
//! (`ndjson-unix.md` §3): numbers become float64, strings are HTML-escaped and
//! object keys are sorted. Mimicking this lets gateway tests see what a real
//! hld does to ids that are not small integers.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;

/// Re-encodes a raw id the way hld echoes it; `None` when Go could not
/// decode it (a number out of float64 range, such as `1e400`).
pub(super) fn encode_id(raw: &str) -> Option<String> {
    let value: Value = serde_json::from_str(raw).ok()?;
    let mut out = String::with_capacity(raw.len());
    write_value(&mut out, &value);
    Some(escape_html(&out).into_owned())
}

/// Escapes `<`, `>`, `&`, U+2028 and U+2029 as Go does. In serialized JSON
/// these characters can only occur inside strings, so the whole text may be
/// passed.
pub(super) fn escape_html(json: &str) -> Cow<'_, str> {
    if !json.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Writes `value` compactly: float64 numbers, sorted keys.
fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Number(n) => out.push_str(&go_float(n.as_f64().unwrap_or(0.0))),
        Value::String(_) | Value::Bool(_) | Value::Null => out.push_str(&value.to_string()),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// Formats a float64 like Go's `encoding/json`: shortest digits, exponent
/// form below 1e-6 and from 1e21 (`1e+21`, `1e-7`).
fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        return format!("{f}");
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let mut out = String::with_capacity(sci.len() + 2);
    out.push_str(mantissa);
    match exp.strip_prefix('-') {
        Some(digits) => {
            let _ = write!(out, "e-{digits}"); // writing to a String cannot fail
        }
        None => {
            let _ = write!(out, "e+{exp:0>2}"); // writing to a String cannot fail
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_like_go() {
        assert_eq!(encode_id("1").as_deref(), Some("1"));
        assert_eq!(encode_id("1.0").as_deref(), Some("1"));
        assert_eq!(encode_id("1e3").as_deref(), Some("1000"));
        assert_eq!(
            encode_id("9007199254740993").as_deref(),
            Some("9007199254740992")
        );
        assert_eq!(encode_id("1e21").as_deref(), Some("1e+21"));
        assert_eq!(encode_id("1.5e-7").as_deref(), Some("1.5e-7"));
        assert_eq!(encode_id("-0.5").as_deref(), Some("-0.5"));
        assert_eq!(
            encode_id("\"<a&b>\"").as_deref(),
            Some("\"\\u003ca\\u0026b\\u003e\"")
        );
        assert_eq!(
            encode_id("{\"b\":1,\"a\":[2.50]}").as_deref(),
            Some("{\"a\":[2.5],\"b\":1}")
        );
        assert_eq!(encode_id("1e400"), None);
    }
}
