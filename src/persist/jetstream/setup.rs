//! Names and JetStream objects of the backend: the stream of a topic, the
//! consumer of a subscription id, the KV bucket of ids.
//!
//! Topics and ids are hex-encoded into names and subjects: a stream or
//! consumer name may not hold `.`, `*`, `>`, whitespace or path
//! separators, and a subject token may not be empty or hold wildcards,
//! while a topic or an id may.

use std::fmt::Display;

use futures_util::StreamExt;

use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::stream::{
    self, ConsumerErrorKind, DiscardPolicy, RetentionPolicy, StorageType,
};
use async_nats::jetstream::{self as js, kv, ErrorCode};

use crate::persist::{PersistError, Retention};

/// The KV bucket of subscription id → topic.
pub(super) const SUBS_BUCKET: &str = "SWITCHYARD_SUBS";

/// A JetStream call that failed: the store is unavailable.
pub(super) fn fail(what: &str, e: impl Display) -> PersistError {
    PersistError::Store(format!("jetstream {what}: {e}"))
}

/// Lower-case hex of the bytes of `s`.
pub(super) fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// What every topic's stream name starts with.
const STREAM_PREFIX: &str = "SWITCHYARD_";

/// The stream of a topic: `SWITCHYARD_<hex(topic)>`.
pub fn stream_name(topic: &str) -> String {
    format!("{STREAM_PREFIX}{}", hex(topic))
}

/// The subject a topic's messages are published on:
/// `switchyard.persist.<hex(topic)>`.
pub fn subject(topic: &str) -> String {
    format!("switchyard.persist.{}", hex(topic))
}

/// The durable consumer of a subscription id: `S_<hex(id)>`.
pub fn consumer_name(id: &str) -> String {
    format!("S_{}", hex(id))
}

/// JetStream's "no limit".
fn limit(v: Option<u64>) -> i64 {
    v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// Gets or creates the stream of `topic`; updates its limits when they
/// differ from `retention` (the configuration changed).
pub(super) async fn ensure_stream(
    js: &js::Context,
    topic: &str,
    retention: &Retention,
) -> Result<stream::Stream, PersistError> {
    let config = stream::Config {
        name: stream_name(topic),
        subjects: vec![subject(topic)],
        max_age: retention.max_age.unwrap_or_default(),
        max_messages: limit(retention.max_count),
        max_bytes: limit(retention.max_bytes),
        discard: DiscardPolicy::Old,
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        num_replicas: 1,
        ..Default::default()
    };
    let mut s = js
        .get_or_create_stream(config.clone())
        .await
        .map_err(|e| fail("stream", e))?;
    let c = &s.info().await.map_err(|e| fail("stream info", e))?.config;
    let wanted = (config.max_age, config.max_messages, config.max_bytes);
    if (c.max_age, c.max_messages, c.max_bytes) != wanted {
        js.update_stream(config)
            .await
            .map_err(|e| fail("stream update", e))?;
    }
    Ok(s)
}

/// Messages and bytes kept now in every topic's stream (JetStream's
/// counts: a message's subject and headers included).
pub(super) async fn usage(js: &js::Context) -> Result<(u64, u64), PersistError> {
    let mut infos = js.streams();
    let (mut messages, mut bytes) = (0, 0);
    while let Some(info) = infos.next().await {
        let info = info.map_err(|e| fail("stream list", e))?;
        if info.config.name.starts_with(STREAM_PREFIX) {
            messages += info.state.messages;
            bytes += info.state.bytes;
        }
    }
    Ok((messages, bytes))
}

/// The stream of `topic` if it exists.
pub(super) async fn find_stream(
    js: &js::Context,
    topic: &str,
) -> Result<Option<stream::Stream>, PersistError> {
    match js.get_stream(stream_name(topic)).await {
        Ok(s) => Ok(Some(s)),
        Err(e) => match e.kind() {
            GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND => {
                Ok(None)
            }
            _ => Err(fail("stream", e)),
        },
    }
}

/// Deletes a consumer; one already gone is not an error.
pub(super) async fn delete_consumer(
    stream: &stream::Stream,
    name: &str,
) -> Result<(), PersistError> {
    match stream.delete_consumer(name).await {
        Ok(_) => Ok(()),
        Err(e) => match e.kind() {
            ConsumerErrorKind::JetStream(j) if j.error_code() == ErrorCode::CONSUMER_NOT_FOUND => {
                Ok(())
            }
            _ => Err(fail("consumer delete", e)),
        },
    }
}

/// The KV bucket of subscription ids, created if missing. Its backing
/// stream is created here with the settings `create_key_value` uses,
/// because that call first reads the account info, which async-nats 0.50
/// cannot parse from a 2.9 server (no `reserved_memory`).
pub(super) async fn subs_bucket(js: &js::Context) -> Result<kv::Store, PersistError> {
    let config = stream::Config {
        name: format!("KV_{SUBS_BUCKET}"),
        subjects: vec![format!("$KV.{SUBS_BUCKET}.>")],
        max_messages_per_subject: 1,
        max_messages: -1,
        max_bytes: -1,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: DiscardPolicy::New,
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        num_replicas: 1,
        ..Default::default()
    };
    js.get_or_create_stream(config)
        .await
        .map_err(|e| fail("kv stream", e))?;
    js.get_key_value(SUBS_BUCKET)
        .await
        .map_err(|e| fail("kv bucket", e))
}
