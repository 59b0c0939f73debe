//! One side of an SBP session (Sideband), for either role: handshake,
//! control frames, duplicate frame ids, and RPC envelopes in and out.
//!
//! switchyard is a back-to-back endpoint: it runs its own session on each
//! side and never forwards frames. Pure state, no I/O: the transport feeds
//! inbound binary messages to [`Sbp::on_frame`] and sends what it returns.

use std::collections::{HashSet, VecDeque};

use crate::dialect::sideband::{
    decode_envelope, encode_envelope, fits_subject, frame, random_id, random_peer_id, Body,
    Channel, Control, Encoding, EnvelopeError, Frame, FrameId, Handshake, Subject, SubjectRules,
    CAP_CBOR, CAP_RPC,
};
use crate::envelope::{Message, WireId};

/// Message frame ids remembered to drop duplicates.
const SEEN_FRAMES: usize = 1024;

/// What the transport must do after an inbound frame.
#[derive(Debug)]
pub(crate) enum SbpEvent {
    /// Nothing (Ack, Pong).
    Nothing,
    /// The frame was dropped for this reason (counted by the caller).
    Dropped(&'static str),
    /// The peer's handshake arrived: Message frames may now be sent.
    Ready,
    /// Send this frame and carry on.
    Send(Vec<u8>),
    /// An RPC message from the peer (`rpc` or `event` subject).
    Rpc(Message),
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
        code: u16,
        /// Close reason.
        reason: std::borrow::Cow<'static, str>,
    },
}

/// The session state of one Sideband connection.
#[derive(Debug)]
pub(crate) struct Sbp {
    local: Handshake,
    remote: Option<Handshake>,
    encoding: Encoding,
    rules: SubjectRules,
    /// Answer `app/…` subjects with ErrorFrame 1003 instead of dropping them.
    reject_app: bool,
    seen: HashSet<FrameId>,
    seen_order: VecDeque<FrameId>,
}

// === impl Sbp ===

impl Sbp {
    /// A fresh session; `cbor` advertises CBOR envelopes.
    pub(crate) fn new(cbor: bool) -> Self {
        let mut local = Handshake::local(random_peer_id(), cbor);
        if !local.caps.iter().any(|c| c == CAP_RPC) {
            local.caps.insert(0, CAP_RPC.to_owned());
        }
        if cbor && !local.caps.iter().any(|c| c == CAP_CBOR) {
            local.caps.push(CAP_CBOR.to_owned());
        }
        Sbp {
            local,
            remote: None,
            encoding: Encoding::Json,
            rules: SubjectRules::Current,
            reject_app: false,
            seen: HashSet::new(),
            seen_order: VecDeque::new(),
        }
    }

    /// Accepts the legacy `rpc/<method>` / `event/<name>` subjects on input
    /// and answers `app/…` subjects with ErrorFrame 1003 instead of dropping
    /// them, as configured.
    pub(crate) fn with_subjects(mut self, legacy: bool, reject_app: bool) -> Self {
        self.rules = if legacy {
            SubjectRules::AcceptLegacy
        } else {
            SubjectRules::Current
        };
        self.reject_app = reject_app;
        self
    }

    /// Our handshake frame, sent immediately on open.
    pub(crate) fn hello(&self) -> Vec<u8> {
        frame::encode(&Frame::control(
            random_id(),
            Control::Handshake(self.local.to_bytes()),
        ))
    }

    /// True once the peer's handshake arrived.
    pub(crate) fn ready(&self) -> bool {
        self.remote.is_some()
    }

    /// A Control Close frame (graceful close or shutdown).
    pub(crate) fn close_frame(reason: &str) -> Vec<u8> {
        frame::encode(&Frame::control(
            random_id(),
            Control::Close(reason.to_owned()),
        ))
    }

    /// Encodes `msg` as a Message frame: requests carry their cid as frame
    /// id; everything else gets a fresh random frame id.
    pub(crate) fn encode(&self, msg: &Message) -> Result<Vec<u8>, EnvelopeError> {
        let data = encode_envelope(msg, self.encoding)?;
        let (id, subject) = match msg {
            Message::Request {
                id: WireId::Cid(cid),
                ..
            } => (*cid, Subject::Rpc),
            Message::Notification { .. } => (random_id(), Subject::Event),
            _ => (random_id(), Subject::Rpc),
        };
        Ok(frame::encode(&Frame::message(id, subject, data)))
    }

    /// Handles one inbound binary message.
    pub(crate) fn on_frame(&mut self, bytes: &[u8]) -> SbpEvent {
        let frame = match frame::decode_with(bytes, self.rules) {
            Ok(frame) => frame,
            Err(e) => {
                // No reply to a (malformed) ErrorFrame: an ErrorFrame is
                // never answered with one (§10).
                let reply = e.reply(random_id()).map(|f| frame::encode(&f));
                if !self.ready() {
                    // Any failure before the peer's handshake ends
                    // negotiation (§3, §10).
                    return SbpEvent::Close {
                        frame: reply,
                        code: 1000,
                        reason: "negotiation_failed".into(),
                    };
                }
                if e.can_continue() {
                    return reply.map_or(SbpEvent::Nothing, SbpEvent::Send);
                }
                return SbpEvent::Close {
                    frame: reply,
                    code: 1002,
                    reason: "invalid frame".into(),
                };
            }
        };
        if !self.ready() {
            return self.negotiate(frame);
        }
        match frame.body {
            Body::Control(Control::Handshake(_)) => SbpEvent::Close {
                frame: Some(frame::encode(&Frame::error(
                    frame.id,
                    1000,
                    "Unexpected second handshake",
                ))),
                code: 1002,
                reason: "protocol violation".into(),
            },
            Body::Control(Control::Ping) => {
                SbpEvent::Send(frame::encode(&Frame::control(random_id(), Control::Pong)))
            }
            Body::Control(Control::Pong) | Body::Ack { .. } => SbpEvent::Nothing,
            // Stop sending; close 1000 with the peer's own reason.
            Body::Control(Control::Close(reason)) => SbpEvent::Close {
                frame: None,
                code: 1000,
                reason: reason.into(),
            },
            Body::Error { code, message, .. } => SbpEvent::PeerError {
                id: frame.id,
                code,
                message,
            },
            Body::Message { subject, data } => self.on_message(frame.id, &subject, &data),
        }
    }

    fn negotiate(&mut self, frame: Frame) -> SbpEvent {
        let fail = |code: u16, message: String| SbpEvent::Close {
            frame: Some(frame::encode(&Frame::error(frame.id, code, message))),
            code: 1000,
            reason: "negotiation_failed".into(),
        };
        let Body::Control(Control::Handshake(data)) = &frame.body else {
            return fail(1000, String::from("Expected a handshake first"));
        };
        match Handshake::parse(data) {
            Ok(remote) => {
                self.encoding = Encoding::negotiate(&self.local, &remote);
                self.remote = Some(remote);
                SbpEvent::Ready
            }
            Err(e) => fail(e.code(), e.to_string()),
        }
    }

    fn on_message(&mut self, id: FrameId, subject: &Subject, data: &[u8]) -> SbpEvent {
        if !self.remember(id) {
            return SbpEvent::Dropped("duplicate_frame");
        }
        match subject.channel() {
            Channel::Stream => SbpEvent::Send(frame::encode(&Frame::error(
                id,
                1003,
                "Unsupported feature: stream",
            ))),
            Channel::App if self.reject_app => SbpEvent::Send(frame::encode(&Frame::error(
                id,
                1003,
                "Unsupported feature: app subjects",
            ))),
            Channel::App => SbpEvent::Dropped("app_subject"),
            Channel::Rpc | Channel::Event => match decode_envelope(data, Encoding::detect(data)) {
                Ok(msg) if fits_subject(&msg, subject) => SbpEvent::Rpc(msg),
                Ok(_) => SbpEvent::Dropped("envelope_subject_mismatch"),
                Err(e) if subject.channel() == Channel::Rpc => self.invalid_envelope(id, &e),
                Err(_) => SbpEvent::Dropped("invalid_event_envelope"),
            },
        }
    }

    /// `E` 1100 with the cid when it could be read; else ErrorFrame 1002.
    fn invalid_envelope(&self, id: FrameId, e: &EnvelopeError) -> SbpEvent {
        match e.cid() {
            Some(cid) => {
                let error = crate::envelope::ErrorObject {
                    code: 1100,
                    message: e.to_string(),
                    data: None,
                };
                let reply = Message::Error {
                    id: Some(WireId::Cid(cid)),
                    error,
                };
                match self.encode(&reply) {
                    Ok(frame) => SbpEvent::Send(frame),
                    Err(_) => SbpEvent::Nothing,
                }
            }
            None => SbpEvent::Send(frame::encode(&Frame::error(
                id,
                1002,
                "Malformed RPC envelope",
            ))),
        }
    }

    /// Records a Message frame id; false when it was seen recently.
    fn remember(&mut self, id: FrameId) -> bool {
        if !self.seen.insert(id) {
            return false;
        }
        self.seen_order.push_back(id);
        if self.seen_order.len() > SEEN_FRAMES {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }
}
