//! Pub/sub metrics: subscriptions, events published per source upstream,
//! events delivered and dropped per listener. No topic is ever a label.

use prometheus::{IntCounterVec, IntGaugeVec, Registry};

use super::{counter, gauge};

/// Why an event did not reach a subscriber (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventDrop {
    /// The subscriber's outbox was full.
    SlowConsumer,
    /// A holon-rpc subscriber had `max_unanswered_pushes` events unanswered.
    PushWindow,
    /// The event has no form in the subscriber's dialect.
    Untranslatable,
}

/// The pub/sub families.
#[derive(Debug, Clone)]
pub struct EventMetrics {
    /// Subscriptions held, by listener.
    pub subscriptions: IntGaugeVec,
    /// Events published, by source upstream.
    pub published: IntCounterVec,
    /// Events queued for a subscriber, by listener.
    pub delivered: IntCounterVec,
    /// Events a subscriber lost, by listener and reason.
    pub dropped: IntCounterVec,
    /// Streaming feeds open now, by upstream.
    pub feeds_open: IntGaugeVec,
}

// === impl EventDrop ===

impl EventDrop {
    /// Every reason, for the series that exist from the start.
    pub const ALL: [EventDrop; 3] = [
        EventDrop::SlowConsumer,
        EventDrop::PushWindow,
        EventDrop::Untranslatable,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventDrop::SlowConsumer => "slow_consumer",
            EventDrop::PushWindow => "push_window",
            EventDrop::Untranslatable => "untranslatable",
        }
    }
}

// === impl EventMetrics ===

impl EventMetrics {
    pub(super) fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(EventMetrics {
            subscriptions: gauge(
                registry,
                "subscriptions",
                "Pub/sub subscriptions held by client connections",
                &["listener"],
            )?,
            published: counter(
                registry,
                "events_published_total",
                "Events published to the pub/sub broker, by source upstream",
                &["upstream"],
            )?,
            delivered: counter(
                registry,
                "events_delivered_total",
                "Events queued for subscribers",
                &["listener"],
            )?,
            dropped: counter(
                registry,
                "events_dropped_total",
                "Events subscribers lost",
                &["listener", "reason"],
            )?,
            feeds_open: gauge(
                registry,
                "feeds_open",
                "Streaming feeds open to the upstream",
                &["upstream"],
            )?,
        })
    }

    /// Touches the series of listener `name`.
    pub(super) fn init_listener(&self, name: &str) {
        self.subscriptions.with_label_values(&[name]);
        self.delivered.with_label_values(&[name]);
        for reason in EventDrop::ALL {
            self.dropped.with_label_values(&[name, reason.as_str()]);
        }
    }
}
