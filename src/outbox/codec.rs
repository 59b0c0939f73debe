//! How replies and pushes are written for one client: JSON text (JSON-RPC,
//! NDJSON, holon-rpc) or Sideband frames with the negotiated envelope
//! encoding. A reply that cannot be rendered (a payload that cannot be
//! transcoded) becomes the dialect's `internal` error, never a silent drop.

use std::sync::Arc;

use axum::extract::ws::Utf8Bytes;
use bytes::Bytes;
use parking_lot::Mutex;

use super::arena::Arena;
use super::Outgoing;
use crate::dialect::errors;
use crate::dialect::render::{render_batch, render_exact, render_scratch, Style};
use crate::dialect::sideband::session::{encode_shared_with, Sbp};
use crate::dialect::Dialect;
use crate::envelope::Message;
use crate::error::{ErrorKind, GatewayError, Side};
use crate::telemetry::metrics::{Direction, Metrics};

/// The output side of a client connection's dialect; counts what it
/// writes (`switchyard_messages_total`, side `client`, direction `out`).
#[derive(Debug, Clone)]
pub(crate) struct OutCodec {
    pub(crate) form: Form,
    metrics: Arc<Metrics>,
}

/// How messages are written.
#[derive(Debug, Clone)]
pub(crate) enum Form {
    /// JSON-RPC 2.0 or holon-rpc text.
    Text(Dialect, Style),
    /// Sideband frames; the session holds the negotiated encoding.
    Sideband(Arc<Mutex<Sbp>>),
}

// === impl OutCodec ===

impl OutCodec {
    /// A codec writing `form`, counting into `metrics`.
    pub(crate) fn new(form: Form, metrics: Metrics) -> Self {
        OutCodec {
            form,
            metrics: Arc::new(metrics),
        }
    }

    /// The dialect written.
    pub(crate) fn dialect(&self) -> Dialect {
        match &self.form {
            Form::Text(d, _) => *d,
            Form::Sideband(_) => Dialect::Sideband,
        }
    }

    /// Encodes one message; an unrenderable reply becomes `internal`. A
    /// small text frame is split off `arena` when given (see `arena`).
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
        self.try_encode(
            &Message::error(Some(id), errors::render(&err, self.dialect())),
            arena,
        )
    }

    /// Encodes a batch reply (JSON dialects only).
    pub(crate) fn encode_batch(&self, msgs: &[Message]) -> Option<Outgoing> {
        for m in msgs {
            self.metrics
                .count_message(self.dialect(), Side::Client, Direction::Out, m.kind());
        }
        let Form::Text(_, style) = &self.form else {
            return None;
        };
        if let Ok(text) = render_batch(msgs, *style) {
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
        let out = match &self.form {
            Form::Text(_, style) => text_frame(msg, *style, arena).map(Outgoing::Text),
            Form::Sideband(sbp) => binary_frame(msg, sbp, arena).map(Outgoing::Binary),
        };
        if out.is_some() {
            self.metrics
                .count_message(self.dialect(), Side::Client, Direction::Out, msg.kind());
        }
        out
    }
}

/// A text frame: a small one split off `arena` when given, else (and when
/// it came out larger than expected) an allocation of its own.
fn text_frame(msg: &Message, style: Style, arena: Option<&mut Arena>) -> Option<Utf8Bytes> {
    if let Some(arena) = arena {
        let take = |text: &str| arena.text(text).unwrap_or_else(|| Utf8Bytes::from(text));
        if let Some(rendered) = render_scratch(msg, style, take) {
            return rendered.ok();
        }
    }
    render_exact(msg, style).ok().map(Utf8Bytes::from)
}

/// A Sideband frame: a small one split off `arena` when given, else an
/// allocation of its own.
fn binary_frame(msg: &Message, sbp: &Mutex<Sbp>, arena: Option<&mut Arena>) -> Option<Bytes> {
    let take = |frame: &[u8]| match arena {
        Some(arena) => arena
            .frame(frame)
            .unwrap_or_else(|| Bytes::copy_from_slice(frame)),
        None => Bytes::copy_from_slice(frame),
    };
    encode_shared_with(|| sbp.lock(), msg, take).ok()
}
