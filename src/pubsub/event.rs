//! What the broker hands to subscribers: one published [`Event`], the
//! [`Subscriber`] a connection registers to receive it, and the
//! [`Published`] tally a publisher gets back.

use std::sync::{Arc, OnceLock};

use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::dialect::sideband::envelope::{encode_envelope, Encoding, EnvelopeError};
use crate::dialect::sideband::transcode::{self, TranscodeError};
use crate::envelope::{Message, Payload};

/// A connection's receiving end, registered with the broker.
///
/// `deliver` is called from the publisher's task, once per published event
/// matching any of the connection's patterns. It must never block or wait
/// (a `try_send` into the connection's outbox) and must not call back into
/// the broker.
pub trait Subscriber: Send + Sync + std::fmt::Debug {
    /// Hands `event` to the connection.
    fn deliver(&self, event: &Event<'_>) -> Delivery;
}

/// What became of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Queued for the client.
    Delivered,
    /// Not queued: the client's outbox is full (`slow_consumer`), or the
    /// event has no form in the client's dialect.
    Dropped,
    /// The connection is closing; its registration will go with it.
    Gone,
}

/// One published event, rendered lazily and at most once per form for all
/// of its subscribers: 1,000 JSON subscribers share one rendering.
#[derive(Debug)]
pub struct Event<'a> {
    /// The concrete topic it was published under (what clients see as
    /// `topic`, even when they subscribed with a wildcard).
    pub topic: &'a str,
    /// The event's data, in its source encoding.
    pub data: &'a Payload,
    /// `{"topic":…,"data":…}`, computed by the first JSON subscriber.
    params: OnceLock<Result<Arc<str>, TranscodeError>>,
    /// The whole JSON-RPC `rpc.notification` frame, computed by the first
    /// JSON-RPC or NDJSON subscriber.
    notification: OnceLock<Result<Utf8Bytes, TranscodeError>>,
    /// The Sideband `N` envelope `{t:"N", e:topic, d:data}` per encoding
    /// (JSON v1, CBOR v2): it carries no per-peer id, so only the frame
    /// around it differs between Sideband subscribers.
    sideband: [OnceLock<Result<Arc<[u8]>, EnvelopeError>>; 2],
}

/// The outcome of one [`super::Broker::publish`], counted in connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Published {
    /// Connections with at least one matching pattern.
    pub matched: usize,
    /// Of those, the ones that queued the event.
    pub delivered: usize,
    /// The ones that dropped it (full outbox, no form in their dialect).
    pub dropped: usize,
    /// The ones that were closing.
    pub gone: usize,
}

/// The method name of a topic delivery (jsonrpc-ws.md §7.2).
pub const NOTIFICATION_METHOD: &str = "rpc.notification";

// === impl Event ===

impl<'a> Event<'a> {
    /// An event published under the concrete `topic`.
    pub fn new(topic: &'a str, data: &'a Payload) -> Self {
        Event {
            topic,
            data,
            params: OnceLock::new(),
            notification: OnceLock::new(),
            sideband: [OnceLock::new(), OnceLock::new()],
        }
    }

    /// The params object `{"topic":…,"data":…}` as JSON text, shared by
    /// every subscriber of this event. CBOR data is transcoded; data with
    /// no JSON form is an error (the same one for every subscriber).
    pub fn params_json(&self) -> Result<&Arc<str>, &TranscodeError> {
        self.params
            .get_or_init(|| render_params(self.topic, self.data))
            .as_ref()
    }

    /// The whole notification frame
    /// `{"jsonrpc":"2.0","method":"rpc.notification","params":{…}}`.
    pub fn notification_json(&self) -> Result<&Utf8Bytes, &TranscodeError> {
        self.notification
            .get_or_init(|| {
                let params = self.params_json().map_err(Clone::clone)?;
                Ok(Utf8Bytes::from(format!(
                    r#"{{"jsonrpc":"2.0","method":"{NOTIFICATION_METHOD}","params":{params}}}"#
                )))
            })
            .as_ref()
    }

    /// The Sideband `N` envelope in `enc`, shared by every Sideband
    /// subscriber using that encoding (data transcoded if needed).
    pub fn sideband_envelope(&self, enc: Encoding) -> Result<&Arc<[u8]>, &EnvelopeError> {
        let slot = match enc {
            Encoding::Json => &self.sideband[0],
            Encoding::Cbor => &self.sideband[1],
        };
        slot.get_or_init(|| {
            let msg = Message::Notification {
                method: self.topic.into(),
                params: Some(self.data.clone()),
            };
            encode_envelope(&msg, enc).map(Arc::from)
        })
        .as_ref()
    }
}

fn render_params(topic: &str, data: &Payload) -> Result<Arc<str>, TranscodeError> {
    let transcoded;
    let data = match data {
        Payload::Json(raw) => raw.get(),
        Payload::Cbor(bytes) => {
            transcoded = transcode::cbor_to_json(bytes)?;
            transcoded.get()
        }
    };
    let topic = serde_json::to_string(topic).map_err(|e| TranscodeError::Json(e.to_string()))?;
    Ok(Arc::from(format!(r#"{{"topic":{topic},"data":{data}}}"#)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn renders_params_and_notification_once() {
        let data = Payload::json(r#"{"n": 1.0}"#).unwrap();
        let event = Event::new("orders.eu", &data);
        let first = Arc::clone(event.params_json().unwrap());
        assert_eq!(&*first, r#"{"topic":"orders.eu","data":{"n": 1.0}}"#);
        assert!(Arc::ptr_eq(&first, event.params_json().unwrap()), "shared");
        let frame = event.notification_json().unwrap();
        assert_eq!(
            frame.as_str(),
            r#"{"jsonrpc":"2.0","method":"rpc.notification","params":{"topic":"orders.eu","data":{"n": 1.0}}}"#
        );
        // Every subscriber's frame is the same buffer, not a copy.
        let again = event.notification_json().unwrap().clone();
        assert_eq!(again.as_str().as_ptr(), frame.as_str().as_ptr(), "shared");
    }

    #[test]
    fn cbor_data_is_transcoded() {
        // {"a": 1} in CBOR.
        let data = Payload::Cbor(vec![0xa1, 0x61, 0x61, 0x01].into());
        let event = Event::new("t", &data);
        assert_eq!(
            &**event.params_json().unwrap(),
            r#"{"topic":"t","data":{"a":1}}"#
        );
    }

    #[test]
    fn sideband_envelopes_per_encoding() {
        use crate::dialect::sideband::envelope::decode_envelope;
        let data = Payload::json(r#"{"a":1}"#).unwrap();
        let event = Event::new("hld.events", &data);
        let json = Arc::clone(event.sideband_envelope(Encoding::Json).unwrap());
        assert!(Arc::ptr_eq(
            &json,
            event.sideband_envelope(Encoding::Json).unwrap()
        ));
        assert_eq!(&*json, br#"{"t":"N","e":"hld.events","d":{"a":1}}"#);
        let cbor = event.sideband_envelope(Encoding::Cbor).unwrap();
        assert_eq!(
            decode_envelope(cbor, Encoding::Cbor).unwrap(),
            Message::Notification {
                method: "hld.events".into(),
                params: Some(Payload::Cbor(vec![0xa1, 0x61, 0x61, 0x01].into())),
            }
        );
    }

    #[test]
    fn cbor_without_json_form_is_an_error_for_everyone() {
        // A NaN float64 has no JSON form.
        let data = Payload::Cbor(vec![0xfb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0].into());
        let event = Event::new("t", &data);
        assert!(event.params_json().is_err());
        assert!(event.notification_json().is_err());
    }
}
