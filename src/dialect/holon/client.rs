//! The listener half of holon-rpc. No per-connection state. Pure: no
//! sockets, no tokio.

use crate::dialect::{Inbound, Oversize};
use crate::envelope::{raw_from_string, Message, Outcome, Payload, Source};
use crate::error::{ErrorKind, GatewayError};

/// The subprotocol a holon-rpc client offers (holon-rpc.md §1).
pub const SUBPROTOCOL: &str = "holon-rpc";

/// The close reason for a message over the size limit (no error reply
/// comes first).
pub const TOO_LARGE: &str = "message too large";

/// The request switchyard answers itself (holon-rpc.md §10).
pub const HEARTBEAT: &str = "rpc.heartbeat";

/// One holon-rpc client connection's codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HolonClient;

/// The subprotocol to select from a client's offers, matched
/// case-insensitively and echoed in the client's spelling, as WebBridge
/// does (browsers fail the connection unless the echo is exactly one of
/// their offers; holon-rpc.md §1, §10).
pub fn subprotocol<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    offered
        .into_iter()
        .find(|p| p.eq_ignore_ascii_case(SUBPROTOCOL))
}

// === impl HolonClient ===

impl HolonClient {
    /// Decodes one text frame.
    pub fn decode<'a>(self, text: impl Into<Source<'a>>) -> Inbound {
        super::decode(text)
    }

    /// The reply switchyard gives `msg` itself: `{}` to `rpc.heartbeat`.
    pub fn local_reply(self, msg: &Message) -> Option<Message> {
        match msg {
            Message::Request { id, method, .. } if method == HEARTBEAT => Some(Message::Response {
                id: id.clone(),
                result: Outcome::Value(Payload::Json(raw_from_string(String::from("{}")))),
            }),
            _ => None,
        }
    }

    /// A message over the size limit gets only the close.
    pub const fn oversize(self) -> Oversize {
        Oversize {
            reply: None,
            reason: TOO_LARGE,
        }
    }

    /// The params of a request switchyard pushes to the client: they must
    /// be an object (none becomes `{}`).
    pub fn push_request_params(
        self,
        params: Option<Payload>,
    ) -> Result<Option<Payload>, GatewayError> {
        super::object_params(params.as_ref())
            .map(Some)
            .ok_or_else(|| {
                GatewayError::with_detail(
                    ErrorKind::InvalidParams,
                    "params must be an object for holon-rpc clients",
                )
            })
    }

    /// The params of a notification pushed as a request (holon-rpc has no
    /// notifications, holon-rpc.md §8): anything but an object is wrapped
    /// as `{"value": …}` (`Err` carries the wrapped params, to be counted
    /// as a quirk).
    pub fn push_notification_params(
        self,
        params: Option<Payload>,
    ) -> Result<Option<Payload>, Option<Payload>> {
        match params {
            Some(p) if super::object_params(Some(&p)).is_none() => Err(super::wrap_params(&p)),
            other => Ok(other),
        }
    }
}
