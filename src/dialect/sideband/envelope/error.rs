//! What can be wrong with an envelope, decoding or encoding it, and the
//! answer §6 prescribes for each.

use crate::dialect::errors::{self, INVALID_ENVELOPE};
use crate::dialect::sideband::frame::{Frame, FrameId, INVALID_FRAME};
use crate::dialect::sideband::transcode::TranscodeError;
use crate::dialect::Dialect;
use crate::envelope::{Message, WireId};
use crate::error::{ErrorKind, GatewayError};

use super::{Cid, Member, MALFORMED_ENVELOPE};

/// Why an envelope could not be decoded (code 1100) or encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Not UTF-8 JSON / well-formed CBOR, or not a JSON object / CBOR map
    /// with text keys. No cid can be extracted.
    #[error("Malformed RPC envelope: {0}")]
    Malformed(String),
    /// A required member is absent.
    #[error("Invalid envelope: missing {}", .member.as_str())]
    Missing {
        /// The absent member.
        member: Member,
        /// The envelope's cid, if it could be read.
        cid: Option<Cid>,
    },
    /// A member has the wrong type.
    #[error("Invalid envelope: {} has the wrong type", .member.as_str())]
    WrongType {
        /// The offending member.
        member: Member,
        /// The envelope's cid, if it could be read.
        cid: Option<Cid>,
    },
    /// `t` is not `r`, `R`, `E` or `N`.
    #[error("Invalid envelope: unknown type {t:?}")]
    UnknownType {
        /// The `t` received.
        t: String,
        /// The envelope's cid, if it could be read.
        cid: Option<Cid>,
    },
    /// `cid` is not 32 lowercase hex characters (JSON) or a 16-byte byte
    /// string (CBOR).
    #[error("Invalid envelope: cid must be 16 bytes (32 lowercase hex characters in JSON)")]
    BadCid,
    /// `code` is a number but not an integer in the i64 range, which the
    /// neutral [`ErrorObject`](crate::envelope::ErrorObject) cannot carry.
    #[error("Invalid envelope: code {raw} is not an integer")]
    BadCode {
        /// The code as received (JSON token or float text).
        raw: String,
        /// The envelope's cid.
        cid: Cid,
    },
    /// Encoding: a request, response or error whose id is not a cid (ids
    /// are rewritten per hop before encoding).
    #[error("cannot encode envelope: id is not a Sideband cid")]
    NotCid,
    /// Encoding: an error about no particular request has no `E` form.
    #[error("cannot encode envelope: error without an id")]
    NoId,
    /// Encoding: a payload could not be transcoded (§7). `p` means
    /// `invalid_params` for the caller, `result`/`data` mean `internal`,
    /// `d` means drop and count.
    #[error("cannot transcode {}: {source}", .member.as_str())]
    Transcode {
        /// The member whose payload failed.
        member: Member,
        /// Why.
        #[source]
        source: TranscodeError,
    },
}

/// The answer §6 prescribes for an invalid envelope received on `rpc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvelopeReply {
    /// The cid was readable: `E` 1100 to that cid, sent on the request's
    /// subject with a fresh frame id.
    Envelope(Message),
    /// No cid: ErrorFrame 1002 `Malformed RPC envelope`, carrying the
    /// offending frame's id.
    Frame(Frame<'static>),
}

// === impl EnvelopeError ===

impl EnvelopeError {
    /// The cid of an envelope that failed to decode, when it could be read
    /// (§6: reply `E` 1100 with it; otherwise ErrorFrame 1002
    /// `Malformed RPC envelope`). Always `None` on `N`, whose cid is
    /// meaningless.
    pub fn cid(&self) -> Option<Cid> {
        match self {
            EnvelopeError::Missing { cid, .. }
            | EnvelopeError::WrongType { cid, .. }
            | EnvelopeError::UnknownType { cid, .. } => *cid,
            EnvelopeError::BadCode { cid, .. } => Some(*cid),
            _ => None,
        }
    }

    /// True for decode failures (answered with code 1100), false for
    /// failures to encode switchyard's own message.
    pub fn is_decode(&self) -> bool {
        !matches!(
            self,
            EnvelopeError::NotCid | EnvelopeError::NoId | EnvelopeError::Transcode { .. }
        )
    }

    /// The code to answer a decode failure with: 1100 InvalidEnvelope.
    pub fn code(&self) -> i64 {
        INVALID_ENVELOPE
    }

    /// Always true: an RPC error never closes the transport (§4).
    pub fn can_continue(&self) -> bool {
        true
    }

    /// What to send for this decode failure on `rpc`, the offending frame
    /// being `frame_id`; `None` for encode failures. (An invalid envelope on
    /// `event` gets no reply at all.)
    pub fn reply(&self, frame_id: FrameId) -> Option<EnvelopeReply> {
        if !self.is_decode() {
            return None;
        }
        Some(match self.cid() {
            Some(cid) => EnvelopeReply::Envelope(Message::Error {
                id: Some(WireId::Cid(cid)),
                error: errors::render(
                    &GatewayError::with_detail(ErrorKind::InvalidRequest, self.to_string()),
                    Dialect::Sideband,
                ),
            }),
            None => EnvelopeReply::Frame(Frame::error(frame_id, INVALID_FRAME, MALFORMED_ENVELOPE)),
        })
    }
}
