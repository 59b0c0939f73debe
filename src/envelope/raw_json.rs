//! [`RawJson`]: one raw JSON value (a `params`, `result` or `error.data`)
//! in shared bytes.

use std::fmt;

use bytestring::ByteString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// One raw JSON value, known to be valid JSON, held in shared bytes.
///
/// Decoded from a frame or a line ([`RawJson::within`]), it is a slice of
/// the bytes read: a reference count, no copy and no allocation. Built by
/// switchyard, it owns its text. Cloning is a reference count either way.
/// Equality is byte equality.
///
/// A slice keeps the whole buffer it was read into alive: a connection's
/// read buffer (8 KiB, or as large as the largest frame or line the
/// connection has read). Requests and replies hold theirs only until they are
/// written (a call waiting for room at its upstream keeps its request's);
/// whatever keeps a payload longer (a subscription, a retained event, a
/// store) keeps a [`detach`](RawJson::detach)ed copy.
#[derive(Clone, PartialEq, Eq)]
pub struct RawJson(ByteString);

impl RawJson {
    /// The JSON text.
    pub fn get(&self) -> &str {
        &self.0
    }

    /// A copy of `raw`.
    pub fn copy(raw: &RawValue) -> Self {
        RawJson(ByteString::from(raw.get()))
    }

    /// A copy of the text of one JSON value that a validating pass has
    /// read (so valid JSON).
    pub(crate) fn copy_text(text: &str) -> Self {
        RawJson(ByteString::from(text))
    }

    /// `raw` as a slice of `source`, the text it was decoded from (a copy
    /// when `raw` does not lie within `source`).
    pub fn within(source: &ByteString, raw: &RawValue) -> Self {
        Self::text_within(source, raw.get())
    }

    /// [`within`](RawJson::within) for the text of one JSON value that a
    /// validating pass has read (so valid JSON): the slice
    /// `jsonrpc::scan` gives.
    pub(crate) fn text_within(source: &ByteString, text: &str) -> Self {
        let outer = source.as_bytes().as_ptr_range();
        let inner = text.as_bytes().as_ptr_range();
        if outer.start <= inner.start && inner.end <= outer.end {
            RawJson(source.slice_ref(text))
        } else {
            RawJson(ByteString::from(text))
        }
    }

    /// Text switchyard itself produced and knows to be valid JSON (`null`
    /// if it is not, which only a bug in a caller can cause).
    pub(crate) fn from_string(text: String) -> Self {
        if serde_json::from_str::<&RawValue>(&text).is_ok() {
            RawJson(ByteString::from(text))
        } else {
            RawJson(ByteString::from_static("null"))
        }
    }

    /// A copy that shares nothing with the buffer this was read from, for
    /// whatever keeps the value beyond its request or reply.
    pub fn detach(&self) -> Self {
        RawJson(ByteString::from(self.get()))
    }

    /// The value as serde_json's raw value (read again, without copying).
    pub fn to_raw(&self) -> &RawValue {
        serde_json::from_str(self.get()).unwrap_or(RawValue::NULL)
    }
}

impl From<Box<RawValue>> for RawJson {
    /// Takes over the text (no copy).
    fn from(raw: Box<RawValue>) -> Self {
        let text: Box<str> = raw.into();
        RawJson(ByteString::from(String::from(text)))
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get())
    }
}

impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_raw().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(RawJson::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_slices_the_source_and_copies_what_lies_outside_it() {
        let source = ByteString::from(r#"{"params":[1,2,{"a":"é"}]}"#);
        #[derive(Deserialize)]
        struct Shape<'a> {
            #[serde(borrow)]
            params: &'a RawValue,
        }
        let shape: Shape<'_> = serde_json::from_str(&source).expect("valid");
        let sliced = RawJson::within(&source, shape.params);
        assert_eq!(sliced.get(), r#"[1,2,{"a":"é"}]"#);
        assert!(source
            .as_bytes()
            .as_ptr_range()
            .contains(&sliced.get().as_ptr()));

        let elsewhere: Box<RawValue> = serde_json::from_str("[1,2]").expect("valid");
        let copied = RawJson::within(&source, &elsewhere);
        assert_eq!(copied.get(), "[1,2]");
        assert!(!source
            .as_bytes()
            .as_ptr_range()
            .contains(&copied.get().as_ptr()));

        let detached = sliced.detach();
        assert_eq!(detached, sliced);
        assert!(!source
            .as_bytes()
            .as_ptr_range()
            .contains(&detached.get().as_ptr()));
    }

    #[test]
    fn built_text_must_be_json_and_round_trips_through_serde() {
        assert_eq!(
            RawJson::from_string(String::from("{\"a\":1}")).get(),
            "{\"a\":1}"
        );
        assert_eq!(RawJson::from_string(String::from("{\"a\":")).get(), "null");
        let raw = RawJson::from_string(String::from(r#"{"x":[1, 2]}"#));
        let text = serde_json::to_string(&raw).expect("serializes");
        assert_eq!(text, r#"{"x":[1, 2]}"#);
        let back: RawJson = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(back, raw);
    }
}
