//! The six persistent-subscription methods switchyard serves itself, for
//! every client dialect, on a connection's [`Attachment`]
//! (jsonrpc-ws.md §7.3):
//!
//! | method | `params` | `result` |
//! |---|---|---|
//! | `rpc.subscribe.persistent` | `{"subscription_id","topic"}` | `{"subscription_id","topic","resumed_from_sequence"}` |
//! | `rpc.acknowledge.persistent` | `{"subscription_id","sequence_id"}` | `{"acknowledged":true}` |
//! | `rpc.unsubscribe.persistent` | `{"subscription_id"}` | `{"unsubscribed":true}` |
//! | `rpc.subscribe.persistent.batch` | `{"subscriptions":[{"subscription_id","topic"},…]}` | `{"subscriptions":[{"subscription_id","resumed_from_sequence"},…]}` |
//! | `rpc.acknowledge.persistent.batch` | `{"acknowledgments":[{"subscription_id","sequence_id"},…]}` | `{"acknowledged":[{"subscription_id","sequence_id","success"},…]}` |
//! | `rpc.unsubscribe.persistent.batch` | `{"subscription_ids":[…]}` | `{"unsubscribed":[…]}` |
//!
//! Params may be JSON or CBOR (Sideband v2 clients); results are JSON.
//! Malformed params are -32602 with a detail (a batch names the index).
//! Batch subscribe and batch unsubscribe are all or nothing; in a batch
//! acknowledgement each item that names an unknown id, an id this
//! connection does not hold, or a sequence never delivered gets
//! `"success":false` and the others are recorded. A batch lists at most
//! [`MAX_BATCH_ITEMS`] items.

use serde_json::{json, Map, Value};

use super::hub::{Attachment, Starts};
use crate::envelope::{raw_from_string, Payload};
use crate::error::{ErrorKind, GatewayError};
use crate::pubsub::methods::object;

/// The methods [`call`] serves.
pub const METHODS: [&str; 6] = [
    SUBSCRIBE,
    ACKNOWLEDGE,
    UNSUBSCRIBE,
    SUBSCRIBE_BATCH,
    ACKNOWLEDGE_BATCH,
    UNSUBSCRIBE_BATCH,
];

/// The most items one batch call may list.
pub const MAX_BATCH_ITEMS: usize = 1000;

const SUBSCRIBE: &str = "rpc.subscribe.persistent";
const ACKNOWLEDGE: &str = "rpc.acknowledge.persistent";
const UNSUBSCRIBE: &str = "rpc.unsubscribe.persistent";
const SUBSCRIBE_BATCH: &str = "rpc.subscribe.persistent.batch";
const ACKNOWLEDGE_BATCH: &str = "rpc.acknowledge.persistent.batch";
const UNSUBSCRIBE_BATCH: &str = "rpc.unsubscribe.persistent.batch";

const SUBSCRIBE_SHAPE: &str =
    r#"params must be an object {"subscription_id": "<id>", "topic": "<topic>"}"#;
const ACK_SHAPE: &str =
    r#"params must be an object {"subscription_id": "<id>", "sequence_id": <n>}"#;
const UNSUBSCRIBE_SHAPE: &str = r#"params must be an object {"subscription_id": "<id>"}"#;
const SUBSCRIBE_BATCH_SHAPE: &str = r#"params must be an object {"subscriptions": [{"subscription_id": "<id>", "topic": "<topic>"}, …]}"#;
const ACK_BATCH_SHAPE: &str = r#"params must be an object {"acknowledgments": [{"subscription_id": "<id>", "sequence_id": <n>}, …]}"#;
const UNSUBSCRIBE_BATCH_SHAPE: &str =
    r#"params must be an object {"subscription_ids": ["<id>", …]}"#;

/// Is `method` one of the six (served here, never forwarded upstream)?
pub fn is_persistent(method: &str) -> bool {
    METHODS.contains(&method)
}

/// Serves `method` on `att`; `None` when it is not one of the six. The
/// subscriptions it opens deliver once `starts` is released (after the
/// reply is queued).
pub async fn call(
    att: &Attachment,
    method: &str,
    params: Option<&Payload>,
    starts: &Starts,
) -> Option<Result<Payload, GatewayError>> {
    let result = match method {
        SUBSCRIBE => subscribe(att, params, starts).await,
        ACKNOWLEDGE => acknowledge(att, params).await,
        UNSUBSCRIBE => unsubscribe(att, params).await,
        SUBSCRIBE_BATCH => subscribe_batch(att, params, starts).await,
        ACKNOWLEDGE_BATCH => acknowledge_batch(att, params).await,
        UNSUBSCRIBE_BATCH => unsubscribe_batch(att, params).await,
        _ => return None,
    };
    Some(result.map(|value| Payload::Json(raw_from_string(value.to_string()))))
}

/// The topics a persistent subscribe call asks for, for a policy to check
/// first; empty for any other method or malformed params (the call itself
/// answers those).
pub fn requested(method: &str, params: Option<&Payload>) -> Vec<String> {
    let topic_of = |mut o: Map<String, Value>| match o.remove("topic") {
        Some(Value::String(t)) => Some(t),
        _ => None,
    };
    match method {
        SUBSCRIBE => object(params, SUBSCRIBE_SHAPE)
            .ok()
            .and_then(topic_of)
            .into_iter()
            .collect(),
        SUBSCRIBE_BATCH => list(params, "subscriptions", SUBSCRIBE_BATCH_SHAPE)
            .map(|items| {
                items
                    .into_iter()
                    .filter_map(|item| match item {
                        Value::Object(o) => topic_of(o),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

async fn subscribe(
    att: &Attachment,
    params: Option<&Payload>,
    starts: &Starts,
) -> Result<Value, GatewayError> {
    let mut object = object(params, SUBSCRIBE_SHAPE)?;
    let (id, topic) = id_and_topic(&mut object, SUBSCRIBE_SHAPE)?;
    let resumed = att.subscribe(&id, &topic, starts).await?;
    Ok(json!({"subscription_id": id, "topic": topic, "resumed_from_sequence": resumed}))
}

async fn acknowledge(att: &Attachment, params: Option<&Payload>) -> Result<Value, GatewayError> {
    let mut object = object(params, ACK_SHAPE)?;
    let (id, seq) = id_and_seq(&mut object, ACK_SHAPE)?;
    att.ack(&id, seq).await?;
    Ok(json!({"acknowledged": true}))
}

async fn unsubscribe(att: &Attachment, params: Option<&Payload>) -> Result<Value, GatewayError> {
    let mut object = object(params, UNSUBSCRIBE_SHAPE)?;
    let id = string(&mut object, "subscription_id", UNSUBSCRIBE_SHAPE)?;
    att.unsubscribe(&id).await?;
    Ok(json!({"unsubscribed": true}))
}

async fn subscribe_batch(
    att: &Attachment,
    params: Option<&Payload>,
    starts: &Starts,
) -> Result<Value, GatewayError> {
    let items = list(params, "subscriptions", SUBSCRIBE_BATCH_SHAPE)?;
    let pairs = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(mut o) => id_and_topic(&mut o, SUBSCRIBE_BATCH_SHAPE),
            _ => Err(invalid(format!("subscriptions[{i}] must be an object"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let resumed = att.subscribe_all(&pairs, starts).await?;
    let out: Vec<Value> = pairs
        .iter()
        .zip(resumed)
        .map(|((id, _), r)| json!({"subscription_id": id, "resumed_from_sequence": r}))
        .collect();
    Ok(json!({"subscriptions": out}))
}

async fn acknowledge_batch(
    att: &Attachment,
    params: Option<&Payload>,
) -> Result<Value, GatewayError> {
    let items = list(params, "acknowledgments", ACK_BATCH_SHAPE)?;
    let pairs = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(mut o) => id_and_seq(&mut o, ACK_BATCH_SHAPE),
            _ => Err(invalid(format!("acknowledgments[{i}] must be an object"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    // All at once: the store writes them in one commit (group commit)
    // rather than one commit an item. As many as the batch holds, which
    // the message size limit bounds.
    let acks = pairs.iter().map(|(id, seq)| att.ack(id, *seq));
    let outcomes = futures_util::future::join_all(acks).await;
    let mut out = Vec::with_capacity(pairs.len());
    for ((id, seq), outcome) in pairs.into_iter().zip(outcomes) {
        let success = match outcome {
            Ok(()) => true,
            Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::InvalidParams) => false,
            // The store failing fails the call.
            Err(e) => return Err(e),
        };
        out.push(json!({"subscription_id": id, "sequence_id": seq, "success": success}));
    }
    Ok(json!({"acknowledged": out}))
}

async fn unsubscribe_batch(
    att: &Attachment,
    params: Option<&Payload>,
) -> Result<Value, GatewayError> {
    let items = list(params, "subscription_ids", UNSUBSCRIBE_BATCH_SHAPE)?;
    let ids = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(id) => Ok(id),
            _ => Err(invalid(format!("subscription_ids[{i}] must be a string"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    att.unsubscribe_all(&ids).await?;
    Ok(json!({"unsubscribed": ids}))
}

fn id_and_topic(
    object: &mut Map<String, Value>,
    shape: &str,
) -> Result<(String, String), GatewayError> {
    let id = string(object, "subscription_id", shape)?;
    let topic = string(object, "topic", shape)?;
    Ok((id, topic))
}

fn id_and_seq(object: &mut Map<String, Value>, shape: &str) -> Result<(String, u64), GatewayError> {
    let id = string(object, "subscription_id", shape)?;
    match object
        .remove("sequence_id")
        .as_ref()
        .and_then(Value::as_u64)
    {
        Some(seq) => Ok((id, seq)),
        None => Err(invalid(format!(
            "sequence_id must be a non-negative integer; {shape}"
        ))),
    }
}

fn string(object: &mut Map<String, Value>, key: &str, shape: &str) -> Result<String, GatewayError> {
    match object.remove(key) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(invalid(shape)),
    }
}

/// The array `key` of a batch call, at most [`MAX_BATCH_ITEMS`] long.
fn list(params: Option<&Payload>, key: &str, shape: &str) -> Result<Vec<Value>, GatewayError> {
    let mut object = object(params, shape)?;
    let Some(Value::Array(items)) = object.remove(key) else {
        return Err(invalid(shape));
    };
    if items.len() > MAX_BATCH_ITEMS {
        return Err(invalid(format!(
            "{key}: at most {MAX_BATCH_ITEMS} items per call"
        )));
    }
    Ok(items)
}

fn invalid(detail: impl Into<String>) -> GatewayError {
    GatewayError::with_detail(ErrorKind::InvalidParams, detail)
}
