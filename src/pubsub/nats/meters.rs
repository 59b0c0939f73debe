//! The series the backbone reports to, resolved by the composition root
//! (`telemetry::metrics` declares the families; this layer holds the
//! handles).

use prometheus::{Counter, IntCounter, IntGauge};

/// Why an event did not cross the backbone (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Its data is larger than `max_payload_bytes`.
    Oversize,
    /// A message whose subject is no topic or whose payload is not JSON.
    Invalid,
    /// The NATS client's pending limit for a subscription was reached
    /// (`pending_messages`), as the client reports it.
    SlowConsumer,
    /// The local publish queue was full (`publish_queue`).
    QueueFull,
    /// NATS was not connected when a local event was to be written.
    Disconnected,
    /// A local upstream event on an instance with
    /// `publish_upstream_events = false`.
    NotPublisher,
}

/// The backbone's series. Cheap to clone (each handle is an `Arc`).
#[derive(Debug, Clone)]
pub struct Meters {
    /// 1 while the NATS connection is up.
    pub connected: IntGauge,
    /// Connections lost.
    pub disconnects: IntCounter,
    /// Seconds spent disconnected (after having connected once): the
    /// gap during which events from elsewhere were missed.
    pub disconnected_seconds: Counter,
    /// NATS subscriptions open now (distinct patterns held here).
    pub subscriptions: IntGauge,
    /// Local events written to NATS.
    pub published: IntCounter,
    /// Messages from NATS delivered to this instance's subscribers (once
    /// per subscription that had holders to deliver one to).
    pub received: IntCounter,
    /// Events lost, one series per [`Loss`] reason, in
    /// [`Loss::ALL`] order.
    pub dropped: [IntCounter; 6],
}

// === impl Loss ===

impl Loss {
    /// Every reason, in the order of [`Meters::dropped`].
    pub const ALL: [Loss; 6] = [
        Loss::Oversize,
        Loss::Invalid,
        Loss::SlowConsumer,
        Loss::QueueFull,
        Loss::Disconnected,
        Loss::NotPublisher,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Loss::Oversize => "oversize",
            Loss::Invalid => "invalid",
            Loss::SlowConsumer => "slow_consumer",
            Loss::QueueFull => "queue_full",
            Loss::Disconnected => "disconnected",
            Loss::NotPublisher => "not_publisher",
        }
    }

    fn index(self) -> usize {
        match self {
            Loss::Oversize => 0,
            Loss::Invalid => 1,
            Loss::SlowConsumer => 2,
            Loss::QueueFull => 3,
            Loss::Disconnected => 4,
            Loss::NotPublisher => 5,
        }
    }
}

// === impl Meters ===

impl Meters {
    /// Counts one event lost for `reason`.
    pub fn drop(&self, reason: Loss) {
        self.dropped[reason.index()].inc();
    }

    /// Series registered nowhere (unit tests, tools).
    pub fn unregistered() -> Result<Self, prometheus::Error> {
        let counter = |name: &str| IntCounter::new(name, name);
        let dropped = Loss::ALL.map(|d| IntCounter::new(d.as_str(), d.as_str()));
        let [a, b, c, d, e, f] = dropped;
        Ok(Meters {
            connected: IntGauge::new("connected", "connected")?,
            disconnects: counter("disconnects")?,
            disconnected_seconds: Counter::new("disconnected_seconds", "gap")?,
            subscriptions: IntGauge::new("subscriptions", "subscriptions")?,
            published: counter("published")?,
            received: counter("received")?,
            dropped: [a?, b?, c?, d?, e?, f?],
        })
    }
}
