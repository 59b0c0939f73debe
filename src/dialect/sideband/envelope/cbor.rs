//! CBOR v2 envelopes (sideband.md §7): one map with text keys named as in
//! v1, `cid` as a 16-byte byte string, `undefined` meaning absent.
//!
//! The whole data is validated (one item, no trailing bytes, no duplicate
//! keys in any map, nesting ≤ 128, UTF-8 text) in the one pass that finds
//! the members; payload members are kept as the raw bytes of their item.

use bytes::Bytes;
use compact_str::CompactString;

use crate::envelope::{Message, Outcome, Payload};

use super::{
    build, integral_code, outbound_cid, slice_within, Cid, CodeError, EnvelopeError, Fields, Member,
};
use crate::dialect::sideband::cbor::{self as wire, KeyId, MapKeys, Reader};
use crate::dialect::sideband::transcode;

/// The raw item of each known member; `undefined` is left out.
#[derive(Default)]
struct RawEnvelope<'a> {
    members: [Option<&'a [u8]>; 10],
    /// The frame the data lies in, if shared: payloads are slices of it.
    source: Option<&'a Bytes>,
}

/// One pass over the data: each member's value is validated by the skip
/// that finds its end, the envelope map's own keys are checked here
/// (text, no duplicates), and nothing may follow the map. That is all
/// `wire::validate` checks, without walking the payloads twice.
pub(super) fn decode(data: &[u8]) -> Result<Message, EnvelopeError> {
    decode_in(None, data)
}

/// [`decode`], the payloads sliced out of `source` (the frame `data` lies
/// in) rather than copied.
pub(super) fn decode_in(source: Option<&Bytes>, data: &[u8]) -> Result<Message, EnvelopeError> {
    let malformed = |e: wire::CborError| EnvelopeError::Malformed(e.to_string());
    let mut reader = Reader::new(data);
    let head = reader.head().map_err(malformed)?;
    if head.major != wire::MAJOR_MAP {
        wire::validate(data, wire::MAX_DEPTH).map_err(malformed)?;
        return Err(EnvelopeError::Malformed(
            "envelope is not a CBOR map".to_owned(),
        ));
    }
    let mut raw = RawEnvelope {
        source,
        ..RawEnvelope::default()
    };
    // A known member's key is found by its slot (one bit each); only the
    // keys of unknown members, rare, are kept to compare.
    let mut seen = 0u16;
    let mut unknown = MapKeys::new();
    let mut left = head.arg;
    while reader.more(head, &mut left).map_err(malformed)? {
        let key = reader.head().map_err(malformed)?;
        if key.major != wire::MAJOR_TEXT {
            return Err(EnvelopeError::Malformed(
                "envelope map key is not a text string".to_owned(),
            ));
        }
        let key = reader.string(key).map_err(malformed)?;
        let value = reader.skip(1, wire::MAX_DEPTH).map_err(malformed)?;
        let slot = Member::ALL
            .iter()
            .position(|m| m.as_str().as_bytes() == &*key);
        let fresh = match slot {
            Some(slot) => {
                let bit = 1 << slot;
                let fresh = seen & bit == 0;
                seen |= bit;
                fresh
            }
            None => unknown.insert(KeyId::Text(key)),
        };
        if !fresh {
            return Err(malformed(wire::CborError::DuplicateKey));
        }
        if let (Some(slot), false) = (slot, value == [wire::UNDEFINED]) {
            raw.members[slot] = Some(value);
        }
    }
    if !reader.at_end() {
        return Err(malformed(wire::CborError::Trailing));
    }
    build(&raw)
}

/// Appends `msg`'s envelope to `out`; on error, `out` may hold part of it.
pub(super) fn encode_into(msg: &Message, out: &mut Vec<u8>) -> Result<(), EnvelopeError> {
    match msg {
        Message::Request { id, method, params } => {
            let cid = outbound_cid(Some(id))?;
            wire::write_head(out, wire::MAJOR_MAP, 3 + u64::from(params.is_some()));
            pair_text(out, Member::T, "r");
            pair_text(out, Member::M, method);
            pair_cid(out, &cid);
            pair_payload(out, Member::P, params.as_ref())?;
        }
        Message::Response { id, result } => {
            let cid = outbound_cid(Some(id))?;
            let result = match result {
                Outcome::Value(result) => Some(result),
                Outcome::Void => None,
            };
            wire::write_head(out, wire::MAJOR_MAP, 2 + u64::from(result.is_some()));
            pair_text(out, Member::T, "R");
            pair_cid(out, &cid);
            pair_payload(out, Member::Result, result)?;
        }
        Message::Error { id, error } => {
            let cid = outbound_cid(id.as_ref())?;
            let len = 4 + u64::from(error.data.is_some());
            wire::write_head(out, wire::MAJOR_MAP, len);
            pair_text(out, Member::T, "E");
            pair_cid(out, &cid);
            wire::write_text(out, Member::Code.as_str());
            wire::write_int(out, error.code);
            pair_text(out, Member::Message, &error.message);
            pair_payload(out, Member::Data, error.data.as_ref())?;
        }
        Message::Notification { method, params } => {
            wire::write_head(out, wire::MAJOR_MAP, 2 + u64::from(params.is_some()));
            pair_text(out, Member::T, "N");
            pair_text(out, Member::E, method);
            pair_payload(out, Member::D, params.as_ref())?;
        }
    }
    Ok(())
}

fn pair_text(out: &mut Vec<u8>, member: Member, text: &str) {
    wire::write_text(out, member.as_str());
    wire::write_text(out, text);
}

fn pair_cid(out: &mut Vec<u8>, cid: &Cid) {
    wire::write_text(out, Member::Cid.as_str());
    wire::write_bytes(out, cid);
}

/// Writes a present payload: CBOR bytes are checked to be one valid item
/// and copied; JSON is transcoded.
fn pair_payload(
    out: &mut Vec<u8>,
    member: Member,
    payload: Option<&Payload>,
) -> Result<(), EnvelopeError> {
    let Some(payload) = payload else {
        return Ok(());
    };
    let fail = |source| EnvelopeError::Transcode { member, source };
    wire::write_text(out, member.as_str());
    match payload {
        Payload::Cbor(bytes) => {
            wire::validate(bytes, transcode::MAX_PAYLOAD_DEPTH).map_err(|e| fail(e.into()))?;
            out.extend_from_slice(bytes);
        }
        Payload::Json(raw) => transcode::json_text_to_cbor_into(raw.get(), out).map_err(fail)?,
    }
    Ok(())
}

// === impl RawEnvelope ===

impl<'a> RawEnvelope<'a> {
    /// The member's item, read from its head.
    fn item(&self, member: Member) -> Option<(wire::Head, Reader<'a>)> {
        let slot = Member::ALL.iter().position(|m| *m == member)?;
        let mut reader = Reader::new(self.members[slot]?);
        let head = reader.head().ok()?;
        Some((head, reader))
    }
}

impl Fields for RawEnvelope<'_> {
    fn text(&self, member: Member) -> Result<Option<CompactString>, ()> {
        let Some((head, mut reader)) = self.item(member) else {
            return Ok(None);
        };
        if head.major != wire::MAJOR_TEXT {
            return Err(());
        }
        let bytes = reader.string(head).map_err(|_| ())?;
        std::str::from_utf8(&bytes)
            .map(|text| Some(CompactString::new(text)))
            .map_err(|_| ())
    }

    fn cid(&self) -> Result<Option<Cid>, ()> {
        let Some((head, mut reader)) = self.item(Member::Cid) else {
            return Ok(None);
        };
        if head.major != wire::MAJOR_BYTES {
            return Err(());
        }
        let bytes = reader.string(head).map_err(|_| ())?;
        Cid::try_from(&*bytes).map(Some).map_err(|_| ())
    }

    fn code(&self) -> Result<Option<i64>, CodeError> {
        let Some((head, _)) = self.item(Member::Code) else {
            return Ok(None);
        };
        let code = match head.major {
            wire::MAJOR_UINT => i64::try_from(head.arg).ok(),
            wire::MAJOR_NINT => i64::try_from(-1 - i128::from(head.arg)).ok(),
            _ => match head.float() {
                Some(value) => integral_code(value),
                None => return Err(CodeError::WrongType),
            },
        };
        let raw = || match head.float() {
            Some(value) => value.to_string(),
            None if head.major == wire::MAJOR_NINT => (-1 - i128::from(head.arg)).to_string(),
            None => head.arg.to_string(),
        };
        code.map(Some).ok_or_else(|| CodeError::NotInteger(raw()))
    }

    fn payload(&self, member: Member) -> Option<Payload> {
        let slot = Member::ALL.iter().position(|m| *m == member)?;
        let raw = self.members[slot]?;
        let within = self.source.and_then(|source| slice_within(source, raw));
        Some(Payload::Cbor(
            within.unwrap_or_else(|| Bytes::copy_from_slice(raw)),
        ))
    }
}
