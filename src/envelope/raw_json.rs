//! [`RawJson`]: one raw JSON value (a `params`, `result` or `error.data`)
//! in shared bytes.

use std::fmt;

use bytestring::ByteString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use super::text::Source;

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
#[derive(Clone)]
pub struct RawJson(Shared);

/// Whether a [`RawJson`] is known to hold no raw line break (`\n` or
/// `\r`, which valid JSON has only as whitespace between tokens): the
/// validating pass that sliced it saw none in the text it read, so an
/// NDJSON line copies it without searching for one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Flat {
    /// No raw line break, as a validating pass saw.
    Yes,
    /// Not known.
    #[default]
    No,
}

/// The bytes a [`RawJson`] is held in, and whether it is [`Flat`]: kept
/// in the 48 bytes the frame's slice takes anyway, so that a message is
/// no larger for it (every hand-off moves one).
#[derive(Clone)]
enum Shared {
    /// Its own, or a slice of a line.
    Line(ByteString, Flat),
    /// A slice (`start..end`) of a WebSocket text frame, kept as the
    /// library's `Utf8Bytes`, so that its bytes are not checked again.
    Frame {
        frame: Utf8Bytes,
        start: usize,
        /// The end, with [`FLAT_BIT`] set for a [`Flat`] value.
        end: usize,
    },
}

/// The bit of [`Shared::Frame`]'s `end` that marks a [`Flat`] value: no
/// slice reaches `isize::MAX` bytes, so an offset never has it set.
const FLAT_BIT: usize = 1 << (usize::BITS - 1);

impl RawJson {
    /// The JSON text.
    pub fn get(&self) -> &str {
        match &self.0 {
            Shared::Line(line, _) => line,
            // In bounds and on character boundaries (a slice of the
            // frame's `str`): never `""`.
            Shared::Frame { frame, start, end } => {
                frame.get(*start..*end & !FLAT_BIT).unwrap_or_default()
            }
        }
    }

    /// A copy of `raw`.
    pub fn copy(raw: &RawValue) -> Self {
        RawJson::line(ByteString::from(raw.get()))
    }

    /// A copy of the text of one JSON value that a validating pass has
    /// read (so valid JSON).
    pub(crate) fn copy_text(text: &str) -> Self {
        RawJson::line(ByteString::from(text))
    }

    /// `raw` as a slice of `source`, the text it was decoded from (a copy
    /// when `raw` does not lie within `source`).
    pub fn within<'a>(source: impl Into<Source<'a>>, raw: &RawValue) -> Self {
        Self::text_within(source.into(), raw.get())
    }

    /// [`within`](RawJson::within) for the text of one JSON value that a
    /// validating pass has read (so valid JSON): the slice
    /// `jsonrpc::scan` gives.
    pub(crate) fn text_within(source: Source<'_>, text: &str) -> Self {
        Self::text_within_flat(source, text, Flat::No)
    }

    /// [`text_within`](RawJson::text_within), marked [`Flat`] as the pass
    /// that read the text saw it.
    pub(crate) fn text_within_flat(source: Source<'_>, text: &str, flat: Flat) -> Self {
        let outer = source.as_bytes().as_ptr_range();
        let inner = text.as_bytes().as_ptr_range();
        if !(outer.start <= inner.start && inner.end <= outer.end) {
            return RawJson(Shared::Line(ByteString::from(text), flat));
        }
        match source {
            Source::Line(line) => RawJson(Shared::Line(line.slice_ref(text), flat)),
            Source::Frame(frame) => {
                let start = inner.start as usize - outer.start as usize;
                let mark = if flat == Flat::Yes { FLAT_BIT } else { 0 };
                RawJson(Shared::Frame {
                    frame: frame.clone(),
                    start,
                    end: (start + text.len()) | mark,
                })
            }
        }
    }

    fn line(line: ByteString) -> Self {
        RawJson(Shared::Line(line, Flat::No))
    }

    /// Whether the value is known to hold no raw line break.
    pub(crate) fn is_flat(&self) -> bool {
        match &self.0 {
            Shared::Line(_, flat) => *flat == Flat::Yes,
            Shared::Frame { end, .. } => end & FLAT_BIT != 0,
        }
    }

    /// Text switchyard itself produced and knows to be valid JSON (`null`
    /// if it is not, which only a bug in a caller can cause).
    pub(crate) fn from_string(text: String) -> Self {
        if serde_json::from_str::<&RawValue>(&text).is_ok() {
            RawJson::line(ByteString::from(text))
        } else {
            RawJson::line(ByteString::from_static("null"))
        }
    }

    /// A copy that shares nothing with the buffer this was read from, for
    /// whatever keeps the value beyond its request or reply.
    pub fn detach(&self) -> Self {
        RawJson::line(ByteString::from(self.get()))
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
        RawJson::line(ByteString::from(String::from(text)))
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RawJson {}

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

    /// A value read from a WebSocket text frame is a slice of the frame as
    /// the library handed it over, not of a copy, and equals the same
    /// text held anywhere else.
    #[test]
    fn within_a_frame_slices_the_frame() {
        let frame = Utf8Bytes::from(r#"{"params":["é",{"a":1}]}"#);
        let text = &frame[10..frame.len() - 1];
        let sliced = RawJson::text_within(Source::from(&frame), text);
        assert_eq!(sliced.get(), r#"["é",{"a":1}]"#);
        assert!(matches!(sliced.0, Shared::Frame { .. }));
        assert_eq!(sliced.get().as_ptr(), text.as_ptr(), "no copy");
        assert_eq!(
            sliced,
            RawJson::copy(&RawValue::from_string(text.into()).expect("json"))
        );
        let detached = sliced.detach();
        assert_eq!(detached, sliced);
        assert!(!frame
            .as_bytes()
            .as_ptr_range()
            .contains(&detached.get().as_ptr()));
        let elsewhere = String::from("[1]");
        let copied = RawJson::text_within(Source::from(&frame), &elsewhere);
        assert_eq!(copied.get(), "[1]");
        assert_ne!(copied.get().as_ptr(), elsewhere.as_ptr());
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
