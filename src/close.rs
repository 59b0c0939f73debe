//! The WebSocket close codes switchyard sends (RFC 6455 §7.4, plus the
//! holon-rpc heartbeat code), as one closed set instead of bare numbers.
//!
//! Imports nothing from the crate: every layer may use it. Codes received
//! from a peer stay plain `u16` (a peer may send any code).

/// A close code switchyard sends on a WebSocket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum CloseCode {
    /// 1000: normal closure (also Sideband's refused or ended session).
    Normal = 1000,
    /// 1001: going away (shutdown, lifetime or idle limit, upstream lost).
    GoingAway = 1001,
    /// 1002: protocol error (an unusable holon-rpc or Sideband message).
    ProtocolError = 1002,
    /// 1003: a frame type the dialect does not accept.
    Unsupported = 1003,
    /// 1007: a text message that is not UTF-8.
    InvalidPayload = 1007,
    /// 1008: policy violation (connection cap, rate limit, slow consumer).
    PolicyViolation = 1008,
    /// 1009: a message above `max_message_bytes`.
    TooBig = 1009,
    /// 4000: a holon-rpc heartbeat went unanswered.
    HeartbeatTimeout = 4000,
}

// === impl CloseCode ===

impl CloseCode {
    /// The code on the wire.
    pub const fn as_u16(self) -> u16 {
        self as u16
    }

    /// The code for `code`, if switchyard sends it.
    pub const fn from_u16(code: u16) -> Option<Self> {
        Some(match code {
            1000 => CloseCode::Normal,
            1001 => CloseCode::GoingAway,
            1002 => CloseCode::ProtocolError,
            1003 => CloseCode::Unsupported,
            1007 => CloseCode::InvalidPayload,
            1008 => CloseCode::PolicyViolation,
            1009 => CloseCode::TooBig,
            4000 => CloseCode::HeartbeatTimeout,
            _ => return None,
        })
    }

    /// True for a close that ends a connection in good order (1000, 1001).
    pub const fn is_orderly(self) -> bool {
        matches!(self, CloseCode::Normal | CloseCode::GoingAway)
    }
}

impl From<CloseCode> for u16 {
    fn from(code: CloseCode) -> u16 {
        code.as_u16()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_numbers() {
        for code in [
            CloseCode::Normal,
            CloseCode::GoingAway,
            CloseCode::ProtocolError,
            CloseCode::Unsupported,
            CloseCode::PolicyViolation,
            CloseCode::TooBig,
            CloseCode::HeartbeatTimeout,
        ] {
            assert_eq!(CloseCode::from_u16(code.as_u16()), Some(code));
        }
        assert_eq!(CloseCode::PolicyViolation.as_u16(), 1008);
        assert_eq!(CloseCode::from_u16(1005), None);
    }
}
