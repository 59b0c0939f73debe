//! The closed label sets of the metrics switchyard adds for traffic, limits
//! and connection refusals. Each value has a stable `as_str`; nothing
//! user-controlled ever becomes one of these labels.

use crate::error::ErrorKind;

/// Which way a message travels, seen from switchyard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Read by switchyard (from a client or an upstream).
    In,
    /// Written by switchyard.
    Out,
}

/// Why a client connection was refused before it became a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// A connection cap was reached (reserved for the connection limit).
    Limit,
    /// The gateway is shutting down and accepts nothing new.
    Draining,
    /// The WebSocket upgrade was refused (not an upgrade, wrong
    /// subprotocol, bad headers).
    Handshake,
    /// `Host` not allowed (DNS-rebinding defence).
    Host,
    /// `Origin` not allowed, or `null`.
    Origin,
    /// Missing or wrong bearer token.
    Token,
}

/// A configured limit that refused something. Label values are the config
/// key names, so an operator can find the knob from the alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// `listeners.*.max_message_bytes`: an inbound message too large.
    MaxMessageBytes,
    /// `listeners.*.max_batch_items`: a batch with too many items.
    MaxBatchItems,
    /// `listeners.*.max_in_flight`: too many requests on one connection.
    MaxInFlight,
    /// `listeners.*.max_unanswered_pushes`: too many unanswered pushes.
    MaxUnansweredPushes,
    /// `upstreams.*.max_pending` (and its wait queue, `max_queued`): the
    /// upstream is saturated.
    MaxPending,
    /// `upstreams.*.max_request_bytes`: a request too large for the upstream.
    MaxRequestBytes,
    /// `listeners.*.rate_per_second`: the connection's message rate.
    RatePerSecond,
    /// `listeners.*.ip_rate_per_second`: the client IP's message rate.
    IpRatePerSecond,
    /// `listeners.*.clients[].rate_per_second`: a named client's message
    /// rate.
    ClientRatePerSecond,
    /// `listeners.*.global_rate_per_second`: the listener's message rate.
    GlobalRatePerSecond,
    /// `listeners.*.slow_consumer_timeout_ms`: a client that stopped reading.
    SlowConsumer,
}

/// How a request was settled (`outcome` of `switchyard_requests_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestOutcome {
    /// The upstream's result.
    Ok,
    /// The upstream's own error, passed through.
    UpstreamError,
    /// Refused by the listener's method policy.
    Forbidden,
    /// switchyard answered with its own error of this kind.
    Error(ErrorKind),
}

/// Why a reply matched no pending id (`kind` of
/// `switchyard_unmatched_responses_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unmatched {
    /// An id never issued (or already forgotten).
    Unknown,
    /// A second reply for a settled id.
    Duplicate,
    /// A reply for a call that timed out or whose client left.
    Stale,
    /// A reply without an id.
    NoId,
}

/// A tolerated deviation of a real peer (`quirk` of
/// `switchyard_peer_quirks_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quirk {
    /// Params that were neither an array nor an object, wrapped.
    ParamsWrapped,
}

/// A WebSocket close code as a label from a closed set (anything
/// unusual is `other`).
pub fn close_code(code: u16) -> &'static str {
    match code {
        1000 => "1000",
        1001 => "1001",
        1002 => "1002",
        1003 => "1003",
        1005 => "1005",
        1006 => "1006",
        1007 => "1007",
        1008 => "1008",
        1009 => "1009",
        1011 => "1011",
        1012 => "1012",
        4000 => "4000",
        _ => "other",
    }
}

// === impl Direction ===

impl Direction {
    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
}

// === impl RejectReason ===

impl RejectReason {
    /// Every reason, for label initialisation.
    pub const ALL: [RejectReason; 6] = [
        RejectReason::Limit,
        RejectReason::Draining,
        RejectReason::Handshake,
        RejectReason::Host,
        RejectReason::Origin,
        RejectReason::Token,
    ];

    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            RejectReason::Limit => "limit",
            RejectReason::Draining => "draining",
            RejectReason::Handshake => "handshake",
            RejectReason::Host => "host",
            RejectReason::Origin => "origin",
            RejectReason::Token => "token",
        }
    }
}

// === impl RequestOutcome ===

impl RequestOutcome {
    /// The outcomes whose series exist from the start: those a failing
    /// upstream produces.
    pub const INITIAL: [RequestOutcome; 6] = [
        RequestOutcome::Ok,
        RequestOutcome::UpstreamError,
        RequestOutcome::Error(ErrorKind::Timeout),
        RequestOutcome::Error(ErrorKind::Unavailable),
        RequestOutcome::Error(ErrorKind::ResourceExhausted),
        RequestOutcome::Error(ErrorKind::Internal),
    ];

    /// Stable label value (an error's kind name).
    pub const fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Ok => "ok",
            RequestOutcome::UpstreamError => "upstream_error",
            RequestOutcome::Forbidden => "forbidden",
            RequestOutcome::Error(kind) => kind.as_str(),
        }
    }
}

// === impl Unmatched ===

impl Unmatched {
    /// Every kind, for label initialisation.
    pub const ALL: [Unmatched; 4] = [
        Unmatched::Unknown,
        Unmatched::Duplicate,
        Unmatched::Stale,
        Unmatched::NoId,
    ];

    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Unmatched::Unknown => "unknown",
            Unmatched::Duplicate => "duplicate",
            Unmatched::Stale => "stale",
            Unmatched::NoId => "no_id",
        }
    }
}

// === impl Quirk ===

impl Quirk {
    /// Every quirk, for label initialisation.
    pub const ALL: [Quirk; 1] = [Quirk::ParamsWrapped];

    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Quirk::ParamsWrapped => "params_wrapped",
        }
    }
}

// === impl Limit ===

impl Limit {
    /// Every limit, for label initialisation.
    pub const ALL: [Limit; 11] = [
        Limit::MaxMessageBytes,
        Limit::MaxBatchItems,
        Limit::MaxInFlight,
        Limit::MaxUnansweredPushes,
        Limit::MaxPending,
        Limit::MaxRequestBytes,
        Limit::RatePerSecond,
        Limit::IpRatePerSecond,
        Limit::ClientRatePerSecond,
        Limit::GlobalRatePerSecond,
        Limit::SlowConsumer,
    ];

    /// Stable label value: the config key.
    pub const fn as_str(self) -> &'static str {
        match self {
            Limit::MaxMessageBytes => "max_message_bytes",
            Limit::MaxBatchItems => "max_batch_items",
            Limit::MaxInFlight => "max_in_flight",
            Limit::MaxUnansweredPushes => "max_unanswered_pushes",
            Limit::MaxPending => "max_pending",
            Limit::MaxRequestBytes => "max_request_bytes",
            Limit::RatePerSecond => "rate_per_second",
            Limit::IpRatePerSecond => "ip_rate_per_second",
            Limit::ClientRatePerSecond => "clients.rate_per_second",
            Limit::GlobalRatePerSecond => "global_rate_per_second",
            Limit::SlowConsumer => "slow_consumer_timeout_ms",
        }
    }
}
