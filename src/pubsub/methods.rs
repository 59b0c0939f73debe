//! The four pub/sub methods switchyard serves itself, for every client
//! dialect, on a connection's [`Registration`] (jsonrpc-ws.md §7.2):
//!
//! | method | `params` | `result` |
//! |---|---|---|
//! | `rpc.subscribe` | `{"topic":"chat.messages"}` | `{"subscribed":true}` |
//! | `rpc.unsubscribe` | `{"topic":"chat.messages"}` | `{"unsubscribed":true}` |
//! | `rpc.subscribe.batch` | `{"topics":["news","alerts"]}` | `{"subscribed":["news","alerts"]}` |
//! | `rpc.unsubscribe.batch` | `{"topics":["news"]}` | `{"unsubscribed":["news"]}` |
//!
//! Params may be JSON or CBOR (Sideband v2 clients); results are JSON.
//! Members other than `topic` / `topics` are ignored. Malformed params are
//! -32602 with a detail; so is an invalid pattern (a batch names its index).
//! The persistent family (`rpc.*.persistent*`, §7.3) is not served here.

use serde_json::{Map, Value};

use super::broker::Registration;
use crate::dialect::sideband::transcode;
use crate::envelope::{raw_from_string, Payload};
use crate::error::{ErrorKind, GatewayError};

/// The methods [`call`] serves.
pub const METHODS: [&str; 4] = [SUBSCRIBE, UNSUBSCRIBE, SUBSCRIBE_BATCH, UNSUBSCRIBE_BATCH];

const SUBSCRIBE: &str = "rpc.subscribe";
const UNSUBSCRIBE: &str = "rpc.unsubscribe";
const SUBSCRIBE_BATCH: &str = "rpc.subscribe.batch";
const UNSUBSCRIBE_BATCH: &str = "rpc.unsubscribe.batch";

const ONE_SHAPE: &str = r#"params must be an object {"topic": "<pattern>"}"#;
const MANY_SHAPE: &str = r#"params must be an object {"topics": ["<pattern>", …]}"#;

/// Is `method` one of the four pub/sub methods (never forwarded upstream)?
/// False for the persistent family, which a later issue serves.
pub fn is_pubsub(method: &str) -> bool {
    METHODS.contains(&method)
}

/// Serves `method` on `reg`; `None` when it is not a pub/sub method.
pub fn call(
    reg: &Registration,
    method: &str,
    params: Option<&Payload>,
) -> Option<Result<Payload, GatewayError>> {
    let result = match method {
        SUBSCRIBE => one(params)
            .and_then(|t| reg.subscribe(&t))
            .map(|()| serde_json::json!({"subscribed": true})),
        UNSUBSCRIBE => one(params)
            .and_then(|t| reg.unsubscribe(&t))
            .map(|()| serde_json::json!({"unsubscribed": true})),
        SUBSCRIBE_BATCH => many(params).and_then(|topics| {
            reg.subscribe_all(&refs(&topics))?;
            Ok(serde_json::json!({"subscribed": topics}))
        }),
        UNSUBSCRIBE_BATCH => many(params).and_then(|topics| {
            reg.unsubscribe_all(&refs(&topics))?;
            Ok(serde_json::json!({"unsubscribed": topics}))
        }),
        _ => return None,
    };
    Some(result.map(|value| Payload::Json(raw_from_string(value.to_string()))))
}

/// The patterns a subscribe call (`rpc.subscribe`, `rpc.subscribe.batch`)
/// asks for, for a policy to check first; empty for any other method or
/// malformed params (the call itself answers those).
pub fn requested(method: &str, params: Option<&Payload>) -> Vec<String> {
    match method {
        SUBSCRIBE => one(params).map(|t| vec![t]).unwrap_or_default(),
        SUBSCRIBE_BATCH => many(params).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The `topic` of a single call.
fn one(params: Option<&Payload>) -> Result<String, GatewayError> {
    let mut object = object(params, ONE_SHAPE)?;
    match object.remove("topic") {
        Some(Value::String(topic)) => Ok(topic),
        _ => Err(invalid(ONE_SHAPE)),
    }
}

/// The `topics` of a batch call, in request order.
fn many(params: Option<&Payload>) -> Result<Vec<String>, GatewayError> {
    let mut object = object(params, MANY_SHAPE)?;
    let Some(Value::Array(items)) = object.remove("topics") else {
        return Err(invalid(MANY_SHAPE));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(topic) => Ok(topic),
            _ => Err(invalid(format!("topics[{i}] must be a string"))),
        })
        .collect()
}

/// The params of an `rpc.*` call as a JSON object (CBOR params of
/// Sideband v2 clients transcoded); anything else is -32602 with `shape`
/// as the detail. Shared with the persistent family.
pub(crate) fn object(
    params: Option<&Payload>,
    shape: &str,
) -> Result<Map<String, Value>, GatewayError> {
    let value: Value = match params {
        None => return Err(invalid(shape)),
        Some(Payload::Json(raw)) => serde_json::from_str(raw.get()),
        Some(Payload::Cbor(bytes)) => {
            let json = transcode::cbor_to_json(bytes).map_err(|_| invalid(shape))?;
            serde_json::from_str(json.get())
        }
    }
    .map_err(|_| invalid(shape))?;
    match value {
        Value::Object(object) => Ok(object),
        _ => Err(invalid(shape)),
    }
}

fn refs(topics: &[String]) -> Vec<&str> {
    topics.iter().map(String::as_str).collect()
}

fn invalid(detail: impl Into<String>) -> GatewayError {
    GatewayError::with_detail(ErrorKind::InvalidParams, detail)
}

#[cfg(test)]
mod tests;
