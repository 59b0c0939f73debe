//! JSON-RPC 2.0 over HTTP: what the `jsonrpc-http` dialect adds to the
//! JSON-RPC codec ([`super::jsonrpc`], which decodes every body) — pure
//! HTTP-level decisions with no I/O: which methods and content types a
//! listener accepts, the CORS answer, and the Server-Sent Events framing.
//!
//! A body is decoded, routed and answered exactly as a WebSocket text
//! frame of the `jsonrpc-ws` dialect (the same codec, the same errors);
//! what is HTTP's own is decided here: `200` with the reply (or the
//! batch's array), `204` when nothing answers (notifications), `429` when
//! the one reply is the rate limit's error, and statuses for what is not
//! JSON-RPC at all (see `docs/protocols.md`, "JSON-RPC over HTTP").

use std::sync::LazyLock;

use crate::error::ErrorKind;

pub mod sse;

/// The `Allow` header of a listener's path (answered with `405` to any
/// other method).
pub const ALLOW: &str = "POST, OPTIONS";

/// The `Allow` header of a listener's event stream (`<path>/events`).
pub const ALLOW_EVENTS: &str = "GET, OPTIONS";

/// The path of a listener's event stream, after the listener's own.
pub const EVENTS_SUFFIX: &str = "/events";

/// What a CORS preflight allows: the methods of the path and of its
/// `/events` stream.
pub const CORS_METHODS: &str = "POST, GET, OPTIONS";

/// The request headers a browser may send (CORS preflight).
pub const CORS_HEADERS: &str = "content-type, authorization, traceparent";

/// How long a browser may cache a preflight answer, in seconds.
pub const CORS_MAX_AGE_SECS: u32 = 600;

/// The `Retry-After` of a `429`, in seconds: the rate limits refill every
/// second.
pub const RETRY_AFTER_SECS: u32 = 1;

/// The `WWW-Authenticate` challenge of a `401`.
pub const CHALLENGE: &str = "Bearer";

/// True for `application/json`, with parameters (`; charset=utf-8`) and in
/// any case; anything else is `415`.
pub fn is_json(content_type: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(content_type) else {
        return false;
    };
    let essence = text.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// The HTTP status of a `200`-class answer carrying `reply`: `429` when it
/// is a single error reply whose code is the rate limit's, else `200`
/// (errors inside a batch stay JSON-RPC errors in a `200`).
pub fn reply_status(reply: &str) -> u16 {
    #[derive(serde::Deserialize)]
    struct Reply {
        error: Option<Code>,
    }
    #[derive(serde::Deserialize)]
    struct Code {
        code: i64,
    }
    /// The rate limit's code as it appears in a reply, spelled once.
    static LIMITED: LazyLock<(i64, String)> = LazyLock::new(|| {
        let code = super::errors::jsonrpc_code(ErrorKind::RateLimited).0;
        (code, code.to_string())
    });
    let (limited, ref spelled) = *LIMITED;
    // Only a lone object can be a single error; the full parse is done
    // only for the rare reply that mentions the code at all.
    if !reply.trim_start().starts_with('{') || !reply.contains(spelled.as_str()) {
        return 200;
    }
    match serde_json::from_str::<Reply>(reply) {
        Ok(Reply {
            error: Some(Code { code }),
        }) if code == limited => 429,
        _ => 200,
    }
}

/// True when `reply` is a single JSON-RPC error reply.
pub fn is_error(reply: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe<'a> {
        #[serde(borrow, default)]
        error: Option<&'a serde_json::value::RawValue>,
    }
    serde_json::from_str::<Probe<'_>>(reply).is_ok_and(|p| p.error.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_are_accepted_with_parameters_and_any_case() {
        assert!(is_json(b"application/json"));
        assert!(is_json(b"application/json; charset=utf-8"));
        assert!(is_json(b"Application/JSON;charset=UTF-8"));
        assert!(!is_json(b"text/plain"));
        assert!(!is_json(b"application/jsonx"));
        assert!(!is_json(b"application/x-www-form-urlencoded"));
        assert!(!is_json(b"\xff"));
    }

    #[test]
    fn error_replies_are_told_from_results() {
        assert!(is_error(
            r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32602,"message":"x"}}"#
        ));
        assert!(!is_error(
            r#"{"jsonrpc":"2.0","id":0,"result":{"subscribed":["a"]}}"#
        ));
        assert!(!is_error("[]"));
    }

    #[test]
    fn only_a_single_rate_limited_error_is_429() {
        let limited =
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32006,"message":"Rate limit exceeded"}}"#;
        assert_eq!(reply_status(limited), 429);
        let other =
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#;
        assert_eq!(reply_status(other), 200);
        let batch = format!("[{limited}]");
        assert_eq!(reply_status(&batch), 200);
        let result = r#"{"jsonrpc":"2.0","id":1,"result":-32006}"#;
        assert_eq!(reply_status(result), 200);
    }
}
