//! `[persistence]` and `[[persistent_topics]]`: the store of persistent
//! subscriptions (jsonrpc-ws.md §7.3) and the topics it keeps.

use std::path::PathBuf;
use std::time::Duration;

use super::problems::Problems;
use super::raw::{RawPersistence, RawPersistentTopic};
use crate::persist::{BackendKind, Caps, Retention, TopicPolicy, Topics};

/// Accepted `persistence.backend` values.
const BACKENDS: [(&str, BackendKind); 3] = [
    ("memory", BackendKind::Memory),
    ("embedded", BackendKind::Embedded),
    ("nats", BackendKind::Nats),
];

/// The largest `persistence.window` accepted.
const MAX_WINDOW: usize = 1 << 20;

/// The validated `[persistence]` and `[[persistent_topics]]`: what the
/// store is opened with.
pub use crate::persist::Settings as PersistenceConfig;

/// Validates both sections.
pub(super) fn persistence(
    raw: &RawPersistence,
    topics: &[RawPersistentTopic],
    p: &mut Problems,
) -> PersistenceConfig {
    let key = "persistence";
    let path = (!raw.path.is_empty()).then(|| PathBuf::from(&raw.path));
    let nats_url = (!raw.nats_url.is_empty()).then(|| raw.nats_url.clone());
    let backend = match raw.backend.as_str() {
        "" if path.is_some() => BackendKind::Embedded,
        "" => BackendKind::Memory,
        name => p
            .choice(key, "backend", name, &BACKENDS)
            .unwrap_or(BackendKind::Memory),
    };
    match backend {
        BackendKind::Embedded if path.is_none() => {
            p.at(
                key,
                "path",
                "required for backend \"embedded\" (the data directory)",
            );
        }
        BackendKind::Nats if nats_url.is_none() => {
            p.at(key, "nats_url", "required for backend \"nats\"");
        }
        _ => {}
    }
    if path.is_some() && backend != BackendKind::Embedded {
        let msg = format!(
            "only used by backend \"embedded\" (backend is {:?})",
            backend.as_str()
        );
        p.at(key, "path", msg);
    }
    if nats_url.is_some() && backend != BackendKind::Nats {
        let msg = format!(
            "only used by backend \"nats\" (backend is {:?})",
            backend.as_str()
        );
        p.at(key, "nats_url", msg);
    }
    if let Some(url) = &nats_url {
        if !(url.starts_with("nats://") || url.starts_with("tls://")) {
            p.at(
                key,
                "nats_url",
                format!("expected a nats:// URL (got {:?})", crate::redact::url(url)),
            );
        }
    }
    if raw.window == 0 {
        p.at(key, "window", "must be greater than 0");
    } else if raw.window > MAX_WINDOW {
        let msg = format!(
            "at most {MAX_WINDOW} (each subscription keeps up to this many acknowledgements)"
        );
        p.at(key, "window", msg);
    }
    for (field, value) in [
        (
            "max_subscriptions_per_client",
            raw.max_subscriptions_per_client,
        ),
        (
            "max_subscriptions_per_connection",
            raw.max_subscriptions_per_connection,
        ),
        (
            "max_subscriptions_per_topic",
            raw.max_subscriptions_per_topic,
        ),
    ] {
        if value == 0 {
            p.at(key, field, "must be greater than 0");
        }
    }
    PersistenceConfig {
        backend,
        path,
        nats_url,
        window: raw.window.max(1),
        topics: persistent_topics(topics, p),
        caps: Caps {
            per_owner: raw.max_subscriptions_per_client,
            per_connection: raw.max_subscriptions_per_connection,
            per_topic: raw.max_subscriptions_per_topic,
        },
    }
}

fn persistent_topics(raw: &[RawPersistentTopic], p: &mut Problems) -> Topics {
    let mut entries: Vec<(String, TopicPolicy)> = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        let key = format!("persistent_topics[{i}]");
        let Some(pattern) = t.topic.as_deref() else {
            p.at(&key, "topic", "required");
            continue;
        };
        if let Err(e) = crate::pubsub::topic::validate_pattern(pattern) {
            p.at(&key, "topic", e);
        }
        if entries.iter().any(|(seen, _)| seen == pattern) {
            p.at(&key, "topic", format!("{pattern:?} is listed twice"));
        }
        for (field, value) in [
            ("max_age_seconds", t.max_age_seconds),
            ("max_count", t.max_count),
            ("max_bytes", t.max_bytes),
        ] {
            if value == Some(0) {
                p.at(
                    &key,
                    field,
                    "must be greater than 0 (leave it out for no limit)",
                );
            }
        }
        let ack_timeout = p.millis(&key, "ack_timeout_ms", t.ack_timeout_ms);
        let policy = TopicPolicy {
            retention: Retention {
                max_age: t.max_age_seconds.map(Duration::from_secs),
                max_count: t.max_count,
                max_bytes: t.max_bytes,
            },
            ack_timeout,
        };
        entries.push((pattern.to_owned(), policy));
    }
    Topics::new(entries)
}
