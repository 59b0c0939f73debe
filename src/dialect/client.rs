//! The listener side of a dialect: everything a client connection needs to
//! know about the dialect it speaks, so that the transport and the router
//! need not `match` on dialects themselves. Pure: no sockets, no tokio.
//!
//! - which WebSocket subprotocol to select from the client's offer;
//! - whether it reads text or binary frames;
//! - how a text frame or line decodes;
//! - what switchyard answers itself, before any routing (holon-rpc's
//!   `rpc.heartbeat`, the JSON-RPC `ping` notification);
//! - how a message over the size limit is answered before close 1009;
//! - how replies are written (the rendering style of text dialects).

use bytestring::ByteString;

use super::render::Style;
use super::{holon, jsonrpc, Dialect, Inbound};
use crate::envelope::{raw_from_string, Message, Outcome, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};

/// One client dialect's listener-side behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientCodec(Dialect);

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

// === impl ClientCodec ===

impl ClientCodec {
    /// The codec of `dialect`'s listeners.
    pub const fn of(dialect: Dialect) -> Self {
        ClientCodec(dialect)
    }

    /// The dialect.
    pub const fn dialect(self) -> Dialect {
        self.0
    }

    /// True when clients send binary frames (Sideband), false for text.
    pub const fn reads_binary(self) -> bool {
        matches!(self.0, Dialect::Sideband)
    }

    /// How replies are rendered (text dialects; Sideband writes frames).
    pub const fn style(self) -> Style {
        match self.0 {
            Dialect::Ndjson => Style::Line,
            Dialect::Holon => Style::Holon,
            Dialect::JsonRpc | Dialect::Sideband | Dialect::JsonRpcHttp => Style::Frame,
        }
    }

    /// The subprotocol to select from the client's offers, spelled as
    /// offered; none is fine too. holon-rpc matches case-insensitively and
    /// echoes the client's spelling, as WebBridge does (browsers fail the
    /// connection unless the echo is exactly one of their offers;
    /// holon-rpc.md §1, §10). The other notes name an exact token.
    pub fn subprotocol<'a>(self, offered: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
        let (token, any_case) = match self.0 {
            Dialect::JsonRpc => ("jsonrpc", false),
            Dialect::Sideband => ("sideband.v1", false),
            Dialect::Holon => ("holon-rpc", true),
            Dialect::Ndjson | Dialect::JsonRpcHttp => return None,
        };
        offered.into_iter().find(|p| {
            if any_case {
                p.eq_ignore_ascii_case(token)
            } else {
                *p == token
            }
        })
    }

    /// Decodes one text frame or line; a JSON-RPC batch holds at most
    /// `max_batch_items`.
    pub fn decode(self, text: &ByteString, max_batch_items: usize) -> Inbound {
        match self.0 {
            Dialect::Holon => holon::decode(text),
            // A Sideband client's text frames are JSON-RPC text to it.
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::Sideband | Dialect::JsonRpcHttp => {
                jsonrpc::decode(text, max_batch_items)
            }
        }
    }

    /// The reply switchyard gives `msg` itself, before rate limits and
    /// routing: holon-rpc's `rpc.heartbeat` request (holon-rpc.md §10),
    /// and, when `answer_ping` is set, the JSON dialects' `ping`
    /// notification (answered with the notification `pong`).
    pub fn local_reply(self, msg: &Message, answer_ping: bool) -> Option<Message> {
        match msg {
            Message::Request { id, method, .. }
                if self.0 == Dialect::Holon && method == "rpc.heartbeat" =>
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
    pub fn pong(self, method: &str, answer_ping: bool) -> Option<Message> {
        let answers = answer_ping && method == "ping" && self.0 != Dialect::Holon;
        answers.then(|| Message::Notification {
            method: "pong".into(),
            params: None,
        })
    }

    /// The answer to a message over `limit` bytes, before close 1009:
    /// JSON-RPC gets -32600 `Message size exceeds maximum of N bytes`, an
    /// NDJSON client -32600 `Line exceeds maximum of N bytes` (then the
    /// connection closes); holon-rpc and Sideband only the close.
    pub fn oversize(self, limit: usize) -> Oversize {
        let detail = match self.0 {
            Dialect::JsonRpc | Dialect::JsonRpcHttp => {
                Some(format!("Message size exceeds maximum of {limit} bytes"))
            }
            Dialect::Ndjson => Some(format!("Line exceeds maximum of {limit} bytes")),
            Dialect::Holon | Dialect::Sideband => None,
        };
        let reply = detail.map(|d| {
            let err = GatewayError::with_detail(ErrorKind::InvalidRequest, d);
            Message::error(Some(WireId::null()), super::errors::render(&err, self.0))
        });
        let reason = match self.0 {
            Dialect::Sideband => "Message too large",
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::Holon | Dialect::JsonRpcHttp => {
                "message too large"
            }
        };
        Oversize { reply, reason }
    }

    /// How a pub/sub event reaches this client.
    pub const fn event_form(self) -> EventForm {
        match self.0 {
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::JsonRpcHttp => EventForm::Notification,
            Dialect::Holon => EventForm::Request,
            Dialect::Sideband => EventForm::Envelope,
        }
    }

    /// True when a notification switchyard pushes goes as an `s<N>`
    /// request whose reply is consumed (holon-rpc has no notifications,
    /// holon-rpc.md §8).
    pub const fn notifies_by_request(self) -> bool {
        matches!(self.0, Dialect::Holon)
    }

    /// The params of a notification pushed as a request: holon-rpc params
    /// are an object, so anything else is wrapped as `{"value": …}`
    /// (`Err` carries the wrapped params, to be counted as a quirk).
    pub fn push_notification_params(
        self,
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
        self,
        method: &str,
        params: Option<Payload>,
    ) -> Result<Option<Payload>, GatewayError> {
        match self.0 {
            // Neither an NDJSON nor an HTTP client can be sent a request.
            Dialect::Ndjson | Dialect::JsonRpcHttp => Err(GatewayError::no_route(method)),
            Dialect::Holon => holon::object_params(params.as_ref())
                .map(Some)
                .ok_or_else(|| {
                    GatewayError::with_detail(
                        ErrorKind::InvalidParams,
                        "params must be an object for holon-rpc clients",
                    )
                }),
            Dialect::JsonRpc | Dialect::Sideband => Ok(params),
        }
    }

    /// True when pushed requests are identified by a fresh cid (Sideband,
    /// equal to the frame id), false for the string ids `"s<N>"`.
    pub const fn pushes_by_cid(self) -> bool {
        matches!(self.0, Dialect::Sideband)
    }

    /// True when a void reply that answers nothing is an invalid message
    /// (holon-rpc row 9: an id-only frame); a Sideband `R` without
    /// `result` is a valid void reply, dropped like any unmatched reply.
    pub const fn unmatched_void_is_invalid(self) -> bool {
        matches!(self.0, Dialect::Holon)
    }

    /// The frame to send before the shutdown close: a Sideband Control
    /// Close `shutdown` (sideband.md §10).
    pub fn goodbye(self) -> Option<Vec<u8>> {
        self.reads_binary()
            .then(|| super::sideband::session::Sbp::close_frame("shutdown"))
    }

    /// The error reply to `id` for one of switchyard's own errors.
    pub fn error_reply(self, id: WireId, err: &GatewayError) -> Message {
        Message::error(Some(id), super::errors::render(err, self.0))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn subprotocols_as_the_notes_name_them() {
        let holon = ClientCodec::of(Dialect::Holon);
        assert_eq!(holon.subprotocol(["x", "Holon-RPC"]), Some("Holon-RPC"));
        assert_eq!(holon.subprotocol(["jsonrpc"]), None);
        let json = ClientCodec::of(Dialect::JsonRpc);
        assert_eq!(json.subprotocol(["JSONRPC"]), None);
        assert_eq!(json.subprotocol(["a", "jsonrpc"]), Some("jsonrpc"));
        assert_eq!(
            ClientCodec::of(Dialect::Sideband).subprotocol(["sideband.v1"]),
            Some("sideband.v1")
        );
        assert_eq!(
            ClientCodec::of(Dialect::Ndjson).subprotocol(["jsonrpc"]),
            None
        );
    }

    #[test]
    fn local_replies() {
        let heartbeat = Message::Request {
            id: WireId::string("7"),
            method: "rpc.heartbeat".into(),
            params: None,
        };
        let holon = ClientCodec::of(Dialect::Holon);
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
        let json = ClientCodec::of(Dialect::JsonRpc);
        assert!(json.local_reply(&ping, true).is_some());
        assert_eq!(json.local_reply(&ping, false), None);
        assert_eq!(json.local_reply(&heartbeat, true), None);
    }

    #[test]
    fn oversize_answers() {
        let json = ClientCodec::of(Dialect::JsonRpc).oversize(10);
        assert!(json.reply.is_some());
        assert_eq!(json.reason, "message too large");
        let sb = ClientCodec::of(Dialect::Sideband).oversize(10);
        assert_eq!((sb.reply, sb.reason), (None, "Message too large"));
        assert!(ClientCodec::of(Dialect::Ndjson)
            .oversize(10)
            .reply
            .is_some());
        assert_eq!(ClientCodec::of(Dialect::Holon).oversize(10).reply, None);
    }
}
