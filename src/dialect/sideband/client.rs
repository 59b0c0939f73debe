//! The listener half of Sideband: one client connection's state and what
//! switchyard does with it. Pure: no sockets, no tokio.
//!
//! A Sideband connection has state the JSON dialects do not: the SBP
//! session (handshake, negotiated envelope encoding, duplicate frame ids,
//! legacy reply subjects) and the cids of the requests switchyard pushes
//! to the client. [`SidebandClient`] owns both; the client's
//! [`ClientCodec`](crate::dialect::ClientCodec) holds it, and every
//! session event is turned into an [`Inbound`] here, once.

use bytes::Bytes;
use bytestring::ByteString;
use parking_lot::Mutex;

use super::cids::CidMap;
use super::session::{encode_shared_with, on_frame_shared, Sbp, SbpEvent};
use super::EnvelopeError;
use crate::dialect::{jsonrpc, Inbound, Item, Oversize};
use crate::envelope::{Message, WireId};

/// The subprotocol a Sideband client offers (sideband.md §1).
pub const SUBPROTOCOL: &str = "sideband.v1";

/// The close reason for a message over the size limit (no error reply
/// comes first).
pub const TOO_LARGE: &str = "Message too large";

/// The subprotocol to select from a client's offers: exactly
/// [`SUBPROTOCOL`], or none.
pub fn subprotocol<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    offered.into_iter().find(|p| *p == SUBPROTOCOL)
}

/// How a listener's Sideband sessions start (from its configuration). Its
/// fields are public: three independent switches the session copies from
/// the listener's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Advertise CBOR envelopes.
    pub cbor: bool,
    /// Accept the legacy `rpc/<method>` / `event/<name>` subjects.
    pub legacy_subjects: bool,
    /// Answer `app/…` subjects with ErrorFrame 1003 instead of dropping them.
    pub reject_app: bool,
}

/// One Sideband client connection's state.
///
/// Both parts sit behind a lock because the connection's reader (inbound
/// frames) and everything that writes to the client (replies, pushes,
/// events, each from its own task) share them; a lock is held for the
/// state only, never while a frame or an envelope is decoded or encoded
/// (see `session::shared`).
#[derive(Debug)]
pub struct SidebandClient {
    /// The SBP session.
    sbp: Mutex<Sbp>,
    /// The cid of each request pushed to the client → its push number.
    /// One entry per unanswered push: bounded by `max_unanswered_pushes`.
    pushes: Mutex<CidMap>,
}

// === impl SidebandClient ===

impl SidebandClient {
    /// A fresh connection's state.
    pub fn new(options: Options) -> Self {
        let sbp = Sbp::new(options.cbor).with_subjects(options.legacy_subjects, options.reject_app);
        SidebandClient {
            sbp: Mutex::new(sbp),
            pushes: Mutex::new(CidMap::default()),
        }
    }

    /// Our handshake frame, sent as soon as the connection opens.
    pub fn hello(&self) -> Vec<u8> {
        self.sbp.lock().hello()
    }

    /// True while the client has not sent its handshake.
    pub fn negotiating(&self) -> bool {
        !self.sbp.lock().ready()
    }

    /// The Control Close `shutdown` sent before the shutdown close
    /// (sideband.md §10).
    pub fn goodbye() -> Vec<u8> {
        Sbp::close_frame("shutdown")
    }

    /// A message over the size limit gets only the close.
    pub const fn oversize() -> Oversize {
        Oversize {
            reply: None,
            reason: TOO_LARGE,
        }
    }

    /// Decodes a text frame: JSON-RPC text to a Sideband client (the
    /// transport closes a Sideband client that sends one, 1003).
    pub fn decode_text(&self, text: &ByteString, max_batch_items: usize) -> Inbound {
        jsonrpc::decode(text, max_batch_items)
    }

    /// Handles one inbound binary frame: what the connection must do.
    /// Every SBP session event a client causes is mapped here, once.
    pub fn decode(&self, bytes: &Bytes) -> Inbound {
        match on_frame_shared(|| self.sbp.lock(), bytes) {
            SbpEvent::Nothing | SbpEvent::Ready => Inbound::Nothing,
            SbpEvent::Dropped(reason) => Inbound::Dropped(reason),
            SbpEvent::Send(frame)
            | SbpEvent::InvalidEnvelope {
                reply: Some(frame), ..
            } => Inbound::Answer(frame),
            SbpEvent::InvalidEnvelope { reply: None, .. } => Inbound::Nothing,
            SbpEvent::Rpc(msg) => Inbound::Single(Item::Valid(msg)),
            SbpEvent::PeerError { code, message, .. } => Inbound::PeerError { code, message },
            SbpEvent::Close {
                frame,
                code,
                reason,
            } => Inbound::Close {
                last: frame,
                code,
                reason,
            },
        }
    }

    /// Encodes `msg` as a Message frame in the negotiated encoding and
    /// hands it to `take` (which copies it where it goes) while it is in a
    /// per-thread buffer.
    pub fn encode_with<R>(
        &self,
        msg: &Message,
        take: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, EnvelopeError> {
        encode_shared_with(|| self.sbp.lock(), msg, take)
    }

    /// The wire id of push number `n`: a fresh random cid, which is also
    /// the request frame's id.
    pub fn push_id(&self, n: u64) -> WireId {
        WireId::Cid(self.pushes.lock().issue(n))
    }

    /// The push number a reply's cid answers (forgotten once taken).
    pub fn push_number(&self, cid: &[u8; 16]) -> Option<u64> {
        self.pushes.lock().take(cid)
    }

    /// Forgets the cid of push number `n` (abandoned, or never sent).
    pub fn forget_push(&self, n: u64) {
        self.pushes.lock().forget(n);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn a_push_cid_answers_once() {
        let client = SidebandClient::new(Options::default());
        let WireId::Cid(cid) = client.push_id(7) else {
            panic!("a Sideband push is identified by a cid");
        };
        assert_eq!(client.push_number(&cid), Some(7));
        assert_eq!(client.push_number(&cid), None);
        let WireId::Cid(cid) = client.push_id(8) else {
            panic!("a cid");
        };
        client.forget_push(8);
        assert_eq!(client.push_number(&cid), None);
    }

    #[test]
    fn negotiates_until_the_handshake() {
        let client = SidebandClient::new(Options::default());
        assert!(client.negotiating());
        // The peer's handshake is all it takes.
        let peer = SidebandClient::new(Options::default());
        let hello = Bytes::from(peer.hello());
        assert_eq!(client.decode(&hello), Inbound::Nothing);
        assert!(!client.negotiating());
    }
}
