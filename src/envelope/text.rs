//! [`Text`]: a text frame or line as a transport read it, and [`Source`],
//! the text a message is decoded from, borrowed.
//!
//! A WebSocket text frame comes from the library as its `Utf8Bytes`,
//! checked as UTF-8 once by the library; a line or a body comes as a
//! `ByteString`, checked once as it is read. Each stays the type it came as
//! (turning one into the other would check every byte again: the crate has
//! no `unsafe`), and the raw values decoded from it ([`RawJson`]) are slices
//! of it, no copy.
//!
//! [`RawJson`]: super::RawJson

use std::fmt;
use std::ops::Deref;

use bytestring::ByteString;
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// A text frame or line as read (shared bytes, UTF-8).
#[derive(Clone, PartialEq, Eq)]
pub enum Text {
    /// A WebSocket text frame, as the library handed it over.
    Frame(Utf8Bytes),
    /// A line or a body.
    Line(ByteString),
}

/// The text a message is decoded from (a [`Text`], or an upstream's line
/// or frame), borrowed: what its raw values are sliced out of.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// A WebSocket text frame.
    Frame(&'a Utf8Bytes),
    /// A line or a body.
    Line(&'a ByteString),
}

// === impl Text ===

impl Text {
    /// The text as a `ByteString`: a line as it is; a frame's bytes checked
    /// again (for decoders that take a `ByteString`).
    pub fn to_line(&self) -> ByteString {
        match self {
            Text::Line(line) => line.clone(),
            // UTF-8 already: the check cannot fail (no `unsafe` here).
            Text::Frame(frame) => ByteString::try_from(bytes::Bytes::from(frame.clone()))
                .unwrap_or_else(|_| ByteString::from(frame.as_str())),
        }
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Text::Frame(frame) => frame,
            Text::Line(line) => line,
        }
    }
}

impl From<Utf8Bytes> for Text {
    fn from(frame: Utf8Bytes) -> Self {
        Text::Frame(frame)
    }
}

impl From<ByteString> for Text {
    fn from(line: ByteString) -> Self {
        Text::Line(line)
    }
}

impl From<&str> for Text {
    /// A copy of `text`, as a line.
    fn from(text: &str) -> Self {
        Text::Line(ByteString::from(text))
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

// === impl Source ===

impl Deref for Source<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Source::Frame(frame) => frame,
            Source::Line(line) => line,
        }
    }
}

impl<'a> From<&'a Text> for Source<'a> {
    fn from(text: &'a Text) -> Self {
        match text {
            Text::Frame(frame) => Source::Frame(frame),
            Text::Line(line) => Source::Line(line),
        }
    }
}

impl<'a> From<&'a ByteString> for Source<'a> {
    fn from(line: &'a ByteString) -> Self {
        Source::Line(line)
    }
}

impl<'a> From<&'a Utf8Bytes> for Source<'a> {
    fn from(frame: &'a Utf8Bytes) -> Self {
        Source::Frame(frame)
    }
}
