//! switchyard's own errors: one closed list of kinds, rendered per dialect.
//!
//! Upstream errors are never reinterpreted (codes in -32000…-32099 mean
//! different things to different applications); only errors switchyard
//! itself originates are built from an [`ErrorKind`]. The mapping follows
//! `error-codes.md` §2.

use crate::dialect::Dialect;
use crate::envelope::{ErrorObject, Payload};

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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {detail:?}")]
pub struct GatewayError {
    /// What went wrong.
    pub kind: ErrorKind,
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
    /// The dialect that reported it.
    pub dialect: Dialect,
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

    /// JSON-RPC WS and NDJSON code and message (jsonrpc-ws.md §6, Appendix C.3).
    pub const fn jsonrpc(self) -> (i64, &'static str) {
        match self {
            ErrorKind::ParseError => (-32700, "Parse error"),
            ErrorKind::InvalidRequest => (-32600, "Invalid Request"),
            ErrorKind::MethodNotFound => (-32601, "Method not found"),
            ErrorKind::InvalidParams => (-32602, "Invalid params"),
            ErrorKind::Internal => (-32603, "Internal error"),
            ErrorKind::Unauthorized => (-32001, "Unauthorized"),
            ErrorKind::NotFound => (-32003, "Not found"),
            ErrorKind::Conflict => (-32005, "Conflict"),
            ErrorKind::RateLimited => (-32006, "Rate limit exceeded"),
            ErrorKind::ResourceExhausted => (-32007, "Resource exhausted"),
            ErrorKind::Timeout => (-32008, "Timeout"),
            ErrorKind::Unavailable => (-32009, "Service unavailable"),
        }
    }

    /// holon-rpc code (error-codes.md §2).
    pub const fn holon_code(self) -> i64 {
        match self {
            ErrorKind::ParseError => -32700,
            ErrorKind::InvalidRequest => -32600,
            ErrorKind::MethodNotFound => -32601,
            ErrorKind::InvalidParams => -32602,
            ErrorKind::Internal => 13,
            ErrorKind::Unauthorized => 16,
            ErrorKind::NotFound => 5,
            ErrorKind::Conflict => 6,
            ErrorKind::RateLimited | ErrorKind::ResourceExhausted => 8,
            ErrorKind::Timeout => 4,
            ErrorKind::Unavailable => 14,
        }
    }

    /// Who is at fault when this kind occurs.
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
            detail: None,
            origin: None,
        }
    }

    /// An error of `kind` with a short detail string for the client.
    pub fn with_detail(kind: ErrorKind, detail: impl Into<String>) -> Self {
        GatewayError {
            kind,
            detail: Some(detail.into()),
            origin: None,
        }
    }

    /// An error of `kind` standing for a peer's protocol-level error.
    pub fn with_origin(kind: ErrorKind, origin: ErrorOrigin) -> Self {
        GatewayError {
            kind,
            detail: None,
            origin: Some(Box::new(origin)),
        }
    }

    /// `method_not_found` for `method` (rendered per dialect: no data for
    /// JSON-RPC, `method "M" not registered` for holon-rpc).
    pub fn no_route(method: &str) -> Self {
        GatewayError::with_detail(ErrorKind::MethodNotFound, method)
    }

    /// Renders this error as the error object `dialect` expects. For
    /// `method_not_found` the detail is the method name.
    pub fn to_object(&self, dialect: Dialect) -> ErrorObject {
        if self.kind == ErrorKind::MethodNotFound {
            return self.no_route_object(dialect);
        }
        if let Some(origin) = &self.origin {
            let mut obj = GatewayError::new(self.kind).to_object(dialect);
            let origin = serde_json::json!({
                "dialect": origin.dialect.as_str(),
                "code": origin.code,
                "message": origin.message,
            });
            let data = match dialect {
                // Sideband's 2000 carries the kind beside the origin.
                Dialect::Sideband => {
                    serde_json::json!({"kind": self.kind.as_str(), "origin": origin})
                }
                _ => serde_json::json!({ "origin": origin }),
            };
            obj.data = Payload::json(&data.to_string()).ok();
            return obj;
        }
        let data = self.detail.as_deref().map(json_string);
        match dialect {
            Dialect::JsonRpc | Dialect::Ndjson => {
                let (code, message) = self.kind.jsonrpc();
                ErrorObject {
                    code,
                    message: message.to_owned(),
                    data,
                }
            }
            Dialect::Holon => {
                let message = match self.kind {
                    ErrorKind::Timeout => "Timeout",
                    ErrorKind::Unavailable => "Service unavailable",
                    _ => self.kind.jsonrpc().1,
                };
                ErrorObject {
                    code: self.kind.holon_code(),
                    message: message.to_owned(),
                    data,
                }
            }
            Dialect::Sideband => {
                let (code, message) = match self.kind {
                    ErrorKind::InvalidRequest => (1100, "Invalid envelope"),
                    ErrorKind::MethodNotFound => (1101, "Method not found"),
                    ErrorKind::Timeout => (1103, "Timeout"),
                    other => (2000, other.jsonrpc().1),
                };
                let data = if code == 2000 {
                    let detail = serde_json::json!({
                        "kind": self.kind.as_str(),
                        "detail": self.detail.clone().unwrap_or_default(),
                    });
                    Payload::json(&detail.to_string()).ok()
                } else {
                    data
                };
                ErrorObject {
                    code,
                    message: message.to_owned(),
                    data,
                }
            }
        }
    }
}

impl GatewayError {
    fn no_route_object(&self, dialect: Dialect) -> ErrorObject {
        let method = self.detail.as_deref();
        let (code, message) = match (dialect, method) {
            (Dialect::Holon, Some(m)) => (-32601, format!("method {m:?} not registered")),
            (Dialect::Sideband, Some(m)) => (1101, format!("Method not found: {m}")),
            (Dialect::Sideband, None) => (1101, String::from("Method not found")),
            _ => (-32601, String::from("Method not found")),
        };
        ErrorObject {
            code,
            message,
            data: None,
        }
    }
}

/// A JSON string payload.
fn json_string(text: &str) -> Payload {
    let encoded = serde_json::to_string(text).unwrap_or_else(|_| String::from("\"\""));
    Payload::Json(crate::envelope::raw_from_string(encoded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonrpc_rendering_uses_appendix_c_codes() {
        let e = GatewayError::with_detail(ErrorKind::Timeout, "no reply");
        let obj = e.to_object(Dialect::JsonRpc);
        assert_eq!(obj.code, -32008);
        assert_eq!(obj.message, "Timeout");
        assert_eq!(
            obj.data
                .and_then(|d| d.as_json().map(str::to_owned))
                .as_deref(),
            Some("\"no reply\"")
        );
        assert_eq!(
            GatewayError::new(ErrorKind::Unavailable)
                .to_object(Dialect::Ndjson)
                .code,
            -32009
        );
    }

    #[test]
    fn holon_and_sideband_rendering() {
        assert_eq!(
            GatewayError::new(ErrorKind::Timeout)
                .to_object(Dialect::Holon)
                .code,
            4
        );
        assert_eq!(
            GatewayError::new(ErrorKind::Unavailable)
                .to_object(Dialect::Holon)
                .code,
            14
        );
        let sb = GatewayError::new(ErrorKind::Unavailable).to_object(Dialect::Sideband);
        assert_eq!(sb.code, 2000);
        assert!(sb
            .data
            .and_then(|d| d.as_json().map(str::to_owned))
            .is_some_and(|d| d.contains("unavailable")));
    }
}
