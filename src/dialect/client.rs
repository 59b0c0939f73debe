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

use super::holon::client::{self as holon, HolonClient};
use super::jsonrpc::client::{self as jsonrpc, JsonRpcClient};
use super::jsonrpc::{render_batch, render_exact, render_scratch, NotJson, Style};
use super::sideband::client::{self as sideband, SidebandClient};
use super::{Dialect, Inbound};
use crate::close::CloseCode;
use crate::envelope::{Message, Payload, WireId};
use crate::error::GatewayError;

pub use super::{EventForm, Oversize};

/// One client connection's dialect: its codec, and the state the dialect
/// keeps per connection.
#[derive(Debug)]
// One per connection, built in place in the outbox's shared state and never
// moved after: the Sideband variant's size costs nothing a box would save.
#[allow(clippy::large_enum_variant)]
pub enum ClientCodec {
    /// JSON-RPC 2.0 in WebSocket text frames.
    JsonRpc(JsonRpcClient),
    /// JSON-RPC 2.0, one text per line (Unix socket).
    Ndjson(JsonRpcClient),
    /// JSON-RPC 2.0 in HTTP POST bodies (`jsonrpc-http`).
    JsonRpcHttp(JsonRpcClient),
    /// holon-rpc envelopes in WebSocket text frames.
    Holon(HolonClient),
    /// Sideband binary frames, with the connection's SBP session.
    Sideband(SidebandClient),
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
/// spelled as offered; none is fine too (each dialect's `subprotocol`
/// says how it matches).
pub fn subprotocol<'a>(
    dialect: Dialect,
    offered: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    match dialect {
        Dialect::JsonRpc => jsonrpc::subprotocol(offered),
        Dialect::Holon => holon::subprotocol(offered),
        Dialect::Sideband => sideband::subprotocol(offered),
        Dialect::Ndjson | Dialect::JsonRpcHttp => None,
    }
}

// === impl ClientCodec ===

impl ClientCodec {
    /// The codec of a fresh connection to a `dialect` listener; a Sideband
    /// session starts as `sideband` says.
    pub fn new(dialect: Dialect, sideband: sideband::Options) -> Self {
        match dialect {
            Dialect::JsonRpc => ClientCodec::JsonRpc(JsonRpcClient::WS),
            Dialect::Ndjson => ClientCodec::Ndjson(JsonRpcClient::LINES),
            Dialect::JsonRpcHttp => ClientCodec::JsonRpcHttp(JsonRpcClient::HTTP),
            Dialect::Holon => ClientCodec::Holon(HolonClient),
            Dialect::Sideband => ClientCodec::Sideband(SidebandClient::new(sideband)),
        }
    }

    /// The dialect.
    pub const fn dialect(&self) -> Dialect {
        match self {
            ClientCodec::JsonRpc(_) => Dialect::JsonRpc,
            ClientCodec::Ndjson(_) => Dialect::Ndjson,
            ClientCodec::JsonRpcHttp(_) => Dialect::JsonRpcHttp,
            ClientCodec::Holon(_) => Dialect::Holon,
            ClientCodec::Sideband(_) => Dialect::Sideband,
        }
    }

    /// True when clients send binary frames (Sideband), false for text.
    pub const fn reads_binary(&self) -> bool {
        match self {
            ClientCodec::Sideband(_) => true,
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Holon(_) => false,
        }
    }

    /// How text replies are rendered; `None` for a binary dialect.
    const fn style(&self) -> Option<Style> {
        match self {
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Holon(_) => Some(self.dialect().style()),
            ClientCodec::Sideband(_) => None,
        }
    }

    /// Decodes one text frame or line; a JSON-RPC batch holds at most
    /// `max_batch_items`.
    pub fn decode_text(&self, text: &ByteString, max_batch_items: usize) -> Inbound {
        match self {
            ClientCodec::JsonRpc(json)
            | ClientCodec::Ndjson(json)
            | ClientCodec::JsonRpcHttp(json) => json.decode(text, max_batch_items),
            ClientCodec::Holon(holon) => holon.decode(text),
            ClientCodec::Sideband(sb) => sb.decode_text(text, max_batch_items),
        }
    }

    /// Decodes one binary frame (Sideband; a text dialect closes 1003).
    pub fn decode_binary(&self, bytes: &Bytes) -> Inbound {
        match self {
            ClientCodec::Sideband(sb) => sb.decode(bytes),
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Holon(_) => {
                Inbound::close(CloseCode::Unsupported, "binary frames are not supported")
            }
        }
    }

    /// The frame to send as soon as the connection opens (Sideband's
    /// handshake).
    pub fn greeting(&self) -> Option<Vec<u8>> {
        match self {
            ClientCodec::Sideband(sb) => Some(sb.hello()),
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Holon(_) => None,
        }
    }

    /// True while the client has not sent the handshake its dialect
    /// requires (Sideband).
    pub fn negotiating(&self) -> bool {
        match self {
            ClientCodec::Sideband(sb) => sb.negotiating(),
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Holon(_) => false,
        }
    }

    /// The frame to send before the shutdown close: a Sideband Control
    /// Close `shutdown` (sideband.md §10).
    pub fn goodbye(&self) -> Option<Vec<u8>> {
        match self {
            ClientCodec::Sideband(_) => Some(SidebandClient::goodbye()),
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Holon(_) => None,
        }
    }

    /// The reply switchyard gives `msg` itself, before rate limits and
    /// routing: holon-rpc's `rpc.heartbeat` request (holon-rpc.md §10),
    /// and, when `answer_ping` is set, the other dialects' `ping`
    /// notification (answered with the notification `pong`).
    pub fn local_reply(&self, msg: &Message, answer_ping: bool) -> Option<Message> {
        match msg {
            Message::Notification { method, .. } => self.pong(method, answer_ping),
            _ => match self {
                ClientCodec::Holon(holon) => holon.local_reply(msg),
                ClientCodec::JsonRpc(_)
                | ClientCodec::Ndjson(_)
                | ClientCodec::JsonRpcHttp(_)
                | ClientCodec::Sideband(_) => None,
            },
        }
    }

    /// The `pong` notification that answers a `ping` notification, when
    /// `answer_ping` is set (holon-rpc has no notifications).
    pub fn pong(&self, method: &str, answer_ping: bool) -> Option<Message> {
        match self {
            ClientCodec::Holon(_) => None,
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Sideband(_) => jsonrpc::pong(method, answer_ping),
        }
    }

    /// The answer to a message over `limit` bytes, before close 1009:
    /// JSON-RPC gets -32600 `Message size exceeds maximum of N bytes`, an
    /// NDJSON client -32600 `Line exceeds maximum of N bytes` (then the
    /// connection closes); holon-rpc and Sideband only the close.
    pub fn oversize(&self, limit: usize) -> Oversize {
        match self {
            ClientCodec::JsonRpc(json)
            | ClientCodec::Ndjson(json)
            | ClientCodec::JsonRpcHttp(json) => json.oversize(limit),
            ClientCodec::Holon(holon) => holon.oversize(),
            ClientCodec::Sideband(_) => SidebandClient::oversize(),
        }
    }

    /// How a pub/sub event reaches this client.
    pub const fn event_form(&self) -> EventForm {
        match self {
            ClientCodec::JsonRpc(_) | ClientCodec::Ndjson(_) | ClientCodec::JsonRpcHttp(_) => {
                EventForm::Notification
            }
            ClientCodec::Holon(_) => EventForm::Request,
            ClientCodec::Sideband(_) => EventForm::Envelope,
        }
    }

    /// True when a notification switchyard pushes goes as an `s<N>`
    /// request whose reply is consumed (holon-rpc has no notifications,
    /// holon-rpc.md §8).
    pub const fn notifies_by_request(&self) -> bool {
        match self {
            ClientCodec::Holon(_) => true,
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Sideband(_) => false,
        }
    }

    /// The params of a notification pushed to the client: for holon-rpc,
    /// as a request, with params that are not an object wrapped as
    /// `{"value": …}` (`Err` carries the wrapped params, to be counted as
    /// a quirk).
    pub fn push_notification_params(
        &self,
        params: Option<Payload>,
    ) -> Result<Option<Payload>, Option<Payload>> {
        match self {
            ClientCodec::Holon(holon) => holon.push_notification_params(params),
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Sideband(_) => Ok(params),
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
            ClientCodec::JsonRpc(json)
            | ClientCodec::Ndjson(json)
            | ClientCodec::JsonRpcHttp(json) => json.push_request_params(method, params),
            ClientCodec::Holon(holon) => holon.push_request_params(params),
            ClientCodec::Sideband(_) => Ok(params),
        }
    }

    /// The wire id of push number `n`: a fresh cid for Sideband (equal to
    /// the request frame's id, remembered until answered or forgotten),
    /// the string `"s<n>"` for the others.
    pub fn push_id(&self, n: u64) -> WireId {
        match self {
            ClientCodec::Sideband(sb) => sb.push_id(n),
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Holon(_) => jsonrpc::push_id(n),
        }
    }

    /// The push number a client's reply id answers, if it is one of
    /// [`push_id`](Self::push_id)'s.
    pub fn push_number(&self, id: &WireId) -> Option<u64> {
        match (self, id) {
            (ClientCodec::Sideband(sb), WireId::Cid(cid)) => sb.push_number(cid),
            (ClientCodec::Sideband(_), WireId::Json(_)) => None,
            (
                ClientCodec::JsonRpc(_)
                | ClientCodec::Ndjson(_)
                | ClientCodec::JsonRpcHttp(_)
                | ClientCodec::Holon(_),
                _,
            ) => jsonrpc::push_number(id),
        }
    }

    /// Forgets push number `n` (abandoned, or never sent).
    pub fn forget_push(&self, n: u64) {
        match self {
            ClientCodec::Sideband(sb) => sb.forget_push(n),
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Holon(_) => {}
        }
    }

    /// True when a void reply that answers nothing is an invalid message
    /// (holon-rpc row 9: an id-only frame); a Sideband `R` without
    /// `result` is a valid void reply, dropped like any unmatched reply.
    pub const fn unmatched_void_is_invalid(&self) -> bool {
        match self {
            ClientCodec::Holon(_) => true,
            ClientCodec::JsonRpc(_)
            | ClientCodec::Ndjson(_)
            | ClientCodec::JsonRpcHttp(_)
            | ClientCodec::Sideband(_) => false,
        }
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
            ClientCodec::JsonRpc(json)
            | ClientCodec::Ndjson(json)
            | ClientCodec::JsonRpcHttp(json) => json.style(),
            ClientCodec::Holon(_) => Style::Holon,
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
        let holon = ClientCodec::Holon(HolonClient);
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
        let json = ClientCodec::JsonRpc(JsonRpcClient::WS);
        assert!(json.local_reply(&ping, true).is_some());
        assert_eq!(json.local_reply(&ping, false), None);
        assert_eq!(json.local_reply(&heartbeat, true), None);
    }

    #[test]
    fn oversize_answers() {
        let json = ClientCodec::JsonRpc(JsonRpcClient::WS).oversize(10);
        assert!(json.reply.is_some());
        assert_eq!(json.reason, "message too large");
        let sb = ClientCodec::new(Dialect::Sideband, sideband::Options::default()).oversize(10);
        assert_eq!((sb.reply, sb.reason), (None, "Message too large"));
        assert!(ClientCodec::Ndjson(JsonRpcClient::LINES)
            .oversize(10)
            .reply
            .is_some());
        assert_eq!(ClientCodec::Holon(HolonClient).oversize(10).reply, None);
    }

    #[test]
    fn pushes_are_identified_by_the_dialect() {
        for text in [
            ClientCodec::JsonRpc(JsonRpcClient::WS),
            ClientCodec::Ndjson(JsonRpcClient::LINES),
            ClientCodec::Holon(HolonClient),
        ] {
            let id = text.push_id(3);
            assert_eq!(id, WireId::string("s3"));
            assert_eq!(text.push_number(&id), Some(3));
        }
        let sb = ClientCodec::new(Dialect::Sideband, sideband::Options::default());
        let id = sb.push_id(3);
        assert!(matches!(id, WireId::Cid(_)), "a fresh cid: {id:?}");
        assert_eq!(sb.push_number(&WireId::string("s3")), None);
        assert_eq!(sb.push_number(&id), Some(3));
        assert_eq!(sb.push_number(&id), None, "answered once");
    }

    #[test]
    fn only_sideband_reads_binary_frames() {
        let json = ClientCodec::JsonRpc(JsonRpcClient::WS);
        assert_eq!(
            json.decode_binary(&Bytes::from_static(b"{}")),
            Inbound::close(CloseCode::Unsupported, "binary frames are not supported")
        );
        assert!(json.greeting().is_none() && json.goodbye().is_none());
        let sb = ClientCodec::new(Dialect::Sideband, sideband::Options::default());
        assert!(sb.reads_binary() && sb.negotiating());
        assert!(sb.greeting().is_some() && sb.goodbye().is_some());
    }
}
