//! How the outbox writes through the client's [`ClientCodec`]: a small
//! frame into the connection's frame buffer, counted on its way out. A
//! reply that cannot be rendered (a payload that cannot be transcoded)
//! becomes the dialect's `internal` error, never a silent drop.

use std::sync::Arc;

use axum::extract::ws::Utf8Bytes;
use bytes::Bytes;

use super::arena::Arena;
use super::outgoing::Outgoing;
use crate::dialect::client::{ClientCodec, Encoded, Frame};
use crate::envelope::Message;
use crate::error::{ErrorKind, GatewayError, Side};
use crate::telemetry::metrics::{Direction, Metrics};

/// The output side of a client connection's dialect; counts what it
/// writes (`switchyard_messages_total`, side `client`, direction `out`).
#[derive(Debug)]
pub(crate) struct OutCodec {
    codec: ClientCodec,
    metrics: Arc<Metrics>,
}

// === impl OutCodec ===

impl OutCodec {
    /// Writes through `codec`, counting into `metrics`.
    pub(crate) fn new(codec: ClientCodec, metrics: Metrics) -> Self {
        OutCodec {
            codec,
            metrics: Arc::new(metrics),
        }
    }

    /// The client's codec.
    pub(super) fn client(&self) -> &ClientCodec {
        &self.codec
    }

    /// Encodes one message; an unrenderable reply becomes `internal`. A
    /// small frame is split off `arena` when given (see `arena`).
    pub(super) fn encode(&self, msg: &Message, mut arena: Option<&mut Arena>) -> Option<Outgoing> {
        if let Some(out) = self.try_encode(msg, arena.as_deref_mut()) {
            return Some(out);
        }
        let id = match msg {
            Message::Response { id, .. } | Message::Error { id: Some(id), .. } => id.clone(),
            _ => return None,
        };
        let err = GatewayError::with_detail(
            ErrorKind::Internal,
            "the reply cannot be carried in this dialect",
        );
        self.try_encode(&self.codec.error_reply(id, &err), arena)
    }

    /// Encodes a batch reply (text dialects only).
    pub(super) fn encode_batch(&self, msgs: &[Message]) -> Option<Outgoing> {
        let dialect = self.codec.dialect();
        for m in msgs {
            self.metrics
                .count_message(dialect, Side::Client, Direction::Out, m.kind());
        }
        if let Ok(text) = self.codec.encode_batch(msgs)? {
            return Some(Outgoing::Text(text.into()));
        }
        // One item could not be rendered: render item by item, replacing it.
        let parts: Vec<Utf8Bytes> = msgs
            .iter()
            .filter_map(|m| match self.encode(m, None) {
                Some(Outgoing::Text(t)) => Some(t),
                _ => None,
            })
            .collect();
        let parts: Vec<&str> = parts.iter().map(Utf8Bytes::as_str).collect();
        Some(Outgoing::Text(format!("[{}]", parts.join(",")).into()))
    }

    fn try_encode(&self, msg: &Message, arena: Option<&mut Arena>) -> Option<Outgoing> {
        let out = match self.codec.encode(msg, |frame| take(frame, arena))? {
            Encoded::Taken(out) => out,
            Encoded::Text(text) => Outgoing::Text(Utf8Bytes::from(text)),
        };
        self.metrics.count_message(
            self.codec.dialect(),
            Side::Client,
            Direction::Out,
            msg.kind(),
        );
        Some(out)
    }
}

/// A rendered frame as queued: a small one split off `arena` when given,
/// else (and when it came out larger than the arena takes) copied into an
/// allocation of its own.
fn take(frame: Frame<'_>, arena: Option<&mut Arena>) -> Outgoing {
    match (frame, arena) {
        (Frame::Text(text), Some(arena)) => {
            Outgoing::Text(arena.text(text).unwrap_or_else(|| Utf8Bytes::from(text)))
        }
        (Frame::Text(text), None) => Outgoing::Text(Utf8Bytes::from(text)),
        (Frame::Binary(bytes), Some(arena)) => Outgoing::Binary(
            arena
                .frame(bytes)
                .unwrap_or_else(|| Bytes::copy_from_slice(bytes)),
        ),
        (Frame::Binary(bytes), None) => Outgoing::Binary(Bytes::copy_from_slice(bytes)),
    }
}
