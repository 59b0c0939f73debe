//! The mapping between switchyard events and NATS messages, pure: a topic
//! is the subject after the prefix, the event's `data` is the payload.
//!
//! - Subject: `<prefix><topic>` (`switchyard.topics.orders.eu`); a
//!   client's pattern maps the same way (`orders.*` →
//!   `switchyard.topics.orders.*`). A message whose subject is not a
//!   valid topic after the prefix is dropped.
//! - Payload: the data as JSON text (UTF-8, content type
//!   `application/json`, no envelope: what a client sees as `data`). An
//!   empty payload is `null`. A payload with the header
//!   `Switchyard-Encoding: cbor` is CBOR (Sideband v2 data, transcoded
//!   for JSON subscribers), as in the JetStream backend.
//! - Size: at most `max_payload_bytes` of payload either way; larger is
//!   dropped.

use bytes::Bytes;

use crate::envelope::Payload;
use crate::pubsub::topic;

/// The header that marks a CBOR payload (value `cbor`).
pub const ENCODING_HEADER: &str = "Switchyard-Encoding";

/// Why a message or an event could not be mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The subject is not `<prefix><valid topic>`.
    Subject,
    /// The payload is larger than `max_payload_bytes`.
    Oversize,
    /// The payload is not JSON (and not marked CBOR).
    NotJson,
}

/// The subject of `topic` (or of a pattern).
pub fn subject(prefix: &str, topic: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + topic.len());
    s.push_str(prefix);
    s.push_str(topic);
    s
}

/// The topic a message's `subject` carries, if it is one.
pub fn topic_of<'a>(prefix: &str, subject: &'a str) -> Result<&'a str, WireError> {
    let topic = subject.strip_prefix(prefix).ok_or(WireError::Subject)?;
    topic::validate_topic(topic).map_err(|_| WireError::Subject)?;
    Ok(topic)
}

/// The event data a payload carries (`cbor`: the encoding header said
/// so). A copy: the event may outlive the client's read buffer.
pub fn decode(payload: &[u8], cbor: bool, max: usize) -> Result<Payload, WireError> {
    if payload.len() > max {
        return Err(WireError::Oversize);
    }
    if cbor {
        return Ok(Payload::Cbor(Bytes::copy_from_slice(payload)));
    }
    if payload.iter().all(u8::is_ascii_whitespace) {
        return Payload::json("null").map_err(|_| WireError::NotJson);
    }
    let text = std::str::from_utf8(payload).map_err(|_| WireError::NotJson)?;
    Payload::json(text.trim()).map_err(|_| WireError::NotJson)
}

/// The payload of an event's `data`, and whether it is CBOR.
pub fn encode(data: &Payload, max: usize) -> Result<(Bytes, bool), WireError> {
    if data.encoded_len() > max {
        return Err(WireError::Oversize);
    }
    Ok(match data {
        Payload::Json(raw) => (Bytes::copy_from_slice(raw.get().as_bytes()), false),
        Payload::Cbor(bytes) => (bytes.clone(), true),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn subjects_and_topics() {
        let prefix = "switchyard.topics.";
        assert_eq!(subject(prefix, "orders.*"), "switchyard.topics.orders.*");
        assert_eq!(
            topic_of(prefix, "switchyard.topics.orders.eu"),
            Ok("orders.eu")
        );
        assert_eq!(topic_of(prefix, "other.orders"), Err(WireError::Subject));
        assert_eq!(
            topic_of(prefix, "switchyard.topics."),
            Err(WireError::Subject)
        );
    }

    #[test]
    fn payloads() {
        let json = decode(br#" {"a": 1} "#, false, 64).unwrap();
        assert_eq!(json.as_json(), Some(r#"{"a": 1}"#));
        assert_eq!(decode(b"", false, 64).unwrap().as_json(), Some("null"));
        assert_eq!(decode(b"{nope", false, 64), Err(WireError::NotJson));
        assert_eq!(decode(&[0xff], false, 64), Err(WireError::NotJson));
        assert_eq!(decode(b"[1,2,3]", false, 6), Err(WireError::Oversize));
        let cbor = decode(&[0xa0], true, 64).unwrap();
        assert_eq!(cbor, Payload::Cbor(Bytes::from_static(&[0xa0])));
        assert_eq!(
            encode(&cbor, 64).unwrap(),
            (Bytes::from_static(&[0xa0]), true)
        );
        let (bytes, is_cbor) = encode(&json, 64).unwrap();
        assert_eq!((&bytes[..], is_cbor), (&br#"{"a": 1}"#[..], false));
        assert_eq!(encode(&json, 3), Err(WireError::Oversize));
    }
}
