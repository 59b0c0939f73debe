//! One side of an SBP session (Sideband), for either role: handshake,
//! control frames, duplicate frame ids, and RPC envelopes in and out.
//!
//! switchyard is a back-to-back endpoint: it runs its own session on each
//! side and never forwards frames. Pure state, no I/O: the transport feeds
//! inbound binary messages to [`Sbp::on_frame`] and sends what it returns.

use std::borrow::Cow;
use std::cell::{RefCell, RefMut};
use std::collections::HashMap;

use foldhash::quality::RandomState;

use crate::close::CloseCode;
use crate::dialect::errors::INVALID_ENVELOPE;
use crate::dialect::sideband::{
    encode_envelope, fits_subject, frame, random_id, random_peer_id, Body, Channel, Cid, Control,
    Encoding, EnvelopeError, Frame, FrameError, FrameId, Handshake, Subject, SubjectRules,
    CAP_CBOR, CAP_RPC,
};
use crate::envelope::{Message, WireId};

pub(crate) use super::dropped::SbpDrop;
pub(crate) use event::SbpEvent;
use recent::RecentIds;
use shared::Step;
pub(crate) use shared::{encode_shared, encode_shared_with, on_frame_shared};

mod event;
mod recent;
mod shared;

/// Message frame ids remembered to drop duplicates.
const SEEN_FRAMES: usize = 1024;

/// Requests received on a legacy subject whose reply subject is
/// remembered. Each entry lives from the request to its reply, so the
/// connection's in-flight cap keeps the map far below this; past it, a
/// reply goes out on `rpc`.
const LEGACY_REPLIES: usize = 4096;

/// How much of an invalid envelope is quoted in an error's detail.
const QUOTED_BYTES: usize = 512;

/// The session state of one Sideband connection.
#[derive(Debug)]
pub(crate) struct Sbp {
    local: Handshake,
    remote: Option<Handshake>,
    encoding: Encoding,
    rules: SubjectRules,
    /// Answer `app/…` subjects with ErrorFrame 1003 instead of dropping them.
    reject_app: bool,
    /// The last [`SEEN_FRAMES`] Message frame ids.
    seen: RecentIds,
    /// True once the peer sent a legacy subject: requests and events to it
    /// go out on `rpc/<m>` and `event/<e>` (§5).
    legacy_peer: bool,
    /// The subject of each request received on a legacy subject, by cid:
    /// its reply goes out on it (§5, §10). At most [`LEGACY_REPLIES`].
    legacy_replies: HashMap<Cid, Subject, RandomState>,
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
            seen: RecentIds::new(SEEN_FRAMES),
            legacy_peer: false,
            legacy_replies: HashMap::with_hasher(RandomState::default()),
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
    /// id; everything else gets a fresh random frame id. A reply goes out
    /// on its request's subject; requests and events to a peer that sent
    /// legacy subjects use legacy subjects (§5). The gateway's sessions are
    /// shared between tasks and use [`encode_shared`].
    #[cfg(test)]
    pub(crate) fn encode(&mut self, msg: &Message) -> Result<Vec<u8>, EnvelopeError> {
        let cell = RefCell::new(self);
        encode_shared(|| RefMut::map(cell.borrow_mut(), |s| &mut **s), msg)
    }

    /// The frame id and subject of the Message frame carrying `msg`.
    fn address(&mut self, msg: &Message) -> (FrameId, Subject) {
        match msg {
            Message::Request {
                id: WireId::Cid(cid),
                method,
                ..
            } => (
                *cid,
                self.outbound_subject(|| Subject::legacy_rpc(method), Subject::Rpc),
            ),
            Message::Notification { method, .. } => (
                random_id(),
                self.outbound_subject(|| Subject::legacy_event(method), Subject::Event),
            ),
            Message::Response {
                id: WireId::Cid(cid),
                ..
            }
            | Message::Error {
                id: Some(WireId::Cid(cid)),
                ..
            } => (random_id(), self.reply_subject(cid)),
            _ => (random_id(), Subject::Rpc),
        }
    }

    /// The legacy form for a legacy peer (when the name fits in a
    /// subject), else the current channel. The legacy form (a string) is
    /// only made for a legacy peer.
    fn outbound_subject<E>(
        &self,
        legacy: impl FnOnce() -> Result<Subject, E>,
        current: Subject,
    ) -> Subject {
        if !self.legacy_peer {
            return current;
        }
        legacy().unwrap_or(current)
    }

    /// The subject of the request `cid` answers (`rpc` unless it came on a
    /// legacy subject).
    fn reply_subject(&mut self, cid: &Cid) -> Subject {
        self.legacy_replies.remove(cid).unwrap_or(Subject::Rpc)
    }

    /// Notes the subject of a request that came on a legacy subject.
    fn note_subject(&mut self, msg: &Message, subject: &Subject) {
        if !matches!(subject, Subject::LegacyRpc(_) | Subject::LegacyEvent(_)) {
            return;
        }
        self.legacy_peer = true;
        if let (
            Subject::LegacyRpc(_),
            Message::Request {
                id: WireId::Cid(cid),
                ..
            },
        ) = (subject, msg)
        {
            if self.legacy_replies.len() < LEGACY_REPLIES {
                self.legacy_replies.insert(*cid, subject.clone());
            }
        }
    }

    /// Handles one inbound binary message (copied: a session shared
    /// between tasks uses [`on_frame_shared`], which slices payloads out of
    /// the frame instead).
    pub(crate) fn on_frame(&mut self, bytes: &[u8]) -> SbpEvent {
        let cell = RefCell::new(self);
        let bytes = bytes::Bytes::copy_from_slice(bytes);
        on_frame_shared(|| RefMut::map(cell.borrow_mut(), |s| &mut **s), &bytes)
    }

    /// Handles an inbound frame once its frame layer was read; an RPC
    /// envelope is left to decode.
    fn on_decoded<'a>(&mut self, frame: Result<Frame<'a>, FrameError>) -> Step<'a> {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                // No reply to a (malformed) ErrorFrame: an ErrorFrame is
                // never answered with one (§10).
                let reply = e.reply(random_id()).map(|f| frame::encode(&f));
                if !self.ready() {
                    // Any failure before the peer's handshake ends
                    // negotiation (§3, §10).
                    return Step::Done(SbpEvent::Close {
                        frame: reply,
                        code: CloseCode::Normal,
                        reason: "negotiation_failed".into(),
                    });
                }
                if e.can_continue() {
                    return Step::Done(reply.map_or(SbpEvent::Nothing, SbpEvent::Send));
                }
                return Step::Done(SbpEvent::Close {
                    frame: reply,
                    code: CloseCode::ProtocolError,
                    reason: "invalid frame".into(),
                });
            }
        };
        if !self.ready() {
            return Step::Done(self.negotiate(frame));
        }
        Step::Done(match frame.body {
            Body::Control(Control::Handshake(_)) => SbpEvent::Close {
                frame: Some(frame::encode(&Frame::error(
                    frame.id,
                    1000,
                    "Unexpected second handshake",
                ))),
                code: CloseCode::ProtocolError,
                reason: "protocol violation".into(),
            },
            Body::Control(Control::Ping) => {
                SbpEvent::Send(frame::encode(&Frame::control(random_id(), Control::Pong)))
            }
            Body::Control(Control::Pong) | Body::Ack { .. } => SbpEvent::Nothing,
            // Stop sending; close 1000 with the peer's own reason.
            Body::Control(Control::Close(reason)) => SbpEvent::Close {
                frame: None,
                code: CloseCode::Normal,
                reason: reason.into(),
            },
            Body::Error { code, message, .. } => SbpEvent::PeerError {
                id: frame.id,
                code,
                message,
            },
            Body::Message { subject, data } => return self.on_message(frame.id, subject, data),
        })
    }

    fn negotiate(&mut self, frame: Frame<'_>) -> SbpEvent {
        let fail = |code: u16, message: String| SbpEvent::Close {
            frame: Some(frame::encode(&Frame::error(frame.id, code, message))),
            code: CloseCode::Normal,
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

    fn on_message<'a>(&mut self, id: FrameId, subject: Subject, data: Cow<'a, [u8]>) -> Step<'a> {
        if !self.seen.insert(id) {
            return Step::Done(SbpEvent::Dropped(SbpDrop::DuplicateFrame));
        }
        Step::Done(match subject.channel() {
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
            Channel::App => SbpEvent::Dropped(SbpDrop::AppSubject),
            Channel::Rpc | Channel::Event => return Step::Envelope { id, subject, data },
        })
    }

    /// Handles an RPC envelope from Message frame `id`, decoded as `decoded`.
    fn on_envelope(
        &mut self,
        id: FrameId,
        subject: &Subject,
        decoded: Result<Message, EnvelopeError>,
        data: &[u8],
    ) -> SbpEvent {
        match decoded {
            Ok(msg) if fits_subject(&msg, subject) => {
                self.note_subject(&msg, subject);
                SbpEvent::Rpc(msg)
            }
            Ok(_) => SbpEvent::Dropped(SbpDrop::EnvelopeSubjectMismatch),
            Err(e) if subject.channel() == Channel::Rpc => {
                self.invalid_envelope(id, subject, &e, data)
            }
            Err(_) => SbpEvent::Dropped(SbpDrop::InvalidEventEnvelope),
        }
    }

    /// `E` 1100 with the cid when it could be read (on the envelope's own
    /// subject); else ErrorFrame 1002.
    fn invalid_envelope(
        &mut self,
        id: FrameId,
        subject: &Subject,
        e: &EnvelopeError,
        data: &[u8],
    ) -> SbpEvent {
        match e.cid() {
            Some(cid) => {
                let error = crate::envelope::ErrorObject {
                    code: INVALID_ENVELOPE,
                    message: e.to_string(),
                    data: None,
                };
                let reply = Message::Error {
                    id: Some(WireId::Cid(cid)),
                    error,
                };
                let reply = encode_envelope(&reply, self.encoding)
                    .ok()
                    .map(|data| frame::encode(&Frame::message(random_id(), subject.clone(), data)));
                SbpEvent::InvalidEnvelope {
                    cid,
                    reply,
                    detail: format!("{e}: {}", quote(data)),
                }
            }
            None => SbpEvent::Send(frame::encode(&Frame::error(
                id,
                1002,
                "Malformed RPC envelope",
            ))),
        }
    }
}

/// An envelope for an error's detail: its text (JSON) or its bytes in hex
/// (CBOR), cut at [`QUOTED_BYTES`].
fn quote(data: &[u8]) -> String {
    let cut = &data[..data.len().min(QUOTED_BYTES)];
    let more = if cut.len() < data.len() { "…" } else { "" };
    match Encoding::detect(data) {
        Encoding::Json => format!("{}{more}", String::from_utf8_lossy(cut)),
        Encoding::Cbor => {
            let hex: String = cut.iter().map(|b| format!("{b:02x}")).collect();
            format!("CBOR {hex}{more}")
        }
    }
}

#[cfg(test)]
mod tests;
