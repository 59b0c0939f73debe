//! What an [`Sbp`](super::Sbp) asks of its transport after an inbound
//! frame.

use super::SbpDrop;
use crate::close::CloseCode;
use crate::dialect::sideband::{Cid, FrameId};
use crate::envelope::Message;

/// What the transport must do after an inbound frame.
#[derive(Debug)]
pub(crate) enum SbpEvent {
    /// Nothing (Ack, Pong).
    Nothing,
    /// The frame was dropped for this reason (counted by the caller).
    Dropped(SbpDrop),
    /// The peer's handshake arrived: Message frames may now be sent.
    Ready,
    /// Send this frame and carry on.
    Send(Vec<u8>),
    /// An RPC message from the peer (`rpc` or `event` subject).
    Rpc(Message),
    /// An `rpc` envelope that failed to decode but whose cid could be read
    /// (§6). A server answers it with `reply` (`E` 1100); a client with a
    /// call pending under that cid settles the call instead.
    InvalidEnvelope {
        /// The envelope's cid.
        cid: Cid,
        /// `E` 1100 to that cid, on the envelope's own subject.
        reply: Option<Vec<u8>>,
        /// What was wrong, quoting the envelope.
        detail: String,
    },
    /// The peer reported an error about frame `id` (maybe one of ours).
    PeerError {
        /// The frame id the error names.
        id: FrameId,
        /// SBP code.
        code: u16,
        /// Message text.
        message: String,
    },
    /// Send `frame` (if any), then close the WebSocket.
    Close {
        /// A last frame to send.
        frame: Option<Vec<u8>>,
        /// WebSocket close code.
        code: CloseCode,
        /// Close reason.
        reason: std::borrow::Cow<'static, str>,
    },
}
