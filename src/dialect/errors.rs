//! Every error code switchyard writes or translates, in one place
//! (error-codes.md).
//!
//! - switchyard's own errors (§2): [`GatewayError`] says what went wrong;
//!   [`render`] spells it in a dialect: JSON-RPC and NDJSON use Appendix C
//!   codes, holon-rpc its gRPC-style codes, Sideband 1100/1101/1103 or
//!   2000 with the kind in `data`;
//! - an upstream's error towards a client of another dialect (§3):
//!   [`translate`], unchanged between JSON dialects, mapped by table to and
//!   from Sideband, with the original under `data.origin` when lossy;
//! - an upstream ErrorFrame that settles a call (§4):
//!   [`error_frame_to_internal`].

use super::json_string::push_json_string;
use super::sideband::cbor;
use super::sideband::transcode::{cbor_to_json, TranscodeError};
use super::{Dialect, ErrorCodes};
use crate::envelope::{raw_from_string, ErrorObject, Payload, RawJson};
use crate::error::{ErrorKind, GatewayError};

/// Sideband code 1100 InvalidEnvelope: every envelope decode failure
/// (sideband.md §6), and switchyard's `invalid_request` to a Sideband
/// client.
pub const INVALID_ENVELOPE: i64 = 1100;

/// JSON-RPC WS and NDJSON code and message of `kind` (jsonrpc-ws.md §6,
/// Appendix C.3).
pub(crate) const fn jsonrpc_code(kind: ErrorKind) -> (i64, &'static str) {
    match kind {
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

/// holon-rpc code of `kind` (error-codes.md §2).
const fn holon_code(kind: ErrorKind) -> i64 {
    match kind {
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
        let data = match dialect.error_codes() {
            // Sideband's 2000 carries the kind beside the origin.
            ErrorCodes::Sideband => {
                serde_json::json!({"kind": err.kind.as_str(), "origin": origin})
            }
            ErrorCodes::JsonRpc | ErrorCodes::Holon => serde_json::json!({ "origin": origin }),
        };
        obj.data = Payload::json(&data.to_string()).ok();
        return obj;
    }
    let data = err.detail.as_deref().map(json_string);
    match dialect.error_codes() {
        ErrorCodes::JsonRpc => {
            let (code, message) = jsonrpc_code(err.kind);
            ErrorObject {
                code,
                message: message.to_owned(),
                data,
            }
        }
        ErrorCodes::Holon => {
            let message = match err.kind {
                ErrorKind::Timeout => "Timeout",
                ErrorKind::Unavailable => "Service unavailable",
                _ => jsonrpc_code(err.kind).1,
            };
            ErrorObject {
                code: holon_code(err.kind),
                message: message.to_owned(),
                data,
            }
        }
        ErrorCodes::Sideband => {
            let (code, message) = match err.kind {
                ErrorKind::InvalidRequest => (INVALID_ENVELOPE, "Invalid envelope"),
                ErrorKind::MethodNotFound => (1101, "Method not found"),
                ErrorKind::Timeout => (1103, "Timeout"),
                other => (2000, jsonrpc_code(other).1),
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
    let (code, message) = match (dialect.error_codes(), method) {
        (ErrorCodes::Holon, Some(m)) => (-32601, format!("method {m:?} not registered")),
        (ErrorCodes::Sideband, Some(m)) => (1101, format!("Method not found: {m}")),
        (ErrorCodes::Sideband, None) => (1101, String::from("Method not found")),
        (ErrorCodes::Holon, None) | (ErrorCodes::JsonRpc, _) => {
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
    match (from.error_codes(), to.error_codes()) {
        (ErrorCodes::Sideband, ErrorCodes::Sideband)
        | (ErrorCodes::JsonRpc | ErrorCodes::Holon, ErrorCodes::JsonRpc | ErrorCodes::Holon) => {
            error.clone()
        }
        (ErrorCodes::Sideband, ErrorCodes::JsonRpc | ErrorCodes::Holon) => {
            error_to_json_dialect(error.code, &error.message, error.data.as_ref(), to)
        }
        (ErrorCodes::JsonRpc | ErrorCodes::Holon, ErrorCodes::Sideband) => {
            error_from_json_dialect(error, from)
        }
    }
}

/// Maps a Sideband `E` error to a JSON dialect (error-codes.md §3.2).
///
/// 1100, 1101, 1103, 2000 and codes above 2000 map by declared
/// equivalence; everything else becomes -32603 with the original under
/// `data.origin`. The message is kept. CBOR `data` is transcoded to JSON;
/// if it cannot be, the caller gets switchyard's `internal` error instead
/// (§7). Towards [`Dialect::Sideband`] the error passes unchanged.
pub fn error_to_json_dialect(
    code: i64,
    message: &str,
    data: Option<&Payload>,
    target: Dialect,
) -> ErrorObject {
    if target.error_codes() == ErrorCodes::Sideband {
        return ErrorObject {
            code,
            message: message.to_owned(),
            data: data.cloned(),
        };
    }
    let equivalent = match code {
        1100 => Some(-32600),
        1101 => Some(-32601),
        1103 if target.error_codes() == ErrorCodes::Holon => Some(4),
        1103 => Some(-32008),
        2000 => Some(-32000),
        c if c > 2000 => Some(c),
        _ => None,
    };
    let data = match data.map(as_json).transpose() {
        Ok(data) => data,
        Err(e) => return untranslatable(&e, target),
    };
    match equivalent {
        Some(code) => ErrorObject {
            code,
            message: message.to_owned(),
            data: data.map(Payload::Json),
        },
        None => ErrorObject {
            code: -32603,
            message: message.to_owned(),
            data: Some(Payload::Json(json_origin(
                Dialect::Sideband,
                code,
                message,
                data.as_ref().map(RawJson::get),
            ))),
        },
    }
}

/// Maps an error from a JSON dialect to a Sideband `E` (error-codes.md §3.3).
///
/// -32600, -32601, -32000, holon's 4 and codes ≥ 2000 map by declared
/// equivalence; -32700 becomes 1100 and holon's 12 becomes 1101 with
/// `data.origin`; everything else becomes 2000 with `data.origin`. The
/// origin is built in the encoding of the original `data` (a CBOR map when
/// it is CBOR), so this never fails. From [`Dialect::Sideband`] the error
/// passes unchanged.
pub fn error_from_json_dialect(err: &ErrorObject, source: Dialect) -> ErrorObject {
    if source.error_codes() == ErrorCodes::Sideband {
        return err.clone();
    }
    let holon = source.error_codes() == ErrorCodes::Holon;
    let equivalent = match err.code {
        -32600 => Some(1100),
        -32601 => Some(1101),
        -32000 => Some(2000),
        4 if holon => Some(1103),
        c if c >= 2000 => Some(c),
        _ => None,
    };
    if let Some(code) = equivalent {
        return ErrorObject {
            code,
            message: err.message.clone(),
            data: err.data.clone(),
        };
    }
    let code = match err.code {
        -32700 => 1100,
        12 if holon => 1101,
        _ => 2000,
    };
    ErrorObject {
        code,
        message: err.message.clone(),
        data: Some(origin(source, err.code, &err.message, err.data.as_ref())),
    }
}

/// The error for a pending call that an upstream ErrorFrame named
/// (error-codes.md §4): switchyard's `internal` in `target`'s rendering,
/// with `{"origin":{"dialect":"sideband","code":…,"message":…}}` as data.
pub fn error_frame_to_internal(code: u16, message: &str, target: Dialect) -> ErrorObject {
    let mut error = render(&GatewayError::new(ErrorKind::Internal), target);
    error.data = Some(Payload::Json(json_origin(
        Dialect::Sideband,
        i64::from(code),
        message,
        None,
    )));
    error
}

/// `{"origin":{…}}` in the encoding of `data` (JSON when absent).
fn origin(dialect: Dialect, code: i64, message: &str, data: Option<&Payload>) -> Payload {
    match data {
        Some(Payload::Cbor(raw)) => {
            let mut out = Vec::with_capacity(64 + message.len() + raw.len());
            cbor::write_head(&mut out, cbor::MAJOR_MAP, 1);
            cbor::write_text(&mut out, "origin");
            cbor::write_head(&mut out, cbor::MAJOR_MAP, 4);
            cbor::write_text(&mut out, "dialect");
            cbor::write_text(&mut out, dialect.as_str());
            cbor::write_text(&mut out, "code");
            cbor::write_int(&mut out, code);
            cbor::write_text(&mut out, "message");
            cbor::write_text(&mut out, message);
            cbor::write_text(&mut out, "data");
            out.extend_from_slice(raw);
            Payload::Cbor(out.into())
        }
        Some(Payload::Json(raw)) => {
            Payload::Json(json_origin(dialect, code, message, Some(raw.get())))
        }
        None => Payload::Json(json_origin(dialect, code, message, None)),
    }
}

/// `{"origin":{"dialect":…,"code":…,"message":…,"data":…}}`, `data`
/// omitted when absent (error-codes.md, principle 4).
fn json_origin(dialect: Dialect, code: i64, message: &str, data: Option<&str>) -> RawJson {
    let mut out = String::from(r#"{"origin":{"dialect":"#);
    push_json_string(&mut out, dialect.as_str());
    out.push_str(r#","code":"#);
    out.push_str(&code.to_string());
    out.push_str(r#","message":"#);
    push_json_string(&mut out, message);
    if let Some(data) = data {
        out.push_str(r#","data":"#);
        out.push_str(data);
    }
    out.push_str("}}");
    raw_from_string(out)
}

/// A payload as JSON, transcoding CBOR.
fn as_json(data: &Payload) -> Result<RawJson, TranscodeError> {
    match data {
        Payload::Json(raw) => Ok(raw.clone()),
        Payload::Cbor(bytes) => cbor_to_json(bytes).map(RawJson::from),
    }
}

/// §7: error data that cannot be transcoded gives the caller `internal`.
fn untranslatable(e: &TranscodeError, target: Dialect) -> ErrorObject {
    let err = GatewayError::with_detail(
        ErrorKind::Internal,
        format!("upstream error data cannot be transcoded: {e}"),
    );
    render(&err, target)
}

#[cfg(test)]
mod tests;
