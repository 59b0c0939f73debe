//! Frame decode errors, classified as §10 requires: can the connection go
//! on, which SBP code to answer with, and which frame it is about.

use super::{Frame, FrameId, INVALID_FRAME, KIND_ERROR};
use crate::dialect::sideband::subject::SubjectError;

/// Why bytes are not a valid frame. The `Display` text is the reference
/// decoder's message, to be sent in the ErrorFrame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer than 18 bytes. Fatal.
    #[error("Invalid frame: too short")]
    TooShort {
        /// The kind byte, when there was one.
        kind: Option<u8>,
    },
    /// Flag bits 1–7 set. Fatal.
    #[error("Invalid frame: reserved flag bits must be zero")]
    ReservedFlags {
        /// The offending frame's id.
        id: FrameId,
        /// The kind byte.
        kind: u8,
    },
    /// Timestamp flag set but fewer than 26 bytes. Fatal.
    #[error("Invalid frame: incomplete timestamp")]
    IncompleteTimestamp {
        /// The offending frame's id.
        id: FrameId,
        /// The kind byte.
        kind: u8,
    },
    /// Kind ≥ 4. Fatal.
    #[error("Unknown frame kind")]
    UnknownKind {
        /// The offending frame's id.
        id: FrameId,
        /// The kind byte.
        kind: u8,
    },
    /// A Control frame without an op byte.
    #[error("Invalid control frame: no operation")]
    NoControlOp {
        /// The offending frame's id.
        id: FrameId,
    },
    /// A Control op ≥ 4.
    #[error("Unknown control op")]
    UnknownControlOp {
        /// The offending frame's id.
        id: FrameId,
        /// The op byte.
        op: u8,
    },
    /// A Handshake without data.
    #[error("Invalid handshake frame: data is required")]
    HandshakeWithoutData {
        /// The offending frame's id.
        id: FrameId,
    },
    /// A Ping or Pong with data.
    #[error("Invalid ping/pong frame: must not have payload")]
    PingPongWithPayload {
        /// The offending frame's id.
        id: FrameId,
    },
    /// A Close reason that is not UTF-8 (switchyard decodes strictly, §10).
    #[error("Invalid control frame: close reason is not valid UTF-8")]
    CloseReasonNotUtf8 {
        /// The offending frame's id.
        id: FrameId,
    },
    /// A Message payload shorter than the 4-byte subject length.
    #[error("Invalid message frame: no subject")]
    NoSubject {
        /// The offending frame's id.
        id: FrameId,
    },
    /// A Message shorter than its declared subject length.
    #[error("Invalid message frame: incomplete subject")]
    IncompleteSubject {
        /// The offending frame's id.
        id: FrameId,
    },
    /// A subject outside §5's namespaces.
    #[error("Invalid subject namespace")]
    InvalidSubject {
        /// The offending frame's id.
        id: FrameId,
        /// Which rule it broke.
        #[source]
        reason: SubjectError,
    },
    /// An Ack payload shorter than 16 bytes.
    #[error("Invalid ack frame: no frame ID")]
    AckWithoutId {
        /// The offending frame's id.
        id: FrameId,
    },
    /// An Ack payload longer than 16 bytes.
    #[error("Invalid ack frame: unexpected trailing data")]
    AckTrailingData {
        /// The offending frame's id.
        id: FrameId,
    },
    /// An Error payload shorter than code + message length.
    #[error("Invalid error frame: no code or message")]
    ErrorWithoutCode {
        /// The offending frame's id.
        id: FrameId,
    },
    /// An Error payload shorter than its declared message length.
    #[error("Invalid error frame: incomplete message")]
    ErrorIncompleteMessage {
        /// The offending frame's id.
        id: FrameId,
    },
    /// An Error message that is not UTF-8 (switchyard decodes strictly).
    #[error("Invalid error frame: message is not valid UTF-8")]
    ErrorMessageNotUtf8 {
        /// The offending frame's id.
        id: FrameId,
    },
}

// === impl FrameError ===

impl FrameError {
    /// Whether the connection may continue after the ErrorFrame (§10):
    /// header errors are fatal (ErrorFrame 1002, then close 1002); payload
    /// errors, unknown control ops and invalid subjects are not.
    pub fn can_continue(&self) -> bool {
        !matches!(
            self,
            FrameError::TooShort { .. }
                | FrameError::ReservedFlags { .. }
                | FrameError::IncompleteTimestamp { .. }
                | FrameError::UnknownKind { .. }
        )
    }

    /// The SBP code to send in the ErrorFrame: always 1002 InvalidFrame.
    pub fn code(&self) -> u16 {
        INVALID_FRAME
    }

    /// The offending frame's id, when its header was readable.
    pub fn frame_id(&self) -> Option<FrameId> {
        use FrameError as E;
        match self {
            E::TooShort { .. } => None,
            E::ReservedFlags { id, .. }
            | E::IncompleteTimestamp { id, .. }
            | E::UnknownKind { id, .. }
            | E::NoControlOp { id }
            | E::UnknownControlOp { id, .. }
            | E::HandshakeWithoutData { id }
            | E::PingPongWithPayload { id }
            | E::CloseReasonNotUtf8 { id }
            | E::NoSubject { id }
            | E::IncompleteSubject { id }
            | E::InvalidSubject { id, .. }
            | E::AckWithoutId { id }
            | E::AckTrailingData { id }
            | E::ErrorWithoutCode { id }
            | E::ErrorIncompleteMessage { id }
            | E::ErrorMessageNotUtf8 { id } => Some(*id),
        }
    }

    /// True when the offending frame was (or claimed to be) an ErrorFrame.
    /// Those are counted and logged, never answered, so that two endpoints
    /// cannot loop (§10).
    pub fn about_error_frame(&self) -> bool {
        use FrameError as E;
        match self {
            E::TooShort { kind } => *kind == Some(KIND_ERROR),
            E::ReservedFlags { kind, .. } | E::IncompleteTimestamp { kind, .. } => {
                *kind == KIND_ERROR
            }
            E::ErrorWithoutCode { .. }
            | E::ErrorIncompleteMessage { .. }
            | E::ErrorMessageNotUtf8 { .. } => true,
            _ => false,
        }
    }

    /// The ErrorFrame to send, or `None` when the offending frame was an
    /// ErrorFrame. It carries the offending frame's id when readable, else
    /// `fresh_id`. After a fatal error the caller closes with 1002.
    pub fn reply(&self, fresh_id: FrameId) -> Option<Frame<'static>> {
        if self.about_error_frame() {
            return None;
        }
        let id = self.frame_id().unwrap_or(fresh_id);
        Some(Frame::error(id, self.code(), self.to_string()))
    }
}
