//! JSON v1 envelopes (sideband.md §6): compact JSON, absent members
//! omitted, keys in switchyard's order, `cid` as 32 lowercase hex.
//!
//! Members are read as slices of the text ([`JsonMembers`]) and only the
//! scalar ones (`t`, `m`, `cid`, `code`, `message`, `e`) are parsed;
//! payloads are slices of the frame read ([`decode_in`]), or copied
//! verbatim. The reading is the JSON dialects' one validating pass
//! ([`scan::object_of`]) when the text is an object whose known members
//! each come once, none with an escape in its name; any other text is
//! read by serde_json as a struct of ten borrowed `&RawValue`s, which
//! gives the error (and its text) a malformed envelope is answered with.
//! serde_json is the scan's oracle: both readings give the same members
//! wherever the scan answers ([`decode_json_by_serde`], the property tests and
//! the `sideband_envelope_json` fuzz target).

use bytes::Bytes;
use bytestring::ByteString;
use compact_str::CompactString;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::dialect::jsonrpc::scan::{self, Declined, Names};
use crate::envelope::{Flat, Message, Outcome, Payload, RawJson};

use super::{
    build, integral_code, outbound_cid, slice_within, Cid, CodeError, EnvelopeError, Fields, Member,
};
use crate::dialect::json_string::{push_json_string, text_string};
use crate::dialect::sideband::{hex, transcode};

/// The members of one JSON envelope, as slices of its text: each member's
/// JSON value, `Some` when present (`null` included). Unknown keys are
/// ignored.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct JsonMembers<'a> {
    t: Option<&'a str>,
    m: Option<&'a str>,
    cid: Option<&'a str>,
    p: Option<&'a str>,
    result: Option<&'a str>,
    code: Option<&'a str>,
    message: Option<&'a str>,
    data: Option<&'a str>,
    e: Option<&'a str>,
    d: Option<&'a str>,
    /// Whether the text holds no raw line break, so neither do its
    /// members: a payload goes onto an NDJSON line without a search.
    flat: Flat,
}

/// The members as serde_json reads them: the reading for every text the
/// scan declines.
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
}

/// One envelope read: its members, and its text as shared bytes when
/// payloads may be slices of it.
struct Read<'a> {
    members: JsonMembers<'a>,
    source: Option<&'a ByteString>,
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
    decode_with(source, data, |text| JsonMembers::read(text))
}

/// [`decode_envelope`](super::decode_envelope) of a JSON envelope with its
/// members read by serde_json only: the reading the scan falls back to,
/// and its oracle (the same result for every input).
pub fn decode_json_by_serde(data: &[u8]) -> Result<Message, EnvelopeError> {
    decode_with(None, data, |text| JsonMembers::by_serde(text))
}

fn decode_with(
    source: Option<&Bytes>,
    data: &[u8],
    read: for<'t> fn(&'t str) -> Result<JsonMembers<'t>, EnvelopeError>,
) -> Result<Message, EnvelopeError> {
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
    build(&Read {
        members: read(text)?,
        source: shared.as_ref(),
    })
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

// === impl JsonMembers ===

impl<'a> JsonMembers<'a> {
    /// The members of the envelope `text`: the scan's one pass, or
    /// serde_json's reading of a text the scan declines.
    pub fn read(text: &'a str) -> Result<Self, EnvelopeError> {
        Self::scan(text).or_else(|_| Self::by_serde(text))
    }

    /// The members by the validating scan alone; `Err` for a text it
    /// declines (left to [`by_serde`](JsonMembers::by_serde)).
    pub fn scan(text: &'a str) -> Result<Self, Declined> {
        let mut members = JsonMembers::default();
        scan::object_of(text, &mut members)?;
        Ok(members)
    }

    /// The members by serde_json, or the error a malformed envelope is
    /// answered with.
    pub fn by_serde(text: &'a str) -> Result<Self, EnvelopeError> {
        // serde would also read a struct from a JSON array, positionally.
        if !text.trim_start().starts_with('{') {
            return Err(EnvelopeError::Malformed(
                "envelope is not a JSON object".to_owned(),
            ));
        }
        let raw: RawEnvelope<'a> =
            serde_json::from_str(text).map_err(|e| EnvelopeError::Malformed(e.to_string()))?;
        let get = |raw: Option<&'a RawValue>| raw.map(RawValue::get);
        Ok(JsonMembers {
            t: get(raw.t),
            m: get(raw.m),
            cid: get(raw.cid),
            p: get(raw.p),
            result: get(raw.result),
            code: get(raw.code),
            message: get(raw.message),
            data: get(raw.data),
            e: get(raw.e),
            d: get(raw.d),
            // What the scan tells, found by a search: valid JSON has a raw
            // line break only as whitespace.
            flat: match memchr::memchr2(b'\n', b'\r', text.as_bytes()) {
                None => Flat::Yes,
                Some(_) => Flat::No,
            },
        })
    }

    /// One member's JSON value, if present.
    pub fn get(&self, member: Member) -> Option<&'a str> {
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

impl<'a> Names<'a> for JsonMembers<'a> {
    // Inlined into the scan's loop, as JSON-RPC's.
    #[inline]
    fn slot(&mut self, rest: &[u8]) -> Option<(usize, &mut Option<&'a str>)> {
        use scan::name;
        match rest.first()? {
            b't' => name(rest, b"t\"", &mut self.t),
            b'm' => name(rest, b"m\"", &mut self.m)
                .or_else(|| name(rest, b"message\"", &mut self.message)),
            b'c' => name(rest, b"cid\"", &mut self.cid)
                .or_else(|| name(rest, b"code\"", &mut self.code)),
            b'p' => name(rest, b"p\"", &mut self.p),
            b'r' => name(rest, b"result\"", &mut self.result),
            b'd' => {
                name(rest, b"d\"", &mut self.d).or_else(|| name(rest, b"data\"", &mut self.data))
            }
            b'e' => name(rest, b"e\"", &mut self.e),
            _ => None,
        }
    }

    fn flat(&mut self) {
        self.flat = Flat::Yes;
    }
}

// === impl Read ===

impl Fields for Read<'_> {
    fn text(&self, member: Member) -> Result<Option<CompactString>, ()> {
        self.members
            .get(member)
            .map(|raw| {
                text_string(raw)
                    .map(|t| CompactString::from(t.as_ref()))
                    .ok_or(())
            })
            .transpose()
    }

    fn cid(&self) -> Result<Option<Cid>, ()> {
        let Some(raw) = self.members.cid else {
            return Ok(None);
        };
        // The digits between the quotes, nearly always; a string with
        // escapes (whose backslash is no digit) unescaped first.
        let plain = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"'));
        plain
            .and_then(hex::decode_cid)
            .or_else(|| text_string(raw).and_then(|text| hex::decode_cid(&text)))
            .map(Some)
            .ok_or(())
    }

    fn code(&self) -> Result<Option<i64>, CodeError> {
        let Some(token) = self.members.code else {
            return Ok(None);
        };
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
        self.members.get(member).map(|raw| {
            Payload::Json(match self.source {
                Some(source) => RawJson::text_within_flat(source.into(), raw, self.members.flat),
                None => RawJson::copy_text(raw),
            })
        })
    }
}
