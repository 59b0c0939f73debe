//! What an upstream publishes to the pub/sub broker: its notifications
//! (`publish_notifications`, `topics`) and its streaming feeds
//! (`[[upstreams.<name>.feeds]]`).

use std::collections::BTreeMap;

use super::problems::Problems;
use super::raw::RawUpstream;
use crate::dialect::Dialect;

/// An upstream's publishing settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Publish {
    /// Publish notifications from shared connections.
    pub notifications: bool,
    /// Topic by method, instead of `<upstream>.<method>`.
    pub topics: BTreeMap<String, String>,
    /// Streaming feeds, opened while someone subscribes to their topic.
    pub feeds: Vec<Feed>,
}

/// One streaming feed: `method` called with `params`, its events published
/// under `topic`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feed {
    /// The streaming method.
    pub method: String,
    /// Its params, as JSON text.
    pub params: Option<String>,
    /// The concrete topic its events are published under.
    pub topic: String,
}

// === impl Publish ===

impl Publish {
    /// The topic a notification `method` of `upstream` is published under
    /// (`/` in a Sideband event name becomes `.`).
    pub fn topic_for(&self, upstream: &str, method: &str) -> String {
        match self.topics.get(method) {
            Some(topic) => topic.clone(),
            None => format!("{upstream}.{}", method.replace('/', ".")),
        }
    }
}

/// Validates the publishing keys of upstream `name`.
pub(super) fn publish(
    key: &str,
    name: &str,
    raw: &RawUpstream,
    dialect: Option<Dialect>,
    p: &mut Problems,
) -> Publish {
    for (method, topic) in &raw.topics {
        if let Err(e) = crate::pubsub::topic::validate_topic(topic) {
            p.at(key, &format!("topics.{method}"), e);
        }
    }
    let mut feeds = Vec::with_capacity(raw.feeds.len());
    for (i, feed) in raw.feeds.iter().enumerate() {
        let field = format!("feeds[{i}]");
        if dialect.is_some_and(Dialect::is_websocket) {
            p.at(
                key,
                &field,
                "feeds are streaming NDJSON methods: ndjson upstreams only",
            );
        }
        if feed.method.is_empty() {
            p.at(key, &format!("{field}.method"), "must not be empty");
        }
        let topic = feed
            .topic
            .clone()
            .unwrap_or_else(|| format!("{name}.{}", feed.method));
        if let Err(e) = crate::pubsub::topic::validate_topic(&topic) {
            p.at(key, &format!("{field}.topic"), e);
        }
        if feeds.iter().any(|f: &Feed| f.topic == topic) {
            p.at(
                key,
                &format!("{field}.topic"),
                format!("{topic:?} is fed twice"),
            );
        }
        feeds.push(Feed {
            method: feed.method.clone(),
            params: feed.params.as_ref().map(ToString::to_string),
            topic,
        });
    }
    Publish {
        notifications: raw.publish_notifications,
        topics: raw.topics.clone(),
        feeds,
    }
}
