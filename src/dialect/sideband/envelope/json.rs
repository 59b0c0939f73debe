//! JSON v1 envelopes (sideband.md §6): compact JSON, absent members
//! omitted, keys in switchyard's order, `cid` as 32 lowercase hex.
//!
//! Members are borrowed as raw JSON and only the scalar ones (`t`, `m`,
//! `cid`, `code`, `message`, `e`) are parsed; payloads are slices of the
//! frame read ([`decode_in`]), or copied verbatim.

use bytes::Bytes;
use bytestring::ByteString;
use compact_str::CompactString;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::envelope::{Message, Outcome, Payload, RawJson};

use super::{
    build, integral_code, outbound_cid, slice_within, Cid, CodeError, EnvelopeError, Fields, Member,
};
use crate::dialect::json_string::{push_json_string, string_text};
use crate::dialect::sideband::{hex, transcode};

/// The members of one envelope object, borrowed. `Some` means present,
/// `null` included. Unknown keys are ignored.
#[derive(Deserialize)]
struct RawEnvelope<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    t: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    m: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    cid: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    p: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    code: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    message: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    data: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    e: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    d: Option<&'a RawValue>,
    /// The envelope's text as shared bytes, when payloads may be slices
    /// of it.
    #[serde(skip)]
    source: Option<ByteString>,
}

/// Keeps a present member, `null` included, as `Some(raw)`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

pub(super) fn decode(data: &[u8]) -> Result<Message, EnvelopeError> {
    decode_in(None, data)
}

/// [`decode`] of `data` within the frame `source`: payloads are slices of
/// `source` (copies when `data` does not lie within it).
pub(super) fn decode_in(source: Option<&Bytes>, data: &[u8]) -> Result<Message, EnvelopeError> {
    // Strict UTF-8 first (§10): serde_json does not check skipped strings.
    // Checked once: as the shared text payloads are sliced from, when
    // `data` lies within `source`.
    let not_utf8 = || EnvelopeError::Malformed("envelope is not valid UTF-8".to_owned());
    let shared = match source.and_then(|frame| slice_within(frame, data)) {
        Some(bytes) => Some(ByteString::try_from(bytes).map_err(|_| not_utf8())?),
        None => None,
    };
    let text = match &shared {
        Some(text) => text,
        None => std::str::from_utf8(data).map_err(|_| not_utf8())?,
    };
    // serde would also read a struct from a JSON array, positionally.
    if !text.trim_start().starts_with('{') {
        return Err(EnvelopeError::Malformed(
            "envelope is not a JSON object".to_owned(),
        ));
    }
    let mut raw: RawEnvelope<'_> =
        serde_json::from_str(text).map_err(|e| EnvelopeError::Malformed(e.to_string()))?;
    raw.source = shared.clone();
    build(&raw)
}

/// Appends `msg`'s envelope to `out`; on error, `out` may hold part of it.
pub(super) fn encode_into(msg: &Message, out: &mut String) -> Result<(), EnvelopeError> {
    match msg {
        Message::Request { id, method, params } => {
            let cid = outbound_cid(Some(id))?;
            out.push_str(r#"{"t":"r","m":"#);
            push_json_string(out, method);
            push_cid(out, &cid);
            push_payload(out, Member::P, params.as_ref())?;
        }
        Message::Response { id, result } => {
            let cid = outbound_cid(Some(id))?;
            out.push_str(r#"{"t":"R""#);
            push_cid(out, &cid);
            if let Outcome::Value(result) = result {
                push_payload(out, Member::Result, Some(result))?;
            }
        }
        Message::Error { id, error } => {
            let cid = outbound_cid(id.as_ref())?;
            out.push_str(r#"{"t":"E""#);
            push_cid(out, &cid);
            out.push_str(r#","code":"#);
            out.push_str(&error.code.to_string());
            out.push_str(r#","message":"#);
            push_json_string(out, &error.message);
            push_payload(out, Member::Data, error.data.as_ref())?;
        }
        Message::Notification { method, params } => {
            out.push_str(r#"{"t":"N","e":"#);
            push_json_string(out, method);
            push_payload(out, Member::D, params.as_ref())?;
        }
    }
    out.push('}');
    Ok(())
}

fn push_cid(out: &mut String, cid: &Cid) {
    out.push_str(r#","cid":""#);
    hex::push(out, cid);
    out.push('"');
}

/// Appends `,"key":value` for a present payload, transcoding CBOR.
fn push_payload(
    out: &mut String,
    member: Member,
    payload: Option<&Payload>,
) -> Result<(), EnvelopeError> {
    let Some(payload) = payload else {
        return Ok(());
    };
    out.push_str(",\"");
    out.push_str(member.as_str());
    out.push_str("\":");
    match payload {
        Payload::Json(raw) => out.push_str(raw.get()),
        Payload::Cbor(bytes) => transcode::cbor_to_json_into(bytes, out)
            .map_err(|source| EnvelopeError::Transcode { member, source })?,
    }
    Ok(())
}

// === impl RawEnvelope ===

impl RawEnvelope<'_> {
    fn get(&self, member: Member) -> Option<&RawValue> {
        match member {
            Member::T => self.t,
            Member::M => self.m,
            Member::Cid => self.cid,
            Member::P => self.p,
            Member::Result => self.result,
            Member::Code => self.code,
            Member::Message => self.message,
            Member::Data => self.data,
            Member::E => self.e,
            Member::D => self.d,
        }
    }
}

impl Fields for RawEnvelope<'_> {
    fn text(&self, member: Member) -> Result<Option<CompactString>, ()> {
        self.get(member)
            .map(|raw| {
                string_text(raw)
                    .map(|t| CompactString::from(t.as_ref()))
                    .ok_or(())
            })
            .transpose()
    }

    fn cid(&self) -> Result<Option<Cid>, ()> {
        match self.cid {
            Some(raw) => string_text(raw)
                .and_then(|text| hex::decode_cid(&text))
                .map(Some)
                .ok_or(()),
            None => Ok(None),
        }
    }

    fn code(&self) -> Result<Option<i64>, CodeError> {
        let Some(raw) = self.code else {
            return Ok(None);
        };
        let token = raw.get();
        if !token.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
            return Err(CodeError::WrongType);
        }
        let integer = if token.contains(['.', 'e', 'E']) {
            token.parse::<f64>().ok().and_then(integral_code)
        } else {
            token.parse::<i64>().ok()
        };
        integer
            .map(Some)
            .ok_or_else(|| CodeError::NotInteger(token.to_owned()))
    }

    fn payload(&self, member: Member) -> Option<Payload> {
        self.get(member).map(|raw| {
            Payload::Json(match &self.source {
                Some(source) => RawJson::within(source, raw),
                None => RawJson::copy(raw),
            })
        })
    }
}
