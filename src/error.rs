//! switchyard's own errors: one closed list of kinds, rendered per dialect
//! by [`crate::dialect::errors`], where every error code lives.
//!
//! Upstream errors are never reinterpreted (codes in -32000…-32099 mean
//! different things to different applications); only errors switchyard
//! itself originates are built from an [`ErrorKind`]. The mapping follows
//! `error-codes.md` §2.

/// The kinds of error switchyard originates. A closed set: also a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The client sent invalid JSON.
    ParseError,
    /// The client's envelope is invalid.
    InvalidRequest,
    /// No route for the method, or an unknown `rpc.*` method.
    MethodNotFound,
    /// The target cannot carry the params.
    InvalidParams,
    /// A switchyard fault or an invalid upstream reply.
    Internal,
    /// Token or method allow-list refused.
    Unauthorized,
    /// Unknown persistent subscription.
    NotFound,
    /// Persistent subscription held elsewhere.
    Conflict,
    /// A rate limit was hit.
    RateLimited,
    /// A pending cap, a full queue, or a message too large for the upstream.
    ResourceExhausted,
    /// No upstream reply within the request timeout.
    Timeout,
    /// Upstream down, link lost mid-call, or shutting down.
    Unavailable,
}

/// Which side caused an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// A client of switchyard.
    Client,
    /// An upstream switchyard connects to.
    Upstream,
    /// switchyard itself.
    Internal,
}

/// A switchyard-originated error with an optional detail string.
///
/// It carries the [`Side`] that caused it, set where it is created: the
/// constructors start from the kind's usual side ([`ErrorKind::side`]) and
/// [`on`](GatewayError::on) corrects it where the error says otherwise (an
/// upstream's oversize reply is `resource_exhausted` caused by the
/// upstream, not by the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {detail:?}")]
pub struct GatewayError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Who caused it (the `side` label of `switchyard_errors_total`).
    pub side: Side,
    /// A short detail for the client, never internal state.
    pub detail: Option<String>,
    /// The peer error this one stands for, when a protocol-level error
    /// (such as a Sideband ErrorFrame) settles a call: rendered as
    /// `data.origin`.
    pub origin: Option<Box<ErrorOrigin>>,
}

/// An error as another dialect reported it (`{"origin": …}` in `data`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorOrigin {
    /// The name of the dialect that reported it (`Dialect::as_str`).
    pub dialect: &'static str,
    /// Its code.
    pub code: i64,
    /// Its message.
    pub message: String,
}

// === impl ErrorKind ===

impl ErrorKind {
    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ParseError => "parse_error",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::MethodNotFound => "method_not_found",
            ErrorKind::InvalidParams => "invalid_params",
            ErrorKind::Internal => "internal",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::ResourceExhausted => "resource_exhausted",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Unavailable => "unavailable",
        }
    }

    /// Every kind, for label initialisation.
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::ParseError,
        ErrorKind::InvalidRequest,
        ErrorKind::MethodNotFound,
        ErrorKind::InvalidParams,
        ErrorKind::Internal,
        ErrorKind::Unauthorized,
        ErrorKind::NotFound,
        ErrorKind::Conflict,
        ErrorKind::RateLimited,
        ErrorKind::ResourceExhausted,
        ErrorKind::Timeout,
        ErrorKind::Unavailable,
    ];

    /// Who is usually at fault when this kind occurs: where a
    /// [`GatewayError`] is built without saying otherwise.
    pub const fn side(self) -> Side {
        match self {
            ErrorKind::ParseError
            | ErrorKind::InvalidRequest
            | ErrorKind::MethodNotFound
            | ErrorKind::InvalidParams
            | ErrorKind::Unauthorized
            | ErrorKind::NotFound
            | ErrorKind::Conflict
            | ErrorKind::RateLimited
            | ErrorKind::ResourceExhausted => Side::Client,
            ErrorKind::Timeout | ErrorKind::Unavailable => Side::Upstream,
            ErrorKind::Internal => Side::Internal,
        }
    }
}

// === impl Side ===

impl Side {
    /// Every side, for label initialisation.
    pub const ALL: [Side; 3] = [Side::Client, Side::Upstream, Side::Internal];

    /// Stable label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Upstream => "upstream",
            Side::Internal => "internal",
        }
    }
}

// === impl GatewayError ===

impl GatewayError {
    /// An error of `kind` without detail.
    pub const fn new(kind: ErrorKind) -> Self {
        GatewayError {
            kind,
            side: kind.side(),
            detail: None,
            origin: None,
        }
    }

    /// An error of `kind` with a short detail string for the client.
    pub fn with_detail(kind: ErrorKind, detail: impl Into<String>) -> Self {
        GatewayError {
            kind,
            side: kind.side(),
            detail: Some(detail.into()),
            origin: None,
        }
    }

    /// An error of `kind` standing for a peer's protocol-level error.
    pub fn with_origin(kind: ErrorKind, origin: ErrorOrigin) -> Self {
        GatewayError {
            kind,
            side: kind.side(),
            detail: None,
            origin: Some(Box::new(origin)),
        }
    }

    /// The same error, caused by `side`.
    #[must_use]
    pub const fn on(mut self, side: Side) -> Self {
        self.side = side;
        self
    }

    /// `method_not_found` for `method` (rendered per dialect: no data for
    /// JSON-RPC, `method "M" not registered` for holon-rpc).
    pub fn no_route(method: &str) -> Self {
        GatewayError::with_detail(ErrorKind::MethodNotFound, method)
    }
}
