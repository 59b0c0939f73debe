//! Message subjects (sideband.md §5): which channel a Message frame is on.
//!
//! The current generation knows exactly `rpc`, `event`, `stream` and the
//! `app/` prefix. The seed ADR's prefixes (`rpc/<method>`, `event/<name>`,
//! `stream/…`) are only classified when the caller opts in with
//! [`SubjectRules::AcceptLegacy`]; otherwise they are invalid subjects like
//! any other. Classification is pure and never allocates more than the
//! subject's own length.

use std::fmt;

/// A valid subject, classified. Tails are the text after the prefix.
///
/// Build subjects with [`Subject::parse`] or the checked constructors
/// ([`Subject::app`], [`Subject::legacy_rpc`], [`Subject::legacy_event`]);
/// the frame encoder writes a subject as given and does not re-validate it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// Exactly `rpc`: requests, responses and errors (`r`, `R`, `E`).
    Rpc,
    /// Exactly `event`: notifications (`N`).
    Event,
    /// Exactly `stream`: reserved for v2; answered with ErrorFrame 1003.
    Stream,
    /// `app/<tail>`: vendor data, never an RPC envelope. Holds the tail,
    /// which may be empty (`app/` alone is valid).
    App(String),
    /// Legacy `rpc/<method>`: the `rpc` channel. Holds the method; the
    /// envelope's `m` wins over it.
    LegacyRpc(String),
    /// Legacy `event/<name>`: the `event` channel. Holds the name; the
    /// envelope's `e` wins over it.
    LegacyEvent(String),
    /// Legacy `stream/<tail>`: answered with ErrorFrame 1003.
    LegacyStream(String),
}

/// Whether the seed ADR's legacy subject forms are accepted on input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubjectRules {
    /// Current generation only: `rpc/echo` is an invalid subject.
    #[default]
    Current,
    /// Also classify `rpc/…`, `event/…` and `stream/…` (config
    /// `accept_legacy_subjects`).
    AcceptLegacy,
}

/// The channel a subject belongs to, whatever its generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// `rpc` or `rpc/…`.
    Rpc,
    /// `event` or `event/…`.
    Event,
    /// `stream` or `stream/…`.
    Stream,
    /// `app/…`.
    App,
}

/// Why a subject is invalid. Every variant is answered with the non-fatal
/// ErrorFrame 1002 `Invalid subject namespace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    /// Zero bytes long.
    #[error("subject is empty")]
    Empty,
    /// Longer than [`Subject::MAX_LEN`] bytes.
    #[error("subject is {0} bytes long (at most 256)")]
    TooLong(usize),
    /// Not valid UTF-8 (the reference accepts it; switchyard does not).
    #[error("subject is not valid UTF-8")]
    NotUtf8,
    /// Contains U+0000.
    #[error("subject contains U+0000")]
    ContainsNul,
    /// A legacy form while legacy subjects are not accepted.
    #[error("legacy subject form not accepted")]
    Legacy,
    /// Not `rpc`, `event`, `stream` or `app/…` (matching is case-sensitive).
    #[error("unknown subject namespace")]
    UnknownNamespace,
}

// === impl Subject ===

impl Subject {
    /// The longest valid subject, in bytes.
    pub const MAX_LEN: usize = 256;

    /// Validates and classifies raw subject bytes (§5: 1–256 UTF-8 bytes,
    /// no U+0000, case-sensitive namespaces).
    pub fn parse(bytes: &[u8], rules: SubjectRules) -> Result<Self, SubjectError> {
        let text = std::str::from_utf8(bytes).map_err(|_| SubjectError::NotUtf8)?;
        check_text(text)?;
        let legacy = rules == SubjectRules::AcceptLegacy;
        match text {
            "rpc" => Ok(Subject::Rpc),
            "event" => Ok(Subject::Event),
            "stream" => Ok(Subject::Stream),
            _ => {
                if let Some(tail) = text.strip_prefix("app/") {
                    return Ok(Subject::App(tail.to_owned()));
                }
                let legacy_form = if let Some(tail) = text.strip_prefix("rpc/") {
                    Subject::LegacyRpc(tail.to_owned())
                } else if let Some(tail) = text.strip_prefix("event/") {
                    Subject::LegacyEvent(tail.to_owned())
                } else if let Some(tail) = text.strip_prefix("stream/") {
                    Subject::LegacyStream(tail.to_owned())
                } else {
                    return Err(SubjectError::UnknownNamespace);
                };
                if legacy {
                    Ok(legacy_form)
                } else {
                    Err(SubjectError::Legacy)
                }
            }
        }
    }

    /// `app/<tail>`, checked.
    pub fn app(tail: &str) -> Result<Self, SubjectError> {
        checked(Subject::App(tail.to_owned()))
    }

    /// Legacy `rpc/<method>`, checked; used towards a connection that sent
    /// legacy subjects.
    pub fn legacy_rpc(method: &str) -> Result<Self, SubjectError> {
        checked(Subject::LegacyRpc(method.to_owned()))
    }

    /// Legacy `event/<name>`, checked.
    pub fn legacy_event(name: &str) -> Result<Self, SubjectError> {
        checked(Subject::LegacyEvent(name.to_owned()))
    }

    /// Re-checks a subject built by hand (length and U+0000).
    pub fn validate(&self) -> Result<(), SubjectError> {
        check_text(&self.to_string())
    }

    /// The channel, ignoring the generation.
    pub fn channel(&self) -> Channel {
        match self {
            Subject::Rpc | Subject::LegacyRpc(_) => Channel::Rpc,
            Subject::Event | Subject::LegacyEvent(_) => Channel::Event,
            Subject::Stream | Subject::LegacyStream(_) => Channel::Stream,
            Subject::App(_) => Channel::App,
        }
    }

    /// True for the seed ADR's prefixed forms. A connection that sent one
    /// SHOULD get legacy subjects in return (§5).
    pub fn is_legacy(&self) -> bool {
        matches!(
            self,
            Subject::LegacyRpc(_) | Subject::LegacyEvent(_) | Subject::LegacyStream(_)
        )
    }

    /// The subject's length in bytes on the wire.
    pub fn wire_len(&self) -> usize {
        let (prefix, tail) = self.parts();
        prefix.len() + tail.len()
    }

    /// The prefix and tail, whose concatenation is the wire text.
    pub(super) fn parts(&self) -> (&'static str, &str) {
        match self {
            Subject::Rpc => ("rpc", ""),
            Subject::Event => ("event", ""),
            Subject::Stream => ("stream", ""),
            Subject::App(tail) => ("app/", tail),
            Subject::LegacyRpc(tail) => ("rpc/", tail),
            Subject::LegacyEvent(tail) => ("event/", tail),
            Subject::LegacyStream(tail) => ("stream/", tail),
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (prefix, tail) = self.parts();
        f.write_str(prefix)?;
        f.write_str(tail)
    }
}

// === impl Channel ===

impl Channel {
    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Channel::Rpc => "rpc",
            Channel::Event => "event",
            Channel::Stream => "stream",
            Channel::App => "app",
        }
    }
}

/// Length and U+0000 rules shared by parsing and the constructors.
fn check_text(text: &str) -> Result<(), SubjectError> {
    if text.is_empty() {
        return Err(SubjectError::Empty);
    }
    if text.len() > Subject::MAX_LEN {
        return Err(SubjectError::TooLong(text.len()));
    }
    if text.contains('\0') {
        return Err(SubjectError::ContainsNul);
    }
    Ok(())
}

fn checked(subject: Subject) -> Result<Subject, SubjectError> {
    subject.validate().map(|()| subject)
}
