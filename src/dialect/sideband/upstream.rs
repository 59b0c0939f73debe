//! Sideband towards an upstream (sideband.md §10 "As a client"): the SBP
//! session and its handshake, a fresh cid per call, what an inbound frame
//! means for the link, and how the link says goodbye.
//!
//! Goodbyes, in the order they are chosen:
//! - one the session asked for (the upstream's Control Close is answered
//!   with close 1000 and the same reason, nothing else; a fatal frame with
//!   its ErrorFrame and close code);
//! - while switchyard stops: Control Close `shutdown`, then close 1001;
//! - otherwise: Control Close `disconnect`, then close 1000.

use std::borrow::Cow;

use parking_lot::{MappedMutexGuard, Mutex, MutexGuard};

use super::cids::CidMap;
use super::session::{encode_shared, encode_shared_with, on_frame_shared, Sbp, SbpEvent};
use super::{EnvelopeError, Member};
use crate::close::CloseCode;
use crate::dialect::link::{Decoded, Event, Farewell, Fault, Handshake, Options};
use crate::dialect::Dialect;
use crate::envelope::{Message, Payload};
use crate::error::{ErrorKind, ErrorOrigin, GatewayError, Side};

/// The reason both sides give a refused handshake (close 1000).
pub(crate) const NEGOTIATION_FAILED: &str = "negotiation_failed";

/// A Sideband upstream link's own state.
#[derive(Debug)]
pub(crate) struct SidebandUpstream {
    state: Mutex<State>,
    /// Send `{}` for absent params.
    fill_empty: bool,
}

/// The session, the cids of pending calls, and how the link ends.
#[derive(Debug)]
struct State {
    /// SBP session (negotiated before the link carries messages).
    sbp: Sbp,
    /// cid ⇄ gateway id of the pending calls.
    cids: CidMap,
    /// The goodbye the session asked for, if any.
    farewell: Option<Farewell>,
    /// The upstream closed the link with 1000 `negotiation_failed`.
    refused: bool,
}

/// True when a WebSocket close (`code`, `reason`) refuses our handshake.
pub(crate) fn refuses(code: u16, reason: &str) -> bool {
    code == CloseCode::Normal.as_u16() && reason == NEGOTIATION_FAILED
}

// === impl SidebandUpstream ===

impl SidebandUpstream {
    /// A session still to negotiate (CBOR offered).
    pub(crate) fn new(opts: Options) -> Self {
        SidebandUpstream {
            state: Mutex::new(State {
                sbp: Sbp::new(true),
                cids: CidMap::default(),
                farewell: None,
                refused: false,
            }),
            fill_empty: opts.fill_empty_params,
        }
    }

    fn sbp(&self) -> MappedMutexGuard<'_, Sbp> {
        MutexGuard::map(self.state.lock(), |s| &mut s.sbp)
    }

    /// Our handshake frame.
    pub(crate) fn hello(&self) -> Vec<u8> {
        self.state.lock().sbp.hello()
    }

    /// One frame while negotiating.
    pub(crate) fn on_handshake(&self, bytes: &[u8]) -> Handshake {
        match self.state.lock().sbp.on_frame(bytes) {
            SbpEvent::Ready => Handshake::Ready,
            SbpEvent::Close {
                frame,
                code,
                reason,
            } => Handshake::Refused(Farewell {
                frame,
                code,
                reason,
            }),
            SbpEvent::Nothing
            | SbpEvent::Dropped(_)
            | SbpEvent::Send(_)
            | SbpEvent::Rpc(_)
            | SbpEvent::InvalidEnvelope { .. }
            | SbpEvent::PeerError { .. } => Handshake::More,
        }
    }

    pub(crate) fn mark_refused(&self) {
        self.state.lock().refused = true;
    }

    pub(crate) fn refused(&self) -> bool {
        self.state.lock().refused
    }

    /// The goodbye to send now (see the module docs).
    pub(crate) fn farewell(&self, stopping: bool) -> Farewell {
        if let Some(farewell) = self.state.lock().farewell.take() {
            return farewell;
        }
        if stopping {
            control("shutdown", CloseCode::GoingAway, "going away")
        } else {
            control("disconnect", CloseCode::Normal, "closing")
        }
    }

    /// A fresh cid for gateway id `gid`.
    pub(crate) fn issue(&self, gid: u64) -> [u8; 16] {
        self.state.lock().cids.issue(gid)
    }

    /// The gateway id a reply's cid stands for; forgets it.
    pub(crate) fn take_cid(&self, cid: &[u8; 16]) -> Option<u64> {
        self.state.lock().cids.take(cid)
    }

    /// Forgets the cid of `gid`.
    pub(crate) fn forget(&self, gid: u64) {
        self.state.lock().cids.forget(gid);
    }

    /// How many calls wait with a cid (tests: the map holds no more).
    #[cfg(test)]
    pub(crate) fn pending_cids(&self) -> usize {
        self.state.lock().cids.len()
    }

    /// `{}` for absent params when configured.
    pub(crate) fn empty_params<'a>(&self) -> Option<Cow<'a, Payload>> {
        self.fill_empty.then(crate::dialect::jsonrpc::empty_object)
    }

    /// One message as a frame.
    pub(crate) fn encode(&self, msg: &Message) -> Result<Vec<u8>, GatewayError> {
        encode_shared(|| self.sbp(), msg).map_err(not_encodable)
    }

    /// One message as a frame in this thread's scratch buffer, handed to
    /// `take`.
    pub(crate) fn encode_with<R>(
        &self,
        msg: &Message,
        take: impl FnOnce(&[u8]) -> Result<R, GatewayError>,
    ) -> Result<R, GatewayError> {
        encode_shared_with(|| self.sbp(), msg, take)
            .map_err(not_encodable)
            .and_then(|taken| taken)
    }

    /// What one inbound frame means.
    pub(crate) fn on_frame(&self, bytes: &bytes::Bytes) -> Decoded {
        let event = match on_frame_shared(|| self.sbp(), bytes) {
            SbpEvent::Nothing | SbpEvent::Ready => return Decoded::Nothing,
            SbpEvent::Dropped(reason) => Event::Dropped(reason),
            SbpEvent::Send(frame) => Event::Send(frame),
            SbpEvent::Rpc(msg) => return Decoded::Message(msg),
            SbpEvent::InvalidEnvelope { cid, reply, detail } => match self.take_cid(&cid) {
                // An unreadable reply to one of our calls settles it at once.
                Some(gid) => {
                    let detail = format!("invalid reply from upstream ({detail})");
                    Event::Failed {
                        gid: Some(gid),
                        error: GatewayError::with_detail(ErrorKind::Internal, detail)
                            .on(Side::Upstream),
                        fault: Some(Fault::InvalidReply),
                    }
                }
                None => Event::Fault {
                    fault: Fault::InvalidEnvelope,
                    reply,
                },
            },
            SbpEvent::PeerError { id, code, message } => match self.take_cid(&id) {
                // An ErrorFrame about one of our requests settles it.
                Some(gid) => {
                    let origin = ErrorOrigin {
                        dialect: Dialect::Sideband.as_str(),
                        code: i64::from(code),
                        message,
                    };
                    Event::Failed {
                        gid: Some(gid),
                        error: GatewayError::with_origin(ErrorKind::Internal, origin)
                            .on(Side::Upstream),
                        fault: None,
                    }
                }
                None => Event::Fault {
                    fault: Fault::PeerErrorFrame,
                    reply: None,
                },
            },
            SbpEvent::Close {
                frame,
                code,
                reason,
            } => {
                let farewell = Farewell {
                    frame,
                    code,
                    reason,
                };
                // The writer sends it last, whatever is still queued; the
                // first one set wins.
                self.state.lock().farewell.get_or_insert(farewell.clone());
                Event::Close(farewell)
            }
        };
        Decoded::Event(event)
    }
}

/// Control Close `reason`, then the WebSocket close.
fn control(reason: &str, code: CloseCode, ws_reason: &'static str) -> Farewell {
    Farewell {
        frame: Some(Sbp::close_frame(reason)),
        code,
        reason: ws_reason.into(),
    }
}

/// A message the Sideband envelope cannot carry: params that do not
/// transcode are the caller's fault, anything else ours.
fn not_encodable(e: EnvelopeError) -> GatewayError {
    match e {
        EnvelopeError::Transcode {
            member: Member::P, ..
        } => GatewayError::with_detail(ErrorKind::InvalidParams, e.to_string()),
        other => GatewayError::with_detail(ErrorKind::Internal, other.to_string()),
    }
}
