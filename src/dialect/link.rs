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
///
/// The ids switchyard writes come back as plain digits, read by one loop
/// over at most 19 of them (below 10^19 < 2^64: no overflow, the value
/// `u64`'s parse gives); any other token takes the parses.
pub fn parse_gateway_id(token: &str) -> Option<u64> {
    let bytes = token.as_bytes();
    if (1..=19).contains(&bytes.len()) {
        let mut n = 0u64;
        let mut digits = true;
        for &b in bytes {
            let d = b.wrapping_sub(b'0');
            digits &= d < 10;
            n = n.wrapping_mul(10).wrapping_add(u64::from(d));
        }
        if digits {
            return Some(n);
        }
    }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{parse_gateway_id, MAX_GATEWAY_ID};

    /// The parses alone: what [`parse_gateway_id`] gave before its digit
    /// loop, its oracle.
    fn by_parse(token: &str) -> Option<u64> {
        if let Ok(n) = token.parse::<u64>() {
            return Some(n);
        }
        let f: f64 = token.parse().ok()?;
        (f.fract() == 0.0 && f >= 1.0 && f <= MAX_GATEWAY_ID as f64).then_some(f as u64)
    }

    #[test]
    fn gateway_ids_at_the_digit_loops_edges() {
        for token in [
            "",
            "0",
            "7",
            "+7",
            "-7",
            "07",
            "3.0",
            "3e0",
            " 3",
            "3 ",
            "/",
            ":",
            "9999999999999999999",
            "18446744073709551615",
            "18446744073709551616",
            "00000000000000000001",
            "9007199254740991",
            "9007199254740992.0",
        ] {
            assert_eq!(parse_gateway_id(token), by_parse(token), "{token:?}");
        }
    }

    proptest! {
        #[test]
        fn gateway_ids_read_as_the_parses_read_them(
            token in "[0-9]{1,21}|[-+0-9./:eE ]{0,22}|\\PC{0,8}",
        ) {
            prop_assert_eq!(parse_gateway_id(&token), by_parse(&token));
        }

        #[test]
        fn every_u64_reads_back(n in any::<u64>()) {
            prop_assert_eq!(parse_gateway_id(&n.to_string()), Some(n));
        }
    }
}
