//! What an upstream link and its dialect's codec ([`UpstreamCodec`])
//! say to each other: the options a codec is made with, the framing and
//! liveness it asks for, what an inbound frame means ([`Event`]), how a
//! link says goodbye ([`Farewell`]), and the gateway ids it writes.
//! Pure, like every codec; the per-dialect halves and the codec build on
//! these words.
//!
//! [`UpstreamCodec`]: super::UpstreamCodec

use std::borrow::Cow;

use super::sideband::session::SbpDrop;
use crate::close::CloseCode;
use crate::envelope::{Kind, Message, Method, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};

/// Largest gateway id; past it the counter wraps to 1. Safe in a float64
/// (2^53), so a JSON round trip through an upstream never changes it.
pub const MAX_GATEWAY_ID: u64 = (1 << 53) - 1;

/// What an upstream's configuration says about its wire.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Offer the `jsonrpc` subprotocol (JSON-RPC WebSocket upstreams).
    pub(crate) offer_subprotocol: bool,
    /// Send `{}` for absent params (most hld handlers fail without).
    pub(crate) fill_empty_params: bool,
}

/// How a link's messages are framed on its transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One text per `\n`-ended line (NDJSON over a Unix socket).
    Line,
    /// WebSocket text frames.
    Text,
    /// WebSocket binary frames.
    Binary,
}

/// How a WebSocket link learns that its upstream is alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// WebSocket pings; silence for a ping interval plus the pong timeout
    /// closes the link.
    Ping,
    /// holon `rpc.heartbeat` requests; one unanswered for the heartbeat
    /// timeout closes the link (4000).
    Heartbeat,
}

/// What a client notification becomes on this upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotificationRule {
    /// Sent as a notification, params an array or an object (anything
    /// else wrapped as `{"value": …}`).
    Structured,
    /// Sent as a notification, params as they are.
    AsIs,
    /// Sent as a request whose reply is dropped (no notifications on the
    /// wire), params an object (anything else wrapped).
    AsRequest,
}

/// One encoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A text (an NDJSON line without `\n`, or a text frame).
    Text(String),
    /// A binary frame.
    Binary(Vec<u8>),
}

/// A message encoded in a per-thread scratch buffer, handed over to be
/// copied where it goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scratch<'a> {
    /// A text frame.
    Text(&'a str),
    /// A binary frame.
    Binary(&'a [u8]),
}

/// What an inbound frame means for the link.
#[derive(Debug)]
pub(crate) enum Event {
    /// A reply (response or error) naming one of our gateway ids (`None`:
    /// an id that is none of ours).
    Reply {
        /// The gateway id it settles.
        gid: Option<u64>,
        /// The reply, still carrying its wire id.
        reply: Message,
    },
    /// A reply without a usable id: an error applies to the oldest call
    /// (ordered links) or batch; a response settles nothing.
    NoId {
        /// The reply.
        reply: Message,
        /// True inside a batch reply (a batch-wide error is a lone one).
        in_batch: bool,
    },
    /// A request the upstream originates.
    Request {
        /// Its upstream id, for the answer.
        id: WireId,
        /// The method.
        method: Method,
        /// Its params.
        params: Option<Payload>,
    },
    /// A notification the upstream originates.
    Notification {
        /// The method.
        method: Method,
        /// Its params.
        params: Option<Payload>,
    },
    /// A message answered here and not passed on (an upstream's
    /// `rpc.heartbeat` request): send this reply.
    Answer(Message),
    /// The reply to our heartbeat: the link is alive.
    Alive(Kind),
    /// A reply that fails its call with `error` (unreadable, or the
    /// peer's error frame about it); `fault` is counted when set.
    Failed {
        /// The gateway id it settles.
        gid: Option<u64>,
        /// What the call gets.
        error: GatewayError,
        /// The protocol error to count, if it is one.
        fault: Option<Fault>,
    },
    /// A frame that settles nothing: counted, and `reply` sent if set.
    Fault {
        /// What was wrong.
        fault: Fault,
        /// The answer to send back, if the dialect has one.
        reply: Option<Vec<u8>>,
    },
    /// A session frame to send back at once.
    Send(Vec<u8>),
    /// A frame the session dropped (counted).
    Dropped(SbpDrop),
    /// The session ends: close the link with this goodbye.
    Close(Farewell),
}

/// What a binary frame of a session (Sideband) means.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// Nothing for the link (a pong, an ack, the handshake's end).
    Nothing,
    /// An event.
    Event(Event),
    /// A message, to correlate ([`UpstreamCodec::event`]).
    ///
    /// [`UpstreamCodec::event`]: super::UpstreamCodec::event
    Message(Message),
}

/// A protocol error in what an upstream sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Not a message of the dialect.
    InvalidMessage,
    /// A reply to one of our calls that cannot be read.
    InvalidReply,
    /// A Sideband envelope that cannot be read and settles nothing.
    InvalidEnvelope,
    /// A Sideband ErrorFrame about no request of ours.
    PeerErrorFrame,
}

/// What a handshake frame from the upstream did.
#[derive(Debug)]
pub(crate) enum Handshake {
    /// The session is ready: the link may carry messages.
    Ready,
    /// Not done yet: read on.
    More,
    /// Refused: send `farewell` and fail the dial.
    Refused(Farewell),
}

/// What the writer sends last when a link closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Farewell {
    /// A last frame (Sideband: a Control Close, or an ErrorFrame), if any.
    pub(crate) frame: Option<Vec<u8>>,
    /// The WebSocket close code.
    pub(crate) code: CloseCode,
    /// The WebSocket close reason.
    pub(crate) reason: Cow<'static, str>,
}

// === impl Farewell ===

impl Farewell {
    /// A close without a last frame.
    pub(crate) fn plain(code: CloseCode, reason: impl Into<Cow<'static, str>>) -> Self {
        Farewell {
            frame: None,
            code,
            reason: reason.into(),
        }
    }
}

/// Reads a gateway id back from a reply's raw id token. Accepts the float
/// spellings a float64 round trip produces (`3.0`, `3e0`).
pub fn parse_gateway_id(token: &str) -> Option<u64> {
    if let Ok(n) = token.parse::<u64>() {
        return Some(n);
    }
    let f: f64 = token.parse().ok()?;
    (f.fract() == 0.0 && f >= 1.0 && f <= MAX_GATEWAY_ID as f64).then_some(f as u64)
}

/// Params that cannot be rendered as JSON.
pub(crate) fn not_json() -> GatewayError {
    GatewayError::with_detail(ErrorKind::InvalidParams, "params cannot be carried as JSON")
}
