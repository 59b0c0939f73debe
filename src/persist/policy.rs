//! Which topics are persistent, and what each keeps: the
//! `[[persistent_topics]]` entries, in configuration order.
//!
//! A concrete topic is persistent when one entry's pattern matches it; the
//! first such entry gives its retention and ack timeout. A topic is stored
//! once, whatever number of entries match it.

use std::time::Duration;

use super::{Retention, DEFAULT_ACK_TIMEOUT};
use crate::pubsub::topic;

/// What one persistent topic keeps, and how long a delivery waits for its
/// acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicPolicy {
    /// What the topic keeps.
    pub retention: Retention,
    /// An unacknowledged message is sent again on the same connection
    /// after this long.
    pub ack_timeout: Duration,
}

/// The persistent topics: `(pattern, policy)` in configuration order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topics {
    entries: Vec<(String, TopicPolicy)>,
}

// === impl TopicPolicy ===

impl Default for TopicPolicy {
    fn default() -> Self {
        TopicPolicy {
            retention: Retention::default(),
            ack_timeout: DEFAULT_ACK_TIMEOUT,
        }
    }
}

// === impl Topics ===

impl Topics {
    /// The entries, patterns expected valid (checked configuration).
    pub fn new(entries: Vec<(String, TopicPolicy)>) -> Self {
        Topics { entries }
    }

    /// The policy of the concrete `topic`, if it is persistent.
    pub fn policy(&self, topic: &str) -> Option<&TopicPolicy> {
        self.entries
            .iter()
            .find(|(pattern, _)| topic::matches(pattern, topic))
            .map(|(_, policy)| policy)
    }

    /// True when no topic is persistent.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in configuration order.
    pub fn entries(&self) -> &[(String, TopicPolicy)] {
        &self.entries
    }

    /// The shortest max age of any entry (how often retention by age is
    /// worth sweeping), if any entry has one.
    pub fn shortest_max_age(&self) -> Option<Duration> {
        self.entries
            .iter()
            .filter_map(|(_, p)| p.retention.max_age)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_entry_decides() {
        let short = TopicPolicy {
            ack_timeout: Duration::from_millis(5),
            ..TopicPolicy::default()
        };
        let topics = Topics::new(vec![
            ("orders.eu".to_owned(), short),
            ("orders.*".to_owned(), TopicPolicy::default()),
        ]);
        assert_eq!(topics.policy("orders.eu"), Some(&short));
        assert_eq!(topics.policy("orders.us"), Some(&TopicPolicy::default()));
        assert_eq!(topics.policy("orders"), None);
        assert_eq!(topics.policy("other.eu"), None);
    }
}
