//! switchyard's own errors as each dialect carries them (error-codes.md §2).
//!
//! [`GatewayError`] says what went wrong; this module alone knows how each
//! dialect spells it: JSON-RPC and NDJSON use Appendix C codes, holon-rpc
//! its gRPC-style codes, Sideband 1100/1101/1103 or 2000 with the kind in
//! `data`.

use crate::dialect::Dialect;
use crate::envelope::{raw_from_string, ErrorObject, Payload};
use crate::error::{ErrorKind, GatewayError};

/// Renders `err` as the error object `dialect` expects. For
/// `method_not_found` the detail is the method name.
pub fn render(err: &GatewayError, dialect: Dialect) -> ErrorObject {
    if err.kind == ErrorKind::MethodNotFound {
        return no_route_object(err, dialect);
    }
    if let Some(origin) = &err.origin {
        let mut obj = render(&GatewayError::new(err.kind), dialect);
        let origin = serde_json::json!({
            "dialect": origin.dialect,
            "code": origin.code,
            "message": origin.message,
        });
        let data = match dialect {
            // Sideband's 2000 carries the kind beside the origin.
            Dialect::Sideband => {
                serde_json::json!({"kind": err.kind.as_str(), "origin": origin})
            }
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::Holon | Dialect::JsonRpcHttp => {
                serde_json::json!({ "origin": origin })
            }
        };
        obj.data = Payload::json(&data.to_string()).ok();
        return obj;
    }
    let data = err.detail.as_deref().map(json_string);
    match dialect {
        Dialect::JsonRpc | Dialect::Ndjson | Dialect::JsonRpcHttp => {
            let (code, message) = err.kind.jsonrpc();
            ErrorObject {
                code,
                message: message.to_owned(),
                data,
            }
        }
        Dialect::Holon => {
            let message = match err.kind {
                ErrorKind::Timeout => "Timeout",
                ErrorKind::Unavailable => "Service unavailable",
                _ => err.kind.jsonrpc().1,
            };
            ErrorObject {
                code: err.kind.holon_code(),
                message: message.to_owned(),
                data,
            }
        }
        Dialect::Sideband => {
            let (code, message) = match err.kind {
                ErrorKind::InvalidRequest => (1100, "Invalid envelope"),
                ErrorKind::MethodNotFound => (1101, "Method not found"),
                ErrorKind::Timeout => (1103, "Timeout"),
                other => (2000, other.jsonrpc().1),
            };
            let data = if code == 2000 {
                let detail = serde_json::json!({
                    "kind": err.kind.as_str(),
                    "detail": err.detail.clone().unwrap_or_default(),
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

/// `method_not_found`, with the method name where the dialect carries it.
fn no_route_object(err: &GatewayError, dialect: Dialect) -> ErrorObject {
    let method = err.detail.as_deref();
    let (code, message) = match (dialect, method) {
        (Dialect::Holon, Some(m)) => (-32601, format!("method {m:?} not registered")),
        (Dialect::Sideband, Some(m)) => (1101, format!("Method not found: {m}")),
        (Dialect::Sideband, None) => (1101, String::from("Method not found")),
        (Dialect::Holon, None) | (Dialect::JsonRpc | Dialect::Ndjson | Dialect::JsonRpcHttp, _) => {
            (-32601, String::from("Method not found"))
        }
    };
    ErrorObject {
        code,
        message,
        data: None,
    }
}

/// What `data` says when switchyard answers `method_not_found` because
/// no route of the listener matched the method.
pub const NO_ROUTE_DATA: &str = "no route matched";

/// `method_not_found` for `method` when no route of the listener matched
/// it: as [`render`] spells it, with `data` [`NO_ROUTE_DATA`] in every
/// dialect, so that the client (and an operator reading its logs) can
/// tell it from the upstream's own `-32601`, which never carries that.
pub fn no_route_matched(method: &str, dialect: Dialect) -> ErrorObject {
    let mut obj = render(&GatewayError::no_route(method), dialect);
    obj.data = Some(json_string(NO_ROUTE_DATA));
    obj
}

/// A JSON string payload.
fn json_string(text: &str) -> Payload {
    let encoded = serde_json::to_string(text).unwrap_or_else(|_| String::from("\"\""));
    Payload::Json(raw_from_string(encoded))
}

/// An upstream error as the client's dialect carries it (error-codes.md
/// §3): unchanged between JSON dialects, mapped by table to and from
/// Sideband, with the original kept under `data.origin` when lossy.
pub fn translate(error: &ErrorObject, from: Dialect, to: Dialect) -> ErrorObject {
    match (from, to) {
        (Dialect::Sideband, Dialect::Sideband) => error.clone(),
        (Dialect::Sideband, target) => super::sideband::error_to_json_dialect(
            error.code,
            &error.message,
            error.data.as_ref(),
            target,
        ),
        (source, Dialect::Sideband) => super::sideband::error_from_json_dialect(error, source),
        _ => error.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonrpc_rendering_uses_appendix_c_codes() {
        let e = GatewayError::with_detail(ErrorKind::Timeout, "no reply");
        let obj = render(&e, Dialect::JsonRpc);
        assert_eq!(obj.code, -32008);
        assert_eq!(obj.message, "Timeout");
        assert_eq!(
            obj.data
                .and_then(|d| d.as_json().map(str::to_owned))
                .as_deref(),
            Some("\"no reply\"")
        );
        assert_eq!(
            render(&GatewayError::new(ErrorKind::Unavailable), Dialect::Ndjson).code,
            -32009
        );
    }

    #[test]
    fn no_route_matched_says_so_in_data_in_every_dialect() {
        let data = |obj: &ErrorObject| {
            obj.data
                .as_ref()
                .and_then(|d| d.as_json().map(str::to_owned))
        };
        for dialect in [
            Dialect::JsonRpc,
            Dialect::Ndjson,
            Dialect::Holon,
            Dialect::Sideband,
        ] {
            let plain = render(&GatewayError::no_route("m.x"), dialect);
            let ours = no_route_matched("m.x", dialect);
            assert_eq!((ours.code, &ours.message), (plain.code, &plain.message));
            assert_eq!(data(&plain), None, "{dialect}");
            assert_eq!(
                data(&ours).as_deref(),
                Some("\"no route matched\""),
                "{dialect}"
            );
        }
    }

    #[test]
    fn holon_and_sideband_rendering() {
        assert_eq!(
            render(&GatewayError::new(ErrorKind::Timeout), Dialect::Holon).code,
            4
        );
        assert_eq!(
            render(&GatewayError::new(ErrorKind::Unavailable), Dialect::Holon).code,
            14
        );
        let sb = render(
            &GatewayError::new(ErrorKind::Unavailable),
            Dialect::Sideband,
        );
        assert_eq!(sb.code, 2000);
        assert!(sb
            .data
            .and_then(|d| d.as_json().map(str::to_owned))
            .is_some_and(|d| d.contains("unavailable")));
    }
}
