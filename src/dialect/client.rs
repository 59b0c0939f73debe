//! The listener side of a dialect: everything a client connection needs to
//! know about the dialect it speaks, and the state the dialect keeps per
//! connection, so that the transport, the outbox and the router need not
//! `match` on dialects themselves. Pure: no sockets, no tokio.
//!
//! [`ClientCodec`] is an enum with one variant per dialect, each holding
//! that dialect's per-connection state (Sideband's SBP session and push
//! cids; the JSON dialects have none), rather than a trait object: the
//! set of dialects is closed, so adding one makes the compiler list every
//! `match` here; nothing on the hot path is a dynamic call; and the state
//! is held by value in the connection's outbox.
//!
//! - which WebSocket subprotocol to select from the client's offer;
//! - whether it reads text or binary frames, and the greeting and goodbye
//!   frames of a dialect that has a session layer (Sideband);
//! - how a frame decodes, session events included;
//! - what switchyard answers itself, before any routing (holon-rpc's
//!   `rpc.heartbeat`, the JSON-RPC `ping` notification);
//! - how a message over the size limit is answered before close 1009;
//! - how replies, pushes and events are written, and how a push is
//!   identified.

use bytes::Bytes;
use bytestring::ByteString;

use super::render::{render_batch, render_exact, render_scratch, NotJson, Style};
use super::sideband::client::{self as sideband, SidebandClient};
use super::{holon, jsonrpc, Dialect, Inbound};
use crate::close::CloseCode;
use crate::envelope::{raw_from_string, Message, Outcome, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};

/// One client connection's dialect: its codec, and the state the dialect
/// keeps per connection.
#[derive(Debug)]
pub enum ClientCodec {
    /// JSON-RPC 2.0 in WebSocket text frames.
    JsonRpc,
    /// JSON-RPC 2.0, one text per line (Unix socket).
    Ndjson,
    /// holon-rpc envelopes in WebSocket text frames.
    Holon,
    /// Sideband binary frames, with the connection's SBP session.
    Sideband(SidebandClient),
}

/// How a pub/sub event reaches a client (jsonrpc-ws.md §7.2, as the
/// README maps it to every dialect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventForm {
    /// The notification `rpc.notification` with `{topic, data}`: the same
    /// text for every such client (JSON-RPC, NDJSON).
    Notification,
    /// The same as an `s<N>` request whose reply is consumed (holon-rpc).
    Request,
    /// An `N` envelope on `event`, `e` = the topic, `d` = the data
    /// (Sideband).
    Envelope,
}

/// What a message over the size limit gets before close 1009.
#[derive(Debug, Clone, PartialEq)]
pub struct Oversize {
    /// The error reply to send first, if the dialect has one.
    pub reply: Option<Message>,
    /// The close frame's reason.
    pub reason: &'static str,
}

/// A frame as a codec rendered it, lent to the caller to copy where it
/// goes (a connection's frame buffer, or an allocation of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A text frame or line.
    Text(&'a str),
    /// A binary frame (Sideband).
    Binary(&'a [u8]),
}

/// A message as [`ClientCodec::encode`] rendered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encoded<R> {
    /// What `take` made of the frame, lent out of a per-thread buffer.
    Taken(R),
    /// A long text, rendered straight into an allocation of its own
    /// (cheaper than a copy out of the per-thread buffer).
    Text(String),
}

/// The subprotocol a `dialect` listener selects from the client's offers,
/// spelled as offered; none is fine too. holon-rpc matches
/// case-insensitively and echoes the client's spelling, as WebBridge does
/// (browsers fail the connection unless the echo is exactly one of their
/// offers; holon-rpc.md §1, §10). The other notes name an exact token.
pub fn subprotocol<'a>(
    dialect: Dialect,
    offered: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let (token, any_case) = match dialect {
        Dialect::JsonRpc => ("jsonrpc", false),
        Dialect::Sideband => (sideband::SUBPROTOCOL, false),
        Dialect::Holon => ("holon-rpc", true),
        Dialect::Ndjson => return None,
    };
    offered.into_iter().find(|p| {
        if any_case {
            p.eq_ignore_ascii_case(token)
        } else {
            *p == token
        }
    })
}

// === impl ClientCodec ===

impl ClientCodec {
    /// The codec of a fresh connection to a `dialect` listener; a Sideband
    /// session starts as `sideband` says.
    pub fn new(dialect: Dialect, sideband: sideband::Options) -> Self {
        match dialect {
            Dialect::JsonRpc => ClientCodec::JsonRpc,
            Dialect::Ndjson => ClientCodec::Ndjson,
            Dialect::Holon => ClientCodec::Holon,
            Dialect::Sideband => ClientCodec::Sideband(SidebandClient::new(sideband)),
        }
    }

    /// The dialect.
    pub const fn dialect(&self) -> Dialect {
        match self {
            ClientCodec::JsonRpc => Dialect::JsonRpc,
            ClientCodec::Ndjson => Dialect::Ndjson,
            ClientCodec::Holon => Dialect::Holon,
            ClientCodec::Sideband(_) => Dialect::Sideband,
        }
    }

    /// True when clients send binary frames (Sideband), false for text.
    pub const fn reads_binary(&self) -> bool {
        match self {
            ClientCodec::Sideband(_) => true,
            ClientCodec::JsonRpc | ClientCodec::Ndjson | ClientCodec::Holon => false,
        }
    }

    /// How text replies are rendered; `None` for a binary dialect.
    const fn style(&self) -> Option<Style> {
        match self {
            ClientCodec::Ndjson => Some(Style::Line),
            ClientCodec::Holon => Some(Style::Holon),
            ClientCodec::JsonRpc => Some(Style::Frame),
            ClientCodec::Sideband(_) => None,
        }
    }

    /// Decodes one text frame or line; a JSON-RPC batch holds at most
    /// `max_batch_items`.
    pub fn decode_text(&self, text: &ByteString, max_batch_items: usize) -> Inbound {
        match self {
            ClientCodec::Holon => holon::decode(text),
            // A Sideband client's text frames are JSON-RPC text to it.
            ClientCodec::JsonRpc | ClientCodec::Ndjson | ClientCodec::Sideband(_) => {
                jsonrpc::decode(text, max_batch_items)
            }
        }
    }

    /// Decodes one binary frame (Sideband; a text dialect closes 1003).
    pub fn decode_binary(&self, bytes: &Bytes) -> Inbound {
        match self {
            ClientCodec::Sideband(sb) => sb.decode(bytes),
            ClientCodec::JsonRpc | ClientCodec::Ndjson | ClientCodec::Holon => {
                Inbound::close(CloseCode::Unsupported, "binary frames are not supported")
            }
        }
    }

    /// The frame to send as soon as the connection opens (Sideband's
    /// handshake).
    pub fn greeting(&self) -> Option<Vec<u8>> {
        match self {
            ClientCodec::Sideband(sb) => Some(sb.hello()),
            ClientCodec::JsonRpc | ClientCodec::Ndjson | ClientCodec::Holon => None,
        }
    }

    /// True while the client has not sent the handshake its dialect
    /// requires (Sideband).
    pub fn negotiating(&self) -> bool {
        match self {
            ClientCodec::Sideband(sb) => sb.negotiating(),
            ClientCodec::JsonRpc | ClientCodec::Ndjson | ClientCodec::Holon => false,
        }
    }

    /// The frame to send before the shutdown close: a Sideband Control
    /// Close `shutdown` (sideband.md §10).
    pub fn goodbye(&self) -> Option<Vec<u8>> {
        match self {
            ClientCodec::Sideband(_) => Some(SidebandClient::goodbye()),
            ClientCodec::JsonRpc | ClientCodec::Ndjson | ClientCodec::Holon => None,
        }
    }

    /// The reply switchyard gives `msg` itself, before rate limits and
    /// routing: holon-rpc's `rpc.heartbeat` request (holon-rpc.md §10),
    /// and, when `answer_ping` is set, the JSON dialects' `ping`
    /// notification (answered with the notification `pong`).
    pub fn local_reply(&self, msg: &Message, answer_ping: bool) -> Option<Message> {
        match msg {
            Message::Request { id, method, .. }
                if matches!(self, ClientCodec::Holon) && method == "rpc.heartbeat" =>
            {
                Some(Message::Response {
                    id: id.clone(),
                    result: Outcome::Value(Payload::Json(raw_from_string(String::from("{}")))),
                })
            }
            Message::Notification { method, .. } => self.pong(method, answer_ping),
            _ => None,
        }
    }

    /// The `pong` notification that answers a `ping` notification in the
    /// JSON dialects, when `answer_ping` is set (holon-rpc has no
    /// notifications).
    pub fn pong(&self, method: &str, answer_ping: bool) -> Option<Message> {
        let answers = answer_ping && method == "ping" && !matches!(self, ClientCodec::Holon);
        answers.then(|| Message::Notification {
            method: "pong".into(),
            params: None,
        })
    }

    /// The answer to a message over `limit` bytes, before close 1009:
    /// JSON-RPC gets -32600 `Message size exceeds maximum of N bytes`, an
    /// NDJSON client -32600 `Line exceeds maximum of N bytes` (then the
    /// connection closes); holon-rpc and Sideband only the close.
    pub fn oversize(&self, limit: usize) -> Oversize {
        let (detail, reason) = match self {
            ClientCodec::JsonRpc => (
                Some(format!("Message size exceeds maximum of {limit} bytes")),
                "message too large",
            ),
            ClientCodec::Ndjson => (
                Some(format!("Line exceeds maximum of {limit} bytes")),
                "message too large",
            ),
            ClientCodec::Holon => (None, "message too large"),
            ClientCodec::Sideband(_) => (None, sideband::TOO_LARGE),
        };
        let reply = detail.map(|d| {
            let err = GatewayError::with_detail(ErrorKind::InvalidRequest, d);
            self.error_reply(WireId::null(), &err)
        });
        Oversize { reply, reason }
    }

    /// How a pub/sub event reaches this client.
    pub const fn event_form(&self) -> EventForm {
        match self {
            ClientCodec::JsonRpc | ClientCodec::Ndjson => EventForm::Notification,
            ClientCodec::Holon => EventForm::Request,
            ClientCodec::Sideband(_) => EventForm::Envelope,
        }
    }

    /// True when a notification switchyard pushes goes as an `s<N>`
    /// request whose reply is consumed (holon-rpc has no notifications,
    /// holon-rpc.md §8).
    pub const fn notifies_by_request(&self) -> bool {
        matches!(self, ClientCodec::Holon)
    }

    /// The params of a notification pushed as a request: holon-rpc params
    /// are an object, so anything else is wrapped as `{"value": …}`
    /// (`Err` carries the wrapped params, to be counted as a quirk).
    pub fn push_notification_params(
        &self,
        params: Option<Payload>,
    ) -> Result<Option<Payload>, Option<Payload>> {
        match params {
            Some(p) if self.notifies_by_request() && holon::object_params(Some(&p)).is_none() => {
                Err(holon::wrap_params(&p))
            }
            other => Ok(other),
        }
    }

    /// The params of a request switchyard pushes to the client, or why it
    /// cannot: NDJSON clients get no requests; holon-rpc params must be an
    /// object.
    pub fn push_request_params(
        &self,
        method: &str,
        params: Option<Payload>,
    ) -> Result<Option<Payload>, GatewayError> {
        match self {
            ClientCodec::Ndjson => Err(GatewayError::no_route(method)),
            ClientCodec::Holon => {
                holon::object_params(params.as_ref())
                    .map(Some)
                    .ok_or_else(|| {
                        GatewayError::with_detail(
                            ErrorKind::InvalidParams,
                            "params must be an object for holon-rpc clients",
                        )
                    })
            }
            ClientCodec::JsonRpc | ClientCodec::Sideband(_) => Ok(params),
        }
    }

    /// The wire id of push number `n`: a fresh cid for Sideband (equal to
    /// the request frame's id, remembered until answered or forgotten),
    /// the string `"s<n>"` for the others.
    pub fn push_id(&self, n: u64) -> WireId {
        match self {
            ClientCodec::Sideband(sb) => sb.push_id(n),
            ClientCodec::JsonRpc | ClientCodec::Ndjson | ClientCodec::Holon => {
                WireId::string(&compact_str::format_compact!("s{n}"))
            }
        }
    }

    /// The push number a client's reply id answers, if it is one of
    /// [`push_id`](Self::push_id)'s.
    pub fn push_number(&self, id: &WireId) -> Option<u64> {
        match (self, id) {
            (ClientCodec::Sideband(sb), WireId::Cid(cid)) => sb.push_number(cid),
            (ClientCodec::Sideband(_), WireId::Json(_)) => None,
            (ClientCodec::JsonRpc | ClientCodec::Ndjson | ClientCodec::Holon, _) => id
                .as_json()
                .and_then(|t| t.strip_prefix("\"s"))
                .and_then(|t| t.strip_suffix('"'))
                .and_then(|n| n.parse::<u64>().ok()),
        }
    }

    /// Forgets push number `n` (abandoned, or never sent).
    pub fn forget_push(&self, n: u64) {
        match self {
            ClientCodec::Sideband(sb) => sb.forget_push(n),
            ClientCodec::JsonRpc | ClientCodec::Ndjson | ClientCodec::Holon => {}
        }
    }

    /// True when a void reply that answers nothing is an invalid message
    /// (holon-rpc row 9: an id-only frame); a Sideband `R` without
    /// `result` is a valid void reply, dropped like any unmatched reply.
    pub const fn unmatched_void_is_invalid(&self) -> bool {
        matches!(self, ClientCodec::Holon)
    }

    /// The error reply to `id` for one of switchyard's own errors.
    pub fn error_reply(&self, id: WireId, err: &GatewayError) -> Message {
        Message::error(Some(id), super::errors::render(err, self.dialect()))
    }

    /// Renders `msg` for the client and lends the frame to `take`, which
    /// copies it where it goes; a long text is rendered into an allocation
    /// of its own instead. `None` when the dialect cannot carry `msg` (a
    /// payload that cannot be transcoded).
    pub fn encode<R>(
        &self,
        msg: &Message,
        take: impl FnOnce(Frame<'_>) -> R,
    ) -> Option<Encoded<R>> {
        let style = match self {
            ClientCodec::Sideband(sb) => {
                return sb
                    .encode_with(msg, |frame| take(Frame::Binary(frame)))
                    .ok()
                    .map(Encoded::Taken);
            }
            ClientCodec::JsonRpc => Style::Frame,
            ClientCodec::Ndjson => Style::Line,
            ClientCodec::Holon => Style::Holon,
        };
        match render_scratch(msg, style, |text| take(Frame::Text(text))) {
            Some(rendered) => rendered.ok().map(Encoded::Taken),
            None => render_exact(msg, style).ok().map(Encoded::Text),
        }
    }

    /// Renders a batch reply (a JSON array; the text dialects only):
    /// `None` for a binary dialect, `Err` when one item cannot be
    /// rendered.
    pub fn encode_batch(&self, msgs: &[Message]) -> Option<Result<String, NotJson>> {
        self.style().map(|style| render_batch(msgs, style))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn subprotocols_as_the_notes_name_them() {
        let holon = Dialect::Holon;
        assert_eq!(subprotocol(holon, ["x", "Holon-RPC"]), Some("Holon-RPC"));
        assert_eq!(subprotocol(holon, ["jsonrpc"]), None);
        let json = Dialect::JsonRpc;
        assert_eq!(subprotocol(json, ["JSONRPC"]), None);
        assert_eq!(subprotocol(json, ["a", "jsonrpc"]), Some("jsonrpc"));
        assert_eq!(
            subprotocol(Dialect::Sideband, ["sideband.v1"]),
            Some("sideband.v1")
        );
        assert_eq!(subprotocol(Dialect::Ndjson, ["jsonrpc"]), None);
    }

    #[test]
    fn local_replies() {
        let heartbeat = Message::Request {
            id: WireId::string("7"),
            method: "rpc.heartbeat".into(),
            params: None,
        };
        let holon = ClientCodec::Holon;
        assert!(matches!(
            holon.local_reply(&heartbeat, true),
            Some(Message::Response { .. })
        ));
        let ping = Message::Notification {
            method: "ping".into(),
            params: None,
        };
        // holon-rpc has no notifications to answer; a JSON client's ping
        // is answered only when configured.
        assert_eq!(holon.local_reply(&ping, true), None);
        let json = ClientCodec::JsonRpc;
        assert!(json.local_reply(&ping, true).is_some());
        assert_eq!(json.local_reply(&ping, false), None);
        assert_eq!(json.local_reply(&heartbeat, true), None);
    }

    #[test]
    fn oversize_answers() {
        let json = ClientCodec::JsonRpc.oversize(10);
        assert!(json.reply.is_some());
        assert_eq!(json.reason, "message too large");
        let sb = ClientCodec::new(Dialect::Sideband, sideband::Options::default()).oversize(10);
        assert_eq!((sb.reply, sb.reason), (None, "Message too large"));
        assert!(ClientCodec::Ndjson.oversize(10).reply.is_some());
        assert_eq!(ClientCodec::Holon.oversize(10).reply, None);
    }
}
