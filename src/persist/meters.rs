//! The metrics a backend reports to, resolved for its `backend` label by
//! the composition root (`telemetry::metrics` declares the families; this
//! layer only holds the handles, so every backend, local or NATS, reports
//! the same way).

use prometheus::{Histogram, IntCounter, IntGauge};

/// One backend's series. Cheap to clone (each handle is an `Arc`).
#[derive(Debug, Clone)]
pub struct Meters {
    /// Messages retained now, over all topics.
    pub stored_messages: IntGauge,
    /// Bytes of data retained now, over all topics.
    pub stored_bytes: IntGauge,
    /// Messages stored (publishes that succeeded).
    pub published: IntCounter,
    /// Publishes the store refused or failed, and events still waiting
    /// when the store stopped (never silent: each is also logged,
    /// throttled).
    pub publish_failed: IntCounter,
    /// Message × subscription pairs evicted by retention before that
    /// subscription acknowledged the message.
    pub evicted_unacked: IntCounter,
    /// Messages sent again after their ack timeout, or on resume.
    pub redelivered: IntCounter,
    /// Acknowledgements recorded (re-acknowledgements included).
    pub acks: IntCounter,
    /// Time a store write (publish) takes, seconds.
    pub write_seconds: Histogram,
    /// Subscriptions attached to a connection now.
    pub attached: IntGauge,
}

// === impl Meters ===

impl Meters {
    /// Series registered nowhere (unit tests, tools).
    pub fn unregistered() -> Result<Self, prometheus::Error> {
        let counter = |name: &str| IntCounter::new(name, name);
        let gauge = |name: &str| IntGauge::new(name, name);
        Ok(Meters {
            stored_messages: gauge("stored_messages")?,
            stored_bytes: gauge("stored_bytes")?,
            published: counter("published")?,
            publish_failed: counter("publish_failed")?,
            evicted_unacked: counter("evicted_unacked")?,
            redelivered: counter("redelivered")?,
            acks: counter("acks")?,
            write_seconds: Histogram::with_opts(prometheus::HistogramOpts::new(
                "write_seconds",
                "write_seconds",
            ))?,
            attached: gauge("attached")?,
        })
    }
}
