//! The `reason` labels of `switchyard_protocol_errors_total` and
//! `switchyard_dropped_messages_total`: closed sets, each value with the
//! sides that report it, so that [`Metrics::init_labels`] creates exactly
//! the series that can move.
//!
//! [`Metrics::init_labels`]: super::Metrics::init_labels

use super::Metrics;
use crate::dialect::sideband::session::SbpDrop;
use crate::dialect::Dialect;
use crate::error::{ErrorKind, Side};

/// Why a peer's input was malformed (answered or fatal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolError {
    /// Not a message of the dialect (not JSON, not an envelope).
    InvalidMessage,
    /// A client's request envelope is invalid (answered `invalid_request`).
    InvalidRequest,
    /// A client's reply to a pushed request is invalid.
    InvalidResponse,
    /// A reply to one of our calls that cannot be read (settles it).
    InvalidReply,
    /// A Sideband envelope that cannot be read and settles nothing.
    InvalidEnvelope,
    /// A reply above the upstream's `max_response_bytes`.
    ResponseTooLarge,
    /// A client message above the listener's `max_message_bytes`.
    MessageTooLarge,
    /// A reply out of order on an ordered connection.
    OutOfOrder,
    /// A text frame where binary frames were expected.
    TextFrame,
    /// A binary frame where text frames were expected.
    BinaryFrame,
    /// A Sideband ErrorFrame about no request of ours.
    PeerErrorFrame,
    /// A Sideband frame the session refused; the session lives on.
    RejectedMessage,
    /// A Sideband frame that ends the session.
    FatalMessage,
    /// A Sideband frame that ends the connection.
    FatalFrame,
    /// A client that stopped reading and was closed.
    SlowConsumer,
    /// A WebSocket frame that breaks RFC 6455 (reserved bits or opcode,
    /// bad fragmentation or control frame, a text message that is not
    /// UTF-8): the connection is failed with 1002 or 1007.
    BrokenFrame,
}

/// Why a message was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The client's outbox was full.
    SlowConsumer,
    /// A push has no form in the client's dialect.
    Untranslatable,
    /// A push the client could not take (its window or outbox was full).
    PushRejected,
    /// A holon-rpc client had `max_unanswered_pushes` pushes unanswered.
    PushWindow,
    /// A client notification for a method no route serves.
    NoRoute,
    /// A client notification the listener's method policy refuses.
    Forbidden,
    /// A client notification over a rate limit.
    RateLimited,
    /// A client notification the upstream did not take, by the error's kind.
    Undelivered(ErrorKind),
    /// An upstream notification in error form.
    NotificationError,
    /// An upstream notification on a shared connection with publishing off.
    NoSubscriber,
    /// An event whose topic is not valid.
    InvalidTopic,
    /// A line of a stream that is no event.
    StreamLine,
    /// An oversize reply that settles no call.
    ResponseTooLarge,
    /// The upstream's write queue was full.
    UpstreamQueueFull,
    /// A reply for a client that has gone.
    ClientGone,
    /// An upstream-originated request on a shared connection.
    UpstreamRequest,
    /// A Sideband frame the session dropped.
    Sideband(SbpDrop),
}

// === impl Metrics ===

impl Metrics {
    /// Counts malformed input from a `side` peer speaking `dialect`.
    pub fn count_protocol_error(&self, dialect: Dialect, side: Side, reason: ProtocolError) {
        let labels = [dialect.as_str(), side.as_str(), reason.as_str()];
        self.protocol_errors.with_label_values(&labels).inc();
    }

    /// Counts a message from or for a `side` peer that was not delivered.
    pub fn count_dropped(&self, dialect: Dialect, side: Side, reason: DropReason) {
        let labels = [dialect.as_str(), side.as_str(), reason.as_str()];
        self.dropped_messages.with_label_values(&labels).inc();
    }
}

// === impl ProtocolError ===

impl ProtocolError {
    /// Every reason, for label initialisation.
    pub const ALL: [ProtocolError; 16] = [
        ProtocolError::InvalidMessage,
        ProtocolError::InvalidRequest,
        ProtocolError::InvalidResponse,
        ProtocolError::InvalidReply,
        ProtocolError::InvalidEnvelope,
        ProtocolError::ResponseTooLarge,
        ProtocolError::MessageTooLarge,
        ProtocolError::OutOfOrder,
        ProtocolError::TextFrame,
        ProtocolError::BinaryFrame,
        ProtocolError::PeerErrorFrame,
        ProtocolError::RejectedMessage,
        ProtocolError::FatalMessage,
        ProtocolError::FatalFrame,
        ProtocolError::SlowConsumer,
        ProtocolError::BrokenFrame,
    ];

    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProtocolError::InvalidMessage => "invalid_message",
            ProtocolError::InvalidRequest => "invalid_request",
            ProtocolError::InvalidResponse => "invalid_response",
            ProtocolError::InvalidReply => "invalid_reply",
            ProtocolError::InvalidEnvelope => "invalid_envelope",
            ProtocolError::ResponseTooLarge => "response_too_large",
            ProtocolError::MessageTooLarge => "message_too_large",
            ProtocolError::OutOfOrder => "out_of_order",
            ProtocolError::TextFrame => "text_frame",
            ProtocolError::BinaryFrame => "binary_frame",
            ProtocolError::PeerErrorFrame => "peer_error_frame",
            ProtocolError::RejectedMessage => "rejected_message",
            ProtocolError::FatalMessage => "fatal_message",
            ProtocolError::FatalFrame => "fatal_frame",
            ProtocolError::SlowConsumer => "slow_consumer",
            ProtocolError::BrokenFrame => "broken_frame",
        }
    }

    /// True when `side` can report it.
    pub const fn seen_on(self, side: Side) -> bool {
        match self {
            ProtocolError::InvalidMessage
            | ProtocolError::InvalidReply
            | ProtocolError::InvalidEnvelope
            | ProtocolError::ResponseTooLarge
            | ProtocolError::OutOfOrder => matches!(side, Side::Upstream),
            ProtocolError::TextFrame
            | ProtocolError::BinaryFrame
            | ProtocolError::PeerErrorFrame => !matches!(side, Side::Internal),
            ProtocolError::InvalidRequest
            | ProtocolError::InvalidResponse
            | ProtocolError::MessageTooLarge
            | ProtocolError::RejectedMessage
            | ProtocolError::FatalMessage
            | ProtocolError::FatalFrame
            | ProtocolError::SlowConsumer
            | ProtocolError::BrokenFrame => matches!(side, Side::Client),
        }
    }
}

// === impl DropReason ===

impl DropReason {
    /// Every reason, for label initialisation (`Undelivered` with the
    /// kinds a notification can fail with).
    pub const ALL: [DropReason; 25] = [
        DropReason::SlowConsumer,
        DropReason::Untranslatable,
        DropReason::PushRejected,
        DropReason::PushWindow,
        DropReason::NoRoute,
        DropReason::Forbidden,
        DropReason::RateLimited,
        DropReason::Undelivered(ErrorKind::Unavailable),
        DropReason::Undelivered(ErrorKind::ResourceExhausted),
        DropReason::Undelivered(ErrorKind::Timeout),
        DropReason::Undelivered(ErrorKind::InvalidParams),
        DropReason::Undelivered(ErrorKind::Internal),
        DropReason::Undelivered(ErrorKind::MethodNotFound),
        DropReason::NotificationError,
        DropReason::NoSubscriber,
        DropReason::InvalidTopic,
        DropReason::StreamLine,
        DropReason::ResponseTooLarge,
        DropReason::UpstreamQueueFull,
        DropReason::ClientGone,
        DropReason::UpstreamRequest,
        DropReason::Sideband(SbpDrop::DuplicateFrame),
        DropReason::Sideband(SbpDrop::AppSubject),
        DropReason::Sideband(SbpDrop::EnvelopeSubjectMismatch),
        DropReason::Sideband(SbpDrop::InvalidEventEnvelope),
    ];

    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            DropReason::SlowConsumer => "slow_consumer",
            DropReason::Untranslatable => "untranslatable",
            DropReason::PushRejected => "push_rejected",
            DropReason::PushWindow => "push_window",
            DropReason::NoRoute => "no_route",
            DropReason::Forbidden => "forbidden",
            DropReason::RateLimited => "rate_limited",
            DropReason::Undelivered(kind) => kind.as_str(),
            DropReason::NotificationError => "notification_error",
            DropReason::NoSubscriber => "no_subscriber",
            DropReason::InvalidTopic => "invalid_topic",
            DropReason::StreamLine => "stream_line",
            DropReason::ResponseTooLarge => "response_too_large",
            DropReason::UpstreamQueueFull => "upstream_queue_full",
            DropReason::ClientGone => "client_gone",
            DropReason::UpstreamRequest => "upstream_request",
            DropReason::Sideband(drop) => drop.as_str(),
        }
    }

    /// True when `side` can report it.
    pub const fn seen_on(self, side: Side) -> bool {
        match self {
            DropReason::SlowConsumer
            | DropReason::Untranslatable
            | DropReason::PushRejected
            | DropReason::PushWindow
            | DropReason::NoRoute
            | DropReason::Forbidden
            | DropReason::RateLimited
            | DropReason::Undelivered(_) => matches!(side, Side::Client),
            DropReason::NotificationError
            | DropReason::NoSubscriber
            | DropReason::InvalidTopic
            | DropReason::StreamLine
            | DropReason::ResponseTooLarge
            | DropReason::UpstreamQueueFull
            | DropReason::ClientGone
            | DropReason::UpstreamRequest => matches!(side, Side::Upstream),
            DropReason::Sideband(_) => !matches!(side, Side::Internal),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_distinct_and_every_reason_has_a_side() {
        let mut errors: Vec<&str> = ProtocolError::ALL.iter().map(|r| r.as_str()).collect();
        errors.sort_unstable();
        errors.dedup();
        assert_eq!(errors.len(), ProtocolError::ALL.len());
        let mut drops: Vec<&str> = DropReason::ALL.iter().map(|r| r.as_str()).collect();
        drops.sort_unstable();
        drops.dedup();
        assert_eq!(drops.len(), DropReason::ALL.len());
        for r in ProtocolError::ALL {
            assert!(
                r.seen_on(Side::Client) || r.seen_on(Side::Upstream),
                "{r:?}"
            );
        }
        for r in DropReason::ALL {
            assert!(
                r.seen_on(Side::Client) || r.seen_on(Side::Upstream),
                "{r:?}"
            );
        }
    }
}
