//! [`SbpDrop`]: why a Sideband session dropped a Message frame (the
//! `reason` label of `switchyard_dropped_messages_total`).

/// Why a Message frame was dropped (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SbpDrop {
    /// A frame id seen before.
    DuplicateFrame,
    /// An `app` subject, which switchyard does not serve.
    AppSubject,
    /// An envelope that does not match its subject.
    EnvelopeSubjectMismatch,
    /// An event whose envelope cannot be read.
    InvalidEventEnvelope,
}

impl SbpDrop {
    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            SbpDrop::DuplicateFrame => "duplicate_frame",
            SbpDrop::AppSubject => "app_subject",
            SbpDrop::EnvelopeSubjectMismatch => "envelope_subject_mismatch",
            SbpDrop::InvalidEventEnvelope => "invalid_event_envelope",
        }
    }
}
