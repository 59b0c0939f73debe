//! The RPC envelope carried in Message data on `rpc` and `event`
//! (sideband.md §6 JSON v1, §7 CBOR v2) ⇄ the neutral [`Message`].
//!
//! | `t` | neutral message |
//! |---|---|
//! | `r` | [`Message::Request`], id [`WireId::Cid`], method `m`, params `p` |
//! | `R` | [`Message::Response`]; no `result` is [`Outcome::Void`] |
//! | `E` | [`Message::Error`] with `code`, `message`, `data` |
//! | `N` | [`Message::Notification`], method `e`, params `d` |
//!
//! Decoding keeps payloads raw in their source encoding
//! ([`Payload::Json`] for v1, [`Payload::Cbor`] with the item's own bytes
//! for v2). Encoding passes payloads of the same encoding through and
//! transcodes the others by §7. Both encodings share one set of member
//! rules (`build`); only the reading of members differs.

use bytes::Bytes;
use compact_str::CompactString;

use crate::envelope::{ErrorObject, Message, Outcome, Payload, WireId};

use super::frame::MESSAGE_HEAD_ROOM;
use super::handshake::Handshake;
use super::subject::{Channel, Subject};

mod cbor;
mod error;
mod json;

pub use error::{EnvelopeError, EnvelopeReply};
pub use json::{decode_json_by_serde, JsonMembers};

/// A Sideband correlation id: 16 bytes (32 hex characters in JSON).
pub type Cid = [u8; 16];

/// The ErrorFrame message for an envelope on `rpc` whose cid is unreadable.
pub const MALFORMED_ENVELOPE: &str = "Malformed RPC envelope";

/// How an envelope is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// v1: compact JSON text.
    Json,
    /// v2: one CBOR map (defined by switchyard, §7).
    Cbor,
}

/// The envelope members, named as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Member {
    /// `t`: the envelope type.
    T,
    /// `m`: the request's method.
    M,
    /// `cid`: the correlation id.
    Cid,
    /// `p`: request params.
    P,
    /// `result`: a success result.
    Result,
    /// `code`: an error code.
    Code,
    /// `message`: an error message.
    Message,
    /// `data`: error data.
    Data,
    /// `e`: the notification's event name.
    E,
    /// `d`: the notification's data.
    D,
}

/// [`encode_envelope`] into `buf` (a buffer reused between calls), which
/// it replaces: `buf` holds the envelope, and nothing else, on success.
pub fn encode_envelope_into(
    msg: &Message,
    enc: Encoding,
    buf: &mut Vec<u8>,
) -> Result<(), EnvelopeError> {
    buf.clear();
    buf.reserve(capacity(msg));
    match enc {
        Encoding::Json => {
            // An empty buffer is valid UTF-8: its capacity carries over.
            let mut text = String::from_utf8(std::mem::take(buf)).unwrap_or_default();
            let encoded = json::encode_into(msg, &mut text);
            *buf = text.into_bytes();
            encoded
        }
        Encoding::Cbor => cbor::encode_into(msg, buf),
    }
}

/// Decodes one envelope from Message data.
pub fn decode_envelope(data: &[u8], enc: Encoding) -> Result<Message, EnvelopeError> {
    match enc {
        Encoding::Json => json::decode(data),
        Encoding::Cbor => cbor::decode(data),
    }
}

/// [`decode_envelope`] of `data` within the frame `source`: payloads are
/// slices of `source` (no copy).
pub fn decode_envelope_in(
    source: &Bytes,
    data: &[u8],
    enc: Encoding,
) -> Result<Message, EnvelopeError> {
    match enc {
        Encoding::Json => json::decode_in(Some(source), data),
        Encoding::Cbor => cbor::decode_in(Some(source), data),
    }
}

/// Encodes one message as an envelope. A [`Payload`] in the other
/// encoding is transcoded; one in the same encoding is copied as is.
pub fn encode_envelope(msg: &Message, enc: Encoding) -> Result<Vec<u8>, EnvelopeError> {
    let mut buf = Vec::new();
    encode_envelope_into(msg, enc, &mut buf)?;
    Ok(buf)
}

/// Whether an envelope belongs on a subject (§6): `rpc` carries `r`, `R`
/// and `E`, `event` carries `N`. A mismatch is dropped, non-fatally.
pub fn fits_subject(msg: &Message, subject: &Subject) -> bool {
    match subject.channel() {
        Channel::Rpc => !matches!(msg, Message::Notification { .. }),
        Channel::Event => matches!(msg, Message::Notification { .. }),
        Channel::Stream | Channel::App => false,
    }
}

// === impl Encoding ===

impl Encoding {
    /// The encoding of received data, by its first byte (§7): 0xA0–0xBF (a
    /// CBOR map) is CBOR, anything else JSON.
    pub fn detect(data: &[u8]) -> Self {
        match data.first() {
            Some(0xa0..=0xbf) => Encoding::Cbor,
            _ => Encoding::Json,
        }
    }

    /// The encoding to send on a link (§7): CBOR only when both handshakes
    /// list `encoding/cbor` or `encoding:cbor`.
    pub fn negotiate(local: &Handshake, remote: &Handshake) -> Self {
        if local.offers_cbor() && remote.offers_cbor() {
            Encoding::Cbor
        } else {
            Encoding::Json
        }
    }

    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Encoding::Json => "json",
            Encoding::Cbor => "cbor",
        }
    }
}

// === impl Member ===

impl Member {
    /// Every member, in declaration order.
    pub const ALL: [Member; 10] = [
        Member::T,
        Member::M,
        Member::Cid,
        Member::P,
        Member::Result,
        Member::Code,
        Member::Message,
        Member::Data,
        Member::E,
        Member::D,
    ];

    /// The key on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Member::T => "t",
            Member::M => "m",
            Member::Cid => "cid",
            Member::P => "p",
            Member::Result => "result",
            Member::Code => "code",
            Member::Message => "message",
            Member::Data => "data",
            Member::E => "e",
            Member::D => "d",
        }
    }
}

/// An `E` error about a failed code: not an integer.
enum CodeError {
    WrongType,
    NotInteger(String),
}

/// How one encoding reads the members of a parsed envelope. `Err(())`
/// means the member is present with the wrong type.
trait Fields {
    fn text(&self, member: Member) -> Result<Option<CompactString>, ()>;
    fn cid(&self) -> Result<Option<Cid>, ()>;
    fn code(&self) -> Result<Option<i64>, CodeError>;
    fn payload(&self, member: Member) -> Option<Payload>;
}

/// §6's member rules, shared by both encodings.
fn build(f: &impl Fields) -> Result<Message, EnvelopeError> {
    let cid = f.cid();
    let known = cid.ok().flatten();
    let t = required_text(f, Member::T, known)?;
    if t == "N" {
        // A cid on `N` is meaningless and ignored, even a malformed one.
        return Ok(Message::Notification {
            method: required_text(f, Member::E, None)?,
            params: f.payload(Member::D),
        });
    }
    if !matches!(t.as_str(), "r" | "R" | "E") {
        return Err(EnvelopeError::UnknownType {
            t: t.into(),
            cid: known,
        });
    }
    let cid = match cid {
        Ok(Some(cid)) => cid,
        Ok(None) => return Err(missing(Member::Cid, None)),
        Err(()) => return Err(EnvelopeError::BadCid),
    };
    let id = WireId::Cid(cid);
    Ok(match t.as_str() {
        "r" => Message::Request {
            id,
            method: required_text(f, Member::M, Some(cid))?,
            params: f.payload(Member::P),
        },
        "R" => Message::Response {
            id,
            result: f
                .payload(Member::Result)
                .map_or(Outcome::Void, Outcome::Value),
        },
        _ => Message::Error {
            id: Some(id),
            error: error_object(f, cid)?,
        },
    })
}

/// The members of an `E`.
fn error_object(f: &impl Fields, cid: Cid) -> Result<ErrorObject, EnvelopeError> {
    let code = match f.code() {
        Ok(Some(code)) => code,
        Ok(None) => return Err(missing(Member::Code, Some(cid))),
        Err(CodeError::WrongType) => return Err(wrong(Member::Code, Some(cid))),
        Err(CodeError::NotInteger(raw)) => return Err(EnvelopeError::BadCode { raw, cid }),
    };
    Ok(ErrorObject {
        code,
        message: required_text(f, Member::Message, Some(cid))?.into(),
        data: f.payload(Member::Data),
    })
}

fn required_text(
    f: &impl Fields,
    member: Member,
    cid: Option<Cid>,
) -> Result<CompactString, EnvelopeError> {
    match f.text(member) {
        Ok(Some(text)) => Ok(text),
        Ok(None) => Err(missing(member, cid)),
        Err(()) => Err(wrong(member, cid)),
    }
}

fn missing(member: Member, cid: Option<Cid>) -> EnvelopeError {
    EnvelopeError::Missing { member, cid }
}

fn wrong(member: Member, cid: Option<Cid>) -> EnvelopeError {
    EnvelopeError::WrongType { member, cid }
}

/// The cid of an outbound request, response or error.
/// Room for `msg`'s envelope in either encoding and the head of the frame
/// it is wrapped in ([`super::frame::wrap_message`]): the fixed members
/// (type, cid in hex, code) fit in 96 bytes; a payload transcoded from
/// CBOR to JSON may need up to twice its size (base64, float text), and
/// the buffer grows past this estimate in the rare cases it falls short.
fn capacity(msg: &Message) -> usize {
    let payload = |p: Option<&Payload>| match p {
        Some(cbor @ Payload::Cbor(_)) => cbor.encoded_len() * 2,
        other => other.map_or(0, Payload::encoded_len),
    };
    let variable = match msg {
        Message::Request { method, params, .. } => method.len() + payload(params.as_ref()),
        Message::Notification { method, params } => method.len() + payload(params.as_ref()),
        Message::Response { result, .. } => match result {
            Outcome::Value(value) => payload(Some(value)),
            Outcome::Void => 0,
        },
        Message::Error { error, .. } => error.message.len() + payload(error.data.as_ref()),
    };
    MESSAGE_HEAD_ROOM + 96 + variable
}

fn outbound_cid(id: Option<&WireId>) -> Result<Cid, EnvelopeError> {
    match id {
        Some(WireId::Cid(cid)) => Ok(*cid),
        Some(WireId::Json(_)) => Err(EnvelopeError::NotCid),
        None => Err(EnvelopeError::NoId),
    }
}

/// An integral float as an i64 code, if it is one.
/// `part` as a slice of `frame` (a reference count, no copy), if it lies
/// within it: the payloads and envelopes decoded in place.
fn slice_within(frame: &Bytes, part: &[u8]) -> Option<Bytes> {
    let (outer, inner) = (frame.as_ptr_range(), part.as_ptr_range());
    (outer.start <= inner.start && inner.end <= outer.end).then(|| frame.slice_ref(part))
}

fn integral_code(value: f64) -> Option<i64> {
    // -2⁶³ is exact as f64; the half-open range keeps the cast lossless.
    let min = i64::MIN as f64;
    let in_range = (min..-min).contains(&value);
    (value.fract() == 0.0 && in_range).then_some(value as i64)
}

#[cfg(test)]
mod tests;
