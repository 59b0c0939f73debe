//! JSON-RPC 2.0 towards an upstream (the upstream half of the JSON-RPC
//! WebSocket and NDJSON dialects, which differ only in framing): integer
//! ids, params an array or an object, and the decoding of inbound texts,
//! which holon-rpc upstreams share (the same JSON-RPC shapes).

use std::borrow::Cow;

use bytestring::ByteString;
use serde_json::value::RawValue;

use super::{decode_upstream_in, ReplyError};
use crate::dialect::holon::is_structured;
use crate::dialect::render::Style;
use crate::dialect::upstream::{Event, Fault, Framing, Options, UpstreamCodec};
use crate::dialect::Dialect;
use crate::envelope::{raw_from_string, Payload};
use crate::error::{ErrorKind, GatewayError, Side};

/// How much of an unreadable reply is quoted in its call's error.
const QUOTED_BYTES: usize = 512;

/// A JSON-RPC upstream link: nothing of its own beyond its settings.
#[derive(Debug)]
pub(crate) struct JsonRpcUpstream {
    /// Lines (NDJSON) or text frames (JSON-RPC WebSocket).
    framing: Framing,
    /// Offer the `jsonrpc` subprotocol.
    offer: bool,
    /// Send `{}` for absent params.
    fill_empty: bool,
}

// === impl JsonRpcUpstream ===

impl JsonRpcUpstream {
    /// A codec for `framing` (lines or text frames).
    pub(crate) fn new(framing: Framing, opts: Options) -> Self {
        JsonRpcUpstream {
            framing,
            offer: opts.offer_subprotocol,
            fill_empty: opts.fill_empty_params,
        }
    }

    /// NDJSON for lines, JSON-RPC WebSocket for frames.
    pub(crate) fn dialect(&self) -> Dialect {
        match self.framing {
            Framing::Line => Dialect::Ndjson,
            Framing::Text | Framing::Binary => Dialect::JsonRpc,
        }
    }

    pub(crate) fn framing(&self) -> Framing {
        self.framing
    }

    /// Lines are minified onto one line.
    pub(crate) fn style(&self) -> Style {
        match self.framing {
            Framing::Line => Style::Line,
            Framing::Text | Framing::Binary => Style::Frame,
        }
    }

    /// `jsonrpc`, when configured (WebSocket only).
    pub(crate) fn subprotocol(&self) -> Option<&'static str> {
        (self.offer && self.framing != Framing::Line).then_some("jsonrpc")
    }

    /// Params must be an array or an object; absent ones become `{}` when
    /// configured.
    pub(crate) fn params<'a>(
        &self,
        params: Option<&'a Payload>,
    ) -> Result<Option<Cow<'a, Payload>>, GatewayError> {
        match params {
            Some(p) if !is_structured(p) => Err(GatewayError::with_detail(
                ErrorKind::InvalidParams,
                "params must be an array or an object for this upstream",
            )),
            Some(p) => Ok(Some(Cow::Borrowed(p))),
            None => Ok(self.fill_empty.then(empty_object)),
        }
    }
}

/// `{}`, for an upstream that wants params present.
pub(crate) fn empty_object<'a>() -> Cow<'a, Payload> {
    Cow::Owned(Payload::Json(raw_from_string(String::from("{}"))))
}

/// Decodes one inbound text of a JSON upstream (a message, or a batch of
/// replies) and hands its events to `each` while it returns true.
pub(crate) fn on_text(
    codec: &UpstreamCodec,
    text: &ByteString,
    mut each: impl FnMut(Event) -> bool,
) -> bool {
    if text.trim_start().starts_with('[') {
        let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) else {
            return each(Event::Fault {
                fault: Fault::InvalidMessage,
                reply: None,
            });
        };
        return items
            .iter()
            .all(|item| each(message(codec, text, item.get(), true)));
    }
    each(message(codec, text, text, false))
}

/// What one message (`text`, within `source`) means.
fn message(codec: &UpstreamCodec, source: &ByteString, text: &str, in_batch: bool) -> Event {
    match decode_upstream_in(source, text) {
        Ok(msg) => codec.event(msg, in_batch),
        Err(ReplyError::InvalidReply { id, why }) => {
            // The call gets `internal`, with the raw reply as detail.
            let gid = id.as_json().and_then(|t| codec.parse_id(t));
            let detail = format!(
                "invalid reply from upstream ({why}): {}",
                truncate(text, QUOTED_BYTES)
            );
            Event::Failed {
                gid,
                error: GatewayError::with_detail(ErrorKind::Internal, detail).on(Side::Upstream),
                fault: Some(Fault::InvalidReply),
            }
        }
        Err(_) => Event::Fault {
            fault: Fault::InvalidMessage,
            reply: None,
        },
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
