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
//! - This file: error-code mapping between Sideband `E` and the JSON
//!   dialects (error-codes.md §3.2, §3.3).
//!
//! [`Message`]: crate::envelope::Message

use crate::dialect::errors;
use crate::dialect::json_string::push_json_string;
use crate::dialect::Dialect;
use crate::envelope::{raw_from_string, ErrorObject, Payload, RawJson};
use crate::error::{ErrorKind, GatewayError};

pub mod cids;
pub mod client;
pub mod envelope;
pub mod frame;
pub mod handshake;
pub(crate) mod session;
pub mod subject;
pub mod transcode;

mod cbor;
mod dropped;
mod hex;
mod scalar;
#[cfg(test)]
mod testutil;

pub use cbor::{CborError, MAX_DEPTH};
pub use envelope::{
    decode_envelope, decode_envelope_in, encode_envelope, encode_envelope_into, fits_subject, Cid,
    Encoding, EnvelopeError, EnvelopeReply, Member, INVALID_ENVELOPE, MALFORMED_ENVELOPE,
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

/// Maps a Sideband `E` error to a JSON dialect (error-codes.md §3.2).
///
/// 1100, 1101, 1103, 2000 and codes above 2000 map by declared
/// equivalence; everything else becomes -32603 with the original under
/// `data.origin`. The message is kept. CBOR `data` is transcoded to JSON;
/// if it cannot be, the caller gets switchyard's `internal` error instead
/// (§7). Towards [`Dialect::Sideband`] the error passes unchanged.
pub fn error_to_json_dialect(
    code: i64,
    message: &str,
    data: Option<&Payload>,
    target: Dialect,
) -> ErrorObject {
    if target == Dialect::Sideband {
        return ErrorObject {
            code,
            message: message.to_owned(),
            data: data.cloned(),
        };
    }
    let equivalent = match code {
        1100 => Some(-32600),
        1101 => Some(-32601),
        1103 if target == Dialect::Holon => Some(4),
        1103 => Some(-32008),
        2000 => Some(-32000),
        c if c > 2000 => Some(c),
        _ => None,
    };
    let data = match data.map(as_json).transpose() {
        Ok(data) => data,
        Err(e) => return untranslatable(&e, target),
    };
    match equivalent {
        Some(code) => ErrorObject {
            code,
            message: message.to_owned(),
            data: data.map(Payload::Json),
        },
        None => ErrorObject {
            code: -32603,
            message: message.to_owned(),
            data: Some(Payload::Json(json_origin(
                Dialect::Sideband,
                code,
                message,
                data.as_ref().map(RawJson::get),
            ))),
        },
    }
}

/// Maps an error from a JSON dialect to a Sideband `E` (error-codes.md §3.3).
///
/// -32600, -32601, -32000, holon's 4 and codes ≥ 2000 map by declared
/// equivalence; -32700 becomes 1100 and holon's 12 becomes 1101 with
/// `data.origin`; everything else becomes 2000 with `data.origin`. The
/// origin is built in the encoding of the original `data` (a CBOR map when
/// it is CBOR), so this never fails. From [`Dialect::Sideband`] the error
/// passes unchanged.
pub fn error_from_json_dialect(err: &ErrorObject, source: Dialect) -> ErrorObject {
    if source == Dialect::Sideband {
        return err.clone();
    }
    let holon = source == Dialect::Holon;
    let equivalent = match err.code {
        -32600 => Some(1100),
        -32601 => Some(1101),
        -32000 => Some(2000),
        4 if holon => Some(1103),
        c if c >= 2000 => Some(c),
        _ => None,
    };
    if let Some(code) = equivalent {
        return ErrorObject {
            code,
            message: err.message.clone(),
            data: err.data.clone(),
        };
    }
    let code = match err.code {
        -32700 => 1100,
        12 if holon => 1101,
        _ => 2000,
    };
    ErrorObject {
        code,
        message: err.message.clone(),
        data: Some(origin(source, err.code, &err.message, err.data.as_ref())),
    }
}

/// The error for a pending call that an upstream ErrorFrame named
/// (error-codes.md §4): switchyard's `internal` in `target`'s rendering,
/// with `{"origin":{"dialect":"sideband","code":…,"message":…}}` as data.
pub fn error_frame_to_internal(code: u16, message: &str, target: Dialect) -> ErrorObject {
    let mut error = errors::render(&GatewayError::new(ErrorKind::Internal), target);
    error.data = Some(Payload::Json(json_origin(
        Dialect::Sideband,
        i64::from(code),
        message,
        None,
    )));
    error
}

/// `{"origin":{…}}` in the encoding of `data` (JSON when absent).
fn origin(dialect: Dialect, code: i64, message: &str, data: Option<&Payload>) -> Payload {
    match data {
        Some(Payload::Cbor(raw)) => {
            let mut out = Vec::with_capacity(64 + message.len() + raw.len());
            cbor::write_head(&mut out, cbor::MAJOR_MAP, 1);
            cbor::write_text(&mut out, "origin");
            cbor::write_head(&mut out, cbor::MAJOR_MAP, 4);
            cbor::write_text(&mut out, "dialect");
            cbor::write_text(&mut out, dialect.as_str());
            cbor::write_text(&mut out, "code");
            cbor::write_int(&mut out, code);
            cbor::write_text(&mut out, "message");
            cbor::write_text(&mut out, message);
            cbor::write_text(&mut out, "data");
            out.extend_from_slice(raw);
            Payload::Cbor(out.into())
        }
        Some(Payload::Json(raw)) => {
            Payload::Json(json_origin(dialect, code, message, Some(raw.get())))
        }
        None => Payload::Json(json_origin(dialect, code, message, None)),
    }
}

/// `{"origin":{"dialect":…,"code":…,"message":…,"data":…}}`, `data`
/// omitted when absent (error-codes.md, principle 4).
fn json_origin(dialect: Dialect, code: i64, message: &str, data: Option<&str>) -> RawJson {
    let mut out = String::from(r#"{"origin":{"dialect":"#);
    push_json_string(&mut out, dialect.as_str());
    out.push_str(r#","code":"#);
    out.push_str(&code.to_string());
    out.push_str(r#","message":"#);
    push_json_string(&mut out, message);
    if let Some(data) = data {
        out.push_str(r#","data":"#);
        out.push_str(data);
    }
    out.push_str("}}");
    raw_from_string(out)
}

/// A payload as JSON, transcoding CBOR.
fn as_json(data: &Payload) -> Result<RawJson, TranscodeError> {
    match data {
        Payload::Json(raw) => Ok(raw.clone()),
        Payload::Cbor(bytes) => cbor_to_json(bytes).map(RawJson::from),
    }
}

/// §7: error data that cannot be transcoded gives the caller `internal`.
fn untranslatable(e: &TranscodeError, target: Dialect) -> ErrorObject {
    let err = GatewayError::with_detail(
        ErrorKind::Internal,
        format!("upstream error data cannot be transcoded: {e}"),
    );
    errors::render(&err, target)
}

#[cfg(test)]
mod tests;
