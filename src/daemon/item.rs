//! Decoding one JSON-RPC request object without copying it.
//!
//! Members are kept as raw JSON slices of the input line, so ids and params
//! can be echoed byte for byte. `Some` means present, even for an explicit
//! `null` (serde's `Option` would fold `null` into `None`). Used by
//! [`super::request`]; no validation happens here.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The four members the daemon reads; `Some` even for an explicit `null`.
#[derive(Default)]
pub(super) struct Item<'a> {
    /// `jsonrpc`, any JSON type.
    pub(super) jsonrpc: Option<&'a RawValue>,
    /// `method`, any JSON type.
    pub(super) method: Option<&'a RawValue>,
    /// `params`, any JSON type.
    pub(super) params: Option<&'a RawValue>,
    /// `id`, any JSON type.
    pub(super) id: Option<&'a RawValue>,
}

/// Deserializes an [`Item`]; `ci` matches member names case-insensitively
/// (Go's `encoding/json` does, so hld does).
#[derive(Clone, Copy)]
struct ItemSeed {
    ci: bool,
}

/// A member name of an [`Item`].
enum Field {
    Jsonrpc,
    Method,
    Params,
    Id,
    Other,
}

/// Parses an object into an [`Item`]; fails for anything but an object.
pub(super) fn parse_item(raw: &RawValue, ci: bool) -> Result<Item<'_>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    ItemSeed { ci }.deserialize(&mut de)
}

/// A JSON-RPC id is absent, a string, a number or `null`.
pub(super) fn valid_id(id: &RawValue) -> bool {
    matches!(first_byte(id), b'"' | b'-' | b'0'..=b'9') || id.get() == "null"
}

/// `jsonrpc` is the string `"2.0"`, however it is escaped.
pub(super) fn is_version_2(raw: &RawValue) -> bool {
    raw.get() == "\"2.0\"" || raw_str(raw).is_some_and(|s| s == "2.0")
}

/// The string a raw JSON string holds, unescaped only when needed.
pub(super) fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    if first_byte(raw) != b'"' {
        return None;
    }
    match serde_json::from_str::<&str>(raw.get()) {
        Ok(s) => Some(Cow::Borrowed(s)),
        Err(_) => serde_json::from_str::<String>(raw.get())
            .ok()
            .map(Cow::Owned),
    }
}

/// A Go `string` field: absent or `null` is empty; `None` if not a string.
pub(super) fn go_string(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
    match raw {
        None => Some(Cow::Borrowed("")),
        Some(r) if r.get() == "null" => Some(Cow::Borrowed("")),
        Some(r) => raw_str(r),
    }
}

/// The first byte of a raw value, which tells its JSON type.
pub(super) fn first_byte(raw: &RawValue) -> u8 {
    raw.get().as_bytes().first().copied().unwrap_or(b' ')
}

// === impl ItemSeed ===

impl<'de> DeserializeSeed<'de> for ItemSeed {
    type Value = Item<'de>;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Item<'de>, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ItemSeed {
    type Value = Item<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Item<'de>, A::Error> {
        let mut item = Item::default();
        // Later duplicates win, as in Go and in serde_json's `Value`.
        while let Some(field) = map.next_key_seed(FieldVisitor { ci: self.ci })? {
            let slot = match field {
                Field::Jsonrpc => &mut item.jsonrpc,
                Field::Method => &mut item.method,
                Field::Params => &mut item.params,
                Field::Id => &mut item.id,
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value::<&'de RawValue>()?);
        }
        Ok(item)
    }
}

/// Reads a member name into a [`Field`], honouring `ci`.
struct FieldVisitor {
    ci: bool,
}

impl<'de> DeserializeSeed<'de> for FieldVisitor {
    type Value = Field;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Field, D::Error> {
        de.deserialize_str(self)
    }
}

impl Visitor<'_> for FieldVisitor {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Field, E> {
        let is = |name: &str| {
            if self.ci {
                v.eq_ignore_ascii_case(name)
            } else {
                v == name
            }
        };
        Ok(if is("jsonrpc") {
            Field::Jsonrpc
        } else if is("method") {
            Field::Method
        } else if is("params") {
            Field::Params
        } else if is("id") {
            Field::Id
        } else {
            Field::Other
        })
    }
}
