//! The upstream half of every dialect, behind one type: [`UpstreamCodec`].
//!
//! An upstream link holds one `UpstreamCodec`, made for its upstream's
//! dialect, and asks it everything that depends on the wire: the
//! subprotocol to offer, the framing (lines, text or binary frames), how
//! liveness is proven (WebSocket pings or holon heartbeats), how a gateway
//! id is written and read back, which params the upstream takes, how a
//! message is encoded, what an inbound frame means ([`Event`]), and how
//! the link says goodbye ([`Farewell`]). Pure: no socket, no tokio; the
//! link driver (`crate::upstream`) owns the I/O.
//!
//! An enum of codec types rather than a trait object: the set of dialects
//! is closed, so adding one makes the compiler list every `match` that
//! must learn it (no `_ =>` arm anywhere); a call is a jump on the variant,
//! no dynamic dispatch on the hot path; and each link holds its dialect's
//! state (holon's heartbeat in flight, Sideband's session and cids) by
//! value, where the variant keeps it.

use std::borrow::Cow;
use std::time::Duration;

use bytestring::ByteString;
use serde_json::value::RawValue;

use super::holon::upstream::HolonUpstream;
use super::jsonrpc::upstream::JsonRpcUpstream;
use super::jsonrpc::{decode_upstream_in, render_batch, ReplyError, Style};
use super::link::{
    not_json, parse_gateway_id, Decoded, Event, Farewell, Fault, Frame, Framing, Handshake,
    Liveness, NotificationRule, Options, Scratch,
};
use super::sideband::upstream::SidebandUpstream;
use super::Dialect;
use crate::close::CloseCode;
use crate::envelope::{ErrorObject, Message, Payload, WireId};
use crate::error::{ErrorKind, GatewayError, Side};

/// How much of an unreadable reply is quoted in its call's error.
const QUOTED_BYTES: usize = 512;

/// The upstream half of a link's dialect, with the state the dialect
/// keeps per link.
#[derive(Debug)]
pub(crate) enum UpstreamCodec {
    /// JSON-RPC 2.0: WebSocket text frames, or NDJSON lines (the same
    /// texts, framed one per line).
    JsonRpc(JsonRpcUpstream),
    /// holon-rpc: string ids, object params, `rpc.heartbeat` liveness.
    Holon(HolonUpstream),
    /// Sideband: binary SBP frames over a session of its own.
    Sideband(Box<SidebandUpstream>),
}

// === impl UpstreamCodec ===

impl UpstreamCodec {
    /// A fresh codec for a link of `dialect` (a Sideband session still to
    /// negotiate: see [`Self::hello`]).
    pub(crate) fn new(dialect: Dialect, opts: Options) -> Self {
        match dialect {
            Dialect::JsonRpc => UpstreamCodec::JsonRpc(JsonRpcUpstream::new(Framing::Text, opts)),
            Dialect::Ndjson => UpstreamCodec::JsonRpc(JsonRpcUpstream::new(Framing::Line, opts)),
            // The same texts in POST bodies. No link speaks it yet: the
            // configuration refuses a `jsonrpc-http` upstream.
            Dialect::JsonRpcHttp => {
                UpstreamCodec::JsonRpc(JsonRpcUpstream::new(Framing::Text, opts))
            }
            Dialect::Holon => UpstreamCodec::Holon(HolonUpstream::default()),
            Dialect::Sideband => UpstreamCodec::Sideband(Box::new(SidebandUpstream::new(opts))),
        }
    }

    /// What a client notification becomes on an upstream of `dialect`
    /// (decided before any link is chosen).
    pub(crate) const fn notification_rule(dialect: Dialect) -> NotificationRule {
        match dialect {
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::JsonRpcHttp => {
                NotificationRule::Structured
            }
            Dialect::Holon => NotificationRule::AsRequest,
            Dialect::Sideband => NotificationRule::AsIs,
        }
    }

    /// The dialect this codec speaks.
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            UpstreamCodec::JsonRpc(c) => c.dialect(),
            UpstreamCodec::Holon(_) => Dialect::Holon,
            UpstreamCodec::Sideband(_) => Dialect::Sideband,
        }
    }

    /// How messages are framed.
    pub(crate) fn framing(&self) -> Framing {
        match self {
            UpstreamCodec::JsonRpc(c) => c.framing(),
            UpstreamCodec::Holon(_) => Framing::Text,
            UpstreamCodec::Sideband(_) => Framing::Binary,
        }
    }

    /// How texts are rendered ([`Dialect::style`]).
    pub(crate) fn style(&self) -> Style {
        self.dialect().style()
    }

    /// The WebSocket subprotocol to offer, if any.
    pub(crate) fn subprotocol(&self) -> Option<&'static str> {
        match self {
            UpstreamCodec::JsonRpc(c) => c.subprotocol(),
            UpstreamCodec::Holon(_) => Some(super::holon::upstream::SUBPROTOCOL),
            UpstreamCodec::Sideband(_) => None,
        }
    }

    /// The subprotocol the upstream must echo, if the dialect requires
    /// one: a 101 without it is refused (close 1002 with this reason).
    pub(crate) fn required_subprotocol(&self) -> Option<(&'static str, &'static str)> {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Sideband(_) => None,
            UpstreamCodec::Holon(_) => Some((
                super::holon::upstream::SUBPROTOCOL,
                "missing holon-rpc subprotocol",
            )),
        }
    }

    /// How liveness is proven on a WebSocket link.
    pub(crate) fn liveness(&self) -> Liveness {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Sideband(_) => Liveness::Ping,
            UpstreamCodec::Holon(_) => Liveness::Heartbeat,
        }
    }

    /// The first frame of the session's handshake, if the dialect has one
    /// (Sideband): no message may go out before [`Self::on_handshake`]
    /// says [`Handshake::Ready`].
    pub(crate) fn hello(&self) -> Option<Vec<u8>> {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => None,
            UpstreamCodec::Sideband(c) => Some(c.hello()),
        }
    }

    /// Handles one binary frame of the handshake.
    pub(crate) fn on_handshake(&self, bytes: &[u8]) -> Handshake {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => Handshake::Ready,
            UpstreamCodec::Sideband(c) => c.on_handshake(bytes),
        }
    }

    /// True when a close from the upstream (`code`, `reason`) refuses our
    /// handshake: the next dial waits the maximum backoff.
    pub(crate) fn refuses(&self, code: u16, reason: &str) -> bool {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => false,
            UpstreamCodec::Sideband(_) => super::sideband::upstream::refuses(code, reason),
        }
    }

    /// Notes that the upstream refused our handshake (see [`Self::refused`]).
    pub(crate) fn mark_refused(&self) {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => {}
            UpstreamCodec::Sideband(c) => c.mark_refused(),
        }
    }

    /// True when the upstream closed the link refusing our handshake.
    pub(crate) fn refused(&self) -> bool {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => false,
            UpstreamCodec::Sideband(c) => c.refused(),
        }
    }

    /// The goodbye to send now that the link closes: one the session
    /// asked for, else the dialect's own (`stopping`: switchyard stops).
    pub(crate) fn farewell(&self, stopping: bool) -> Farewell {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => {
                Farewell::plain(CloseCode::Normal, "closing")
            }
            UpstreamCodec::Sideband(c) => c.farewell(stopping),
        }
    }

    /// The next heartbeat request `h<n>`, or `None` when the dialect has
    /// none or one is still in flight (a beat is skipped then).
    pub(crate) fn heartbeat(&self, n: u64) -> Option<String> {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Sideband(_) => None,
            UpstreamCodec::Holon(c) => c.heartbeat(n),
        }
    }

    /// True when the heartbeat in flight has waited longer than `timeout`.
    pub(crate) fn heartbeat_overdue(&self, timeout: Duration) -> bool {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Sideband(_) => false,
            UpstreamCodec::Holon(c) => c.overdue(timeout),
        }
    }

    /// The wire id for gateway id `gid`: a number, a decimal string
    /// (holon), or a fresh random cid (Sideband, remembered until the
    /// reply or [`Self::forget`]).
    pub(crate) fn wire_id(&self, gid: u64) -> WireId {
        match self {
            UpstreamCodec::JsonRpc(_) => WireId::number(gid),
            UpstreamCodec::Holon(_) => WireId::number_string(gid),
            UpstreamCodec::Sideband(c) => WireId::Cid(c.issue(gid)),
        }
    }

    /// Forgets the wire id of an abandoned or cancelled gateway id.
    pub(crate) fn forget(&self, gid: u64) {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => {}
            UpstreamCodec::Sideband(c) => c.forget(gid),
        }
    }

    /// Reads a gateway id back from a reply's raw id token.
    pub(crate) fn parse_id(&self, token: &str) -> Option<u64> {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Sideband(_) => parse_gateway_id(token),
            UpstreamCodec::Holon(_) => super::holon::upstream::parse_id(token),
        }
    }

    /// True when requests are rendered from borrowed parts, their text up
    /// to the id first (the id comes last): NDJSON and JSON-RPC.
    pub(crate) fn renders_heads(&self) -> bool {
        match self {
            UpstreamCodec::JsonRpc(_) => true,
            UpstreamCodec::Holon(_) | UpstreamCodec::Sideband(_) => false,
        }
    }

    /// The params to send for a request or notification: the client's
    /// own (borrowed) unless the upstream needs them changed.
    pub(crate) fn params<'a>(
        &self,
        params: Option<&'a Payload>,
    ) -> Result<Option<Cow<'a, Payload>>, GatewayError> {
        match self {
            UpstreamCodec::JsonRpc(c) => c.params(params),
            UpstreamCodec::Holon(_) => super::holon::upstream::params(params),
            UpstreamCodec::Sideband(c) => Ok(match params {
                Some(p) => Some(Cow::Borrowed(p)),
                None => c.empty_params(),
            }),
        }
    }

    /// Encodes one message.
    pub(crate) fn encode(&self, msg: &Message) -> Result<Frame, GatewayError> {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => {
                super::jsonrpc::render(msg, self.style())
                    .map(Frame::Text)
                    .map_err(|_| not_json())
            }
            UpstreamCodec::Sideband(c) => c.encode(msg).map(Frame::Binary),
        }
    }

    /// Encodes one message in this thread's scratch buffer and hands it
    /// to `take`; `None` when it is too long for the scratch buffer (then
    /// [`Self::encode`] it).
    pub(crate) fn encode_scratch<R>(
        &self,
        msg: &Message,
        take: impl FnOnce(Scratch<'_>) -> Result<R, GatewayError>,
    ) -> Option<Result<R, GatewayError>> {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => {
                let taken = super::jsonrpc::render_scratch(msg, self.style(), |text| {
                    take(Scratch::Text(text))
                })?;
                Some(taken.unwrap_or_else(|_| Err(not_json())))
            }
            UpstreamCodec::Sideband(c) => Some(c.encode_with(msg, |f| take(Scratch::Binary(f)))),
        }
    }

    /// Encodes a batch as one JSON array (upstreams that accept batches).
    pub(crate) fn encode_batch(&self, msgs: &[Message]) -> Result<String, GatewayError> {
        render_batch(msgs, self.style()).map_err(|_| not_json())
    }

    /// Renders `err` as this dialect's error object (an answer to an
    /// upstream-originated request).
    pub(crate) fn render_error(&self, err: &GatewayError) -> ErrorObject {
        super::errors::render(err, self.dialect())
    }

    /// The gateway id of a reply above the response limit, read from its
    /// `id` when it has a usable one.
    pub(crate) fn oversize_id(&self, text: &str) -> Option<u64> {
        #[derive(serde::Deserialize)]
        struct IdOnly<'a> {
            #[serde(borrow)]
            id: Option<&'a serde_json::value::RawValue>,
        }
        let id = serde_json::from_str::<IdOnly<'_>>(text).ok()?.id?;
        self.parse_id(id.get())
    }

    /// Decodes one inbound text (a message or a batch of replies) and
    /// hands what it means to `each`, in order, while `each` returns true.
    /// Returns false when `each` did (the link must close).
    pub(crate) fn on_text(&self, text: &ByteString, mut each: impl FnMut(Event) -> bool) -> bool {
        // JSON texts, whatever the dialect that sends them.
        if text.trim_start().starts_with('[') {
            let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) else {
                return each(Event::Fault {
                    fault: Fault::InvalidMessage,
                    reply: None,
                });
            };
            return items
                .iter()
                .all(|item| each(self.message(text, item.get(), true)));
        }
        each(self.message(text, text, false))
    }

    /// What one JSON message (`text`, within `source`) means.
    fn message(&self, source: &ByteString, text: &str, in_batch: bool) -> Event {
        match decode_upstream_in(source, text) {
            Ok(msg) => self.event(msg, in_batch),
            Err(ReplyError::InvalidReply { id, why }) => {
                // The call gets `internal`, with the raw reply as detail.
                let gid = id.as_json().and_then(|t| self.parse_id(t));
                let detail = format!(
                    "invalid reply from upstream ({why}): {}",
                    truncate(text, QUOTED_BYTES)
                );
                Event::Failed {
                    gid,
                    error: GatewayError::with_detail(ErrorKind::Internal, detail)
                        .on(Side::Upstream),
                    fault: Some(Fault::InvalidReply),
                }
            }
            Err(ReplyError::NotJson(_) | ReplyError::Invalid(_)) => Event::Fault {
                fault: Fault::InvalidMessage,
                reply: None,
            },
        }
    }

    /// Decodes one inbound binary frame (Sideband) and hands what it
    /// means to `each`. Returns false when the link must close.
    pub(crate) fn on_binary(
        &self,
        bytes: &bytes::Bytes,
        mut each: impl FnMut(Event) -> bool,
    ) -> bool {
        match self {
            // The driver refuses binary frames on text links first.
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => false,
            UpstreamCodec::Sideband(c) => match c.on_frame(bytes) {
                Decoded::Nothing => true,
                Decoded::Event(event) => each(event),
                Decoded::Message(msg) => each(self.event(msg, false)),
            },
        }
    }

    /// What one decoded message means: replies are matched to gateway ids
    /// (our heartbeat's reply proves liveness), an `rpc.heartbeat` request
    /// is answered here, anything else is passed on.
    pub(crate) fn event(&self, msg: Message, in_batch: bool) -> Event {
        match msg {
            Message::Response {
                id: WireId::Cid(ref cid),
                ..
            }
            | Message::Error {
                id: Some(WireId::Cid(ref cid)),
                ..
            } => {
                let gid = match self {
                    UpstreamCodec::Sideband(c) => c.take_cid(cid),
                    UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => None,
                };
                Event::Reply { gid, reply: msg }
            }
            Message::Response { ref id, .. }
            | Message::Error {
                id: Some(ref id), ..
            } if id.as_json() != Some("null") => {
                let token = id.as_json().unwrap_or_default();
                let acked = match self {
                    UpstreamCodec::Holon(c) => c.acked(token),
                    UpstreamCodec::JsonRpc(_) | UpstreamCodec::Sideband(_) => false,
                };
                if acked {
                    return Event::Alive(msg.kind());
                }
                Event::Reply {
                    gid: self.parse_id(token),
                    reply: msg,
                }
            }
            Message::Error { .. } | Message::Response { .. } => Event::NoId {
                reply: msg,
                in_batch,
            },
            Message::Request { id, method, .. } if method == "rpc.heartbeat" => {
                Event::Answer(Message::Response {
                    id,
                    result: crate::envelope::Outcome::Value(Payload::Json(
                        crate::envelope::raw_from_string(String::from("{}")),
                    )),
                })
            }
            Message::Request { id, method, params } => Event::Request { id, method, params },
            Message::Notification { method, params } => Event::Notification { method, params },
        }
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

#[cfg(test)]
mod tests;
