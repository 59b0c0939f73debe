//! Sideband: SBP binary frames over WebSocket carrying an RPC envelope in
//! JSON (v1) or CBOR (v2), as `docs/protocols.md` describes.
//!
//! Pure and synchronous like every dialect: bytes in, values out. The
//! session that owns the WebSocket (handshake timing, Ping/Pong, duplicate
//! frame ids, cid rewriting) calls in here and decides what to send; each
//! decode error says whether the connection can continue and which SBP code
//! to answer with.
//!
//! # Layout
//!
//! - [`frame`]: the SBP frame codec (§2): [`Frame`], [`decode`], [`encode`],
//!   [`FrameError`].
//! - [`subject`]: subject validation and classification (§5): [`Subject`].
//! - [`handshake`]: the Control Handshake JSON (§3): [`Handshake`].
//! - [`cids`]: [`cids::CidMap`], the random cids switchyard's own
//!   requests carry, each standing for one of its integer ids.
//! - [`client`]: the listener half: one client connection's state (its
//!   SBP session and the cids of its pushes), every session event mapped
//!   to what the connection does.
//! - `session`: one side of an SBP session, for either role (handshake
//!   state, control frames, duplicate frame ids, legacy reply subjects),
//!   still pure: the transport feeds it frames and sends what it returns.
//! - [`envelope`]: `r`/`R`/`E`/`N` ⇄ neutral [`Message`] (§6, §7):
//!   [`decode_envelope`], [`encode_envelope`] ([`encode_envelope_into`]),
//!   [`Encoding`].
//! - [`transcode`]: JSON ⇄ CBOR payload values by §7's tables.
//! - `cbor`, `scalar`, `hex`: private helpers (a strict CBOR reader and
//!   writer; float text, bignums, base64; lowercase hex).
//! - Error codes, and their mapping to and from the JSON dialects, are in
//!   [`crate::dialect::errors`] with every other dialect's.
//!
//! [`Message`]: crate::envelope::Message

pub mod cids;
pub mod client;
pub mod envelope;
pub mod frame;
pub mod handshake;
pub(crate) mod session;
pub mod subject;
pub mod transcode;
pub(crate) mod upstream;

pub(crate) mod cbor;
pub(crate) mod dropped;
mod hex;
mod scalar;
#[cfg(test)]
pub(in crate::dialect) mod testutil;

pub use cbor::{CborError, MAX_DEPTH};
pub use envelope::{
    decode_envelope, decode_envelope_in, decode_json_by_serde, encode_envelope,
    encode_envelope_into, fits_subject, Cid, Encoding, EnvelopeError, EnvelopeReply, JsonMembers,
    Member, MALFORMED_ENVELOPE,
};
pub use frame::{
    decode, decode_with, encode, encode_into, random_id, wrap_message, Body, Control, Frame,
    FrameError, FrameId, INVALID_FRAME,
};
pub use handshake::{random_peer_id, Handshake, HandshakeError, CAP_CBOR, CAP_CBOR_ALT, CAP_RPC};
pub use scalar::MAX_BIGNUM_BYTES;
pub use subject::{Channel, Subject, SubjectError, SubjectRules};
pub use transcode::{
    cbor_to_json, cbor_to_json_into, json_to_cbor, TranscodeError, MAX_PAYLOAD_DEPTH,
};

#[cfg(test)]
mod tests;
