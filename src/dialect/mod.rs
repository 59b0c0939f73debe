//! Pure, synchronous wire codecs: bytes ⇄ [`Message`].
//!
//! Nothing in this module touches a socket or tokio: every codec can be
//! tested with byte literals alone. Transports (`crate::transport`,
//! `crate::upstream`) own the I/O and call in here.
//!
//! This file is the registry of dialects: the closed set ([`Dialect`],
//! its names, which are also its metric label, and every per-dialect
//! table: index, `rpc.system`, text style, family of error codes) and the
//! codec each dialect has in each role, [`ClientCodec`] for a listener and
//! [`UpstreamCodec`] for an upstream link, each an enum with one variant
//! per dialect. What a dialect knows of its wire is in its own module
//! (`<name>.rs` with its folder, or `<name>/mod.rs`), its listener and
//! upstream halves included. A dialect whose halves hold no state of
//! their own keeps them as sections of its module file (JSON-RPC: a
//! connection's framing, a link's settings); one whose halves keep state
//! per connection or per link keeps both as files of the folder
//! (holon-rpc: a link's heartbeat in flight; Sideband: its session and
//! cids). Here a dialect is only listed: every `match` on a dialect or on
//! a codec's variant is in this file (none has a wildcard arm), so adding
//! a dialect makes the compiler list each place to extend here.
//!
//! ## The listener half
//!
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
//!
//! ## The upstream half
//!
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
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use bytestring::ByteString;
use serde_json::value::RawValue;

use crate::close::CloseCode;
use crate::envelope::{ErrorObject, Message, Payload, Text, WireId};
use crate::error::{ErrorKind, GatewayError, Side};

use holon::client::HolonClient;
use holon::upstream::HolonUpstream;
use jsonrpc::{
    decode_upstream_in, render_batch, render_exact, render_scratch, JsonRpcClient, JsonRpcUpstream,
    NotJson, ReplyError, Style,
};
use link::{
    not_json, parse_gateway_id, Decoded, Event, Farewell, Fault, Framing, Handshake, Liveness,
    NotificationRule, Options, Scratch,
};
use sideband::client::SidebandClient;
use sideband::upstream::SidebandUpstream;

pub mod errors;
pub mod holon;
pub(crate) mod json_string;
pub mod jsonrpc;
pub mod jsonrpc_http;
pub(crate) mod link;
pub mod sideband;

/// What one inbound client frame (a text frame or line, or a Sideband
/// binary frame) asks of the connection, as the client's codec decoded it.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    /// One message (or one invalid item).
    Single(Item),
    /// A batch of items, in order (JSON-RPC and NDJSON only).
    Batch(Vec<Item>),
    /// The whole text is rejected with this single error reply (parse error,
    /// empty batch, over-limit batch). The connection stays open.
    Rejected(Message),
    /// Nothing for the connection to do (a Sideband Pong or Ack, the
    /// peer's handshake, an invalid envelope with nothing to answer).
    Nothing,
    /// Send this frame and carry on (a Sideband Pong, an ErrorFrame, an
    /// `E` 1100 to an envelope whose cid could be read).
    Answer(Vec<u8>),
    /// The frame was dropped for this reason (counted).
    Dropped(sideband::dropped::SbpDrop),
    /// The peer reported an error about one of its frames (a Sideband
    /// ErrorFrame): logged and counted, nothing answered.
    PeerError {
        /// The peer's code.
        code: u16,
        /// The peer's message.
        message: String,
    },
    /// The frame is fatal: send `last` (if any), then close the
    /// connection with `code` and `reason` (holon-rpc: malformed JSON, no
    /// usable id; Sideband: a failed negotiation, an invalid frame, the
    /// peer's Control Close).
    Close {
        /// A last frame to send before the close (Sideband).
        last: Option<Vec<u8>>,
        /// The WebSocket close code.
        code: CloseCode,
        /// The close reason.
        reason: Cow<'static, str>,
    },
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

/// What a message over the size limit gets before close 1009. Its fields
/// are public: it is a plain answer the session takes apart.
#[derive(Debug, Clone, PartialEq)]
pub struct Oversize {
    /// The error reply to send first, if the dialect has one.
    pub reply: Option<Message>,
    /// The close frame's reason.
    pub reason: &'static str,
}

/// One item of an inbound text.
#[derive(Debug, PartialEq, Eq)]
pub enum Item {
    /// A well-formed message.
    Valid(Message),
    /// An invalid item, answered in place with this error reply.
    Invalid(Message),
    /// A reply-shaped item that breaks the dialect's rules (holon-rpc): it
    /// settles the pending push with this id, and is counted.
    BadReply(crate::envelope::WireId),
}

/// The RPC dialects switchyard speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// JSON-RPC 2.0 in WebSocket text frames.
    JsonRpc,
    /// JSON-RPC 2.0, one compact JSON text per line, over a Unix socket.
    Ndjson,
    /// holon-rpc envelopes over WebSocket (subprotocol `holon-rpc`).
    Holon,
    /// Sideband binary frames over WebSocket.
    Sideband,
    /// JSON-RPC 2.0 over HTTP: one request, notification or batch per
    /// `POST` body (see [`jsonrpc_http`]).
    JsonRpcHttp,
}

/// The families of error codes (error-codes.md): a new dialect joins one
/// in [`Dialect::error_codes`], and only a dialect with codes of its own
/// adds a family (the compiler then lists every `match` in [`errors`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCodes {
    /// JSON-RPC 2.0 codes (Appendix C): JSON-RPC over WebSocket and HTTP,
    /// NDJSON.
    JsonRpc,
    /// holon-rpc: JSON-RPC shapes, its own gRPC-style codes.
    Holon,
    /// Sideband's `E` codes (1100, 1101, 1103, 2000 and above).
    Sideband,
}

/// How many dialects there are: the length of a table indexed by
/// [`Dialect::index`].
pub const COUNT: usize = Dialect::ALL.len();

// === impl Inbound ===

impl Inbound {
    /// A fatal frame: close with `code` and `reason`, nothing sent first.
    pub const fn close(code: CloseCode, reason: &'static str) -> Self {
        Inbound::Close {
            last: None,
            code,
            reason: Cow::Borrowed(reason),
        }
    }
}

// === impl Dialect ===

impl Dialect {
    /// Every dialect, for exhaustive tests and config messages.
    pub const ALL: [Dialect; 5] = [
        Dialect::JsonRpc,
        Dialect::Ndjson,
        Dialect::Holon,
        Dialect::Sideband,
        Dialect::JsonRpcHttp,
    ];

    /// The dialect's place in [`ALL`](Self::ALL), below [`COUNT`], for
    /// tables indexed by dialect (the metrics' per-label caches).
    pub const fn index(self) -> usize {
        match self {
            Dialect::JsonRpc => 0,
            Dialect::Ndjson => 1,
            Dialect::Holon => 2,
            Dialect::Sideband => 3,
            Dialect::JsonRpcHttp => 4,
        }
    }

    /// Stable name, used in config and metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Dialect::JsonRpc => "jsonrpc-ws",
            Dialect::Ndjson => "ndjson",
            Dialect::Holon => "holon-rpc",
            Dialect::Sideband => "sideband",
            Dialect::JsonRpcHttp => "jsonrpc-http",
        }
    }

    /// The OpenTelemetry `rpc.system` value.
    pub const fn rpc_system(self) -> &'static str {
        match self {
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::JsonRpcHttp => "jsonrpc",
            Dialect::Holon => "holon-rpc",
            Dialect::Sideband => "sideband",
        }
    }

    /// How this dialect's texts are rendered, on either side (Sideband
    /// envelopes carry JSON-RPC shapes in frame style): the one table of
    /// dialect to style.
    pub const fn style(self) -> Style {
        match self {
            Dialect::Ndjson => Style::Line,
            Dialect::Holon => Style::Holon,
            Dialect::JsonRpc | Dialect::Sideband | Dialect::JsonRpcHttp => Style::Frame,
        }
    }

    /// The family of error codes this dialect writes and reads: the one
    /// table of dialect to error codes ([`errors`] matches on the family,
    /// never on a dialect).
    pub const fn error_codes(self) -> ErrorCodes {
        match self {
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::JsonRpcHttp => ErrorCodes::JsonRpc,
            Dialect::Holon => ErrorCodes::Holon,
            Dialect::Sideband => ErrorCodes::Sideband,
        }
    }

    /// True for dialects carried over WebSocket.
    pub const fn is_websocket(self) -> bool {
        match self {
            Dialect::JsonRpc | Dialect::Holon | Dialect::Sideband => true,
            Dialect::Ndjson | Dialect::JsonRpcHttp => false,
        }
    }

    /// True for dialects served on a TCP address and path (WebSocket and
    /// HTTP), false for the Unix-socket one.
    pub const fn on_tcp(self) -> bool {
        match self {
            Dialect::JsonRpc | Dialect::Holon | Dialect::Sideband | Dialect::JsonRpcHttp => true,
            Dialect::Ndjson => false,
        }
    }

    /// True for JSON-RPC over HTTP: requests are `POST` bodies, not
    /// frames of an upgraded connection.
    pub const fn is_http(self) -> bool {
        match self {
            Dialect::JsonRpcHttp => true,
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::Holon | Dialect::Sideband => false,
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown dialect name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown dialect {0:?} (expected one of: jsonrpc-ws, ndjson, holon-rpc, sideband, jsonrpc-http)"
)]
pub struct UnknownDialect(pub String);

impl FromStr for Dialect {
    type Err = UnknownDialect;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jsonrpc-ws" | "jsonrpc" => Ok(Dialect::JsonRpc),
            "ndjson" => Ok(Dialect::Ndjson),
            "holon-rpc" | "holon" => Ok(Dialect::Holon),
            "sideband" => Ok(Dialect::Sideband),
            "jsonrpc-http" => Ok(Dialect::JsonRpcHttp),
            other => Err(UnknownDialect(other.to_owned())),
        }
    }
}

/// One client connection's dialect: its codec, and the state the dialect
/// keeps per connection.
///
/// One per connection, in the outbox's shared state: the Sideband session
/// (hundreds of bytes) is boxed, so that a connection of another dialect
/// does not hold room for it.
#[derive(Debug)]
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
    Sideband(Box<SidebandClient>),
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
        Dialect::Holon => holon::client::subprotocol(offered),
        Dialect::Sideband => sideband::client::subprotocol(offered),
        Dialect::Ndjson | Dialect::JsonRpcHttp => None,
    }
}

// === impl ClientCodec ===

impl ClientCodec {
    /// The codec of a fresh connection to a `dialect` listener; a Sideband
    /// session starts as `sideband` says.
    pub fn new(dialect: Dialect, sideband: sideband::client::Options) -> Self {
        match dialect {
            Dialect::JsonRpc => ClientCodec::JsonRpc(JsonRpcClient::WS),
            Dialect::Ndjson => ClientCodec::Ndjson(JsonRpcClient::LINES),
            Dialect::JsonRpcHttp => ClientCodec::JsonRpcHttp(JsonRpcClient::HTTP),
            Dialect::Holon => ClientCodec::Holon(HolonClient),
            Dialect::Sideband => ClientCodec::Sideband(Box::new(SidebandClient::new(sideband))),
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
    pub fn decode_text(&self, text: &Text, max_batch_items: usize) -> Inbound {
        match self {
            ClientCodec::JsonRpc(json)
            | ClientCodec::Ndjson(json)
            | ClientCodec::JsonRpcHttp(json) => json.decode(text, max_batch_items),
            ClientCodec::Holon(holon) => holon.decode(text),
            ClientCodec::Sideband(sb) => sb.decode_text(&text.to_line(), max_batch_items),
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
            | ClientCodec::Holon(_) => jsonrpc::push_wire_id(n),
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
        Message::error(Some(id), errors::render(err, self.dialect()))
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
            UpstreamCodec::Holon(_) => Some(holon::upstream::SUBPROTOCOL),
            UpstreamCodec::Sideband(_) => None,
        }
    }

    /// The subprotocol the upstream must echo, if the dialect requires
    /// one: a 101 without it is refused (close 1002 with this reason).
    pub(crate) fn required_subprotocol(&self) -> Option<(&'static str, &'static str)> {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Sideband(_) => None,
            UpstreamCodec::Holon(_) => Some((
                holon::upstream::SUBPROTOCOL,
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
            UpstreamCodec::Sideband(_) => sideband::upstream::refuses(code, reason),
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
            UpstreamCodec::Holon(_) => holon::upstream::parse_id(token),
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
            UpstreamCodec::Holon(_) => holon::upstream::params(params),
            UpstreamCodec::Sideband(c) => Ok(match params {
                Some(p) => Some(Cow::Borrowed(p)),
                None => c.empty_params(),
            }),
        }
    }

    /// Encodes one message.
    pub(crate) fn encode(&self, msg: &Message) -> Result<link::Frame, GatewayError> {
        match self {
            UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => {
                jsonrpc::render(msg, self.style())
                    .map(link::Frame::Text)
                    .map_err(|_| not_json())
            }
            UpstreamCodec::Sideband(c) => c.encode(msg).map(link::Frame::Binary),
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
                let taken =
                    jsonrpc::render_scratch(msg, self.style(), |text| take(Scratch::Text(text)))?;
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
        errors::render(err, self.dialect())
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
mod upstream_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_indexes_its_place_in_all() {
        for (i, d) in Dialect::ALL.into_iter().enumerate() {
            assert_eq!(d.index(), i, "{d}");
        }
        assert_eq!(COUNT, Dialect::ALL.len());
    }

    /// Every connection holds a `ClientCodec`: the Sideband session is
    /// boxed, so that a connection of another dialect holds two words for
    /// it, not the session's hundreds of bytes.
    #[test]
    fn a_client_codec_is_two_words() {
        let size = std::mem::size_of::<ClientCodec>();
        assert!(size <= 16, "ClientCodec is {size} bytes");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod client_tests {
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
        let sb =
            ClientCodec::new(Dialect::Sideband, sideband::client::Options::default()).oversize(10);
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
        let sb = ClientCodec::new(Dialect::Sideband, sideband::client::Options::default());
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
        let sb = ClientCodec::new(Dialect::Sideband, sideband::client::Options::default());
        assert!(sb.reads_binary() && sb.negotiating());
        assert!(sb.greeting().is_some() && sb.goodbye().is_some());
    }
}
