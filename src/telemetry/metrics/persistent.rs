//! Persistent-subscription metrics, by `backend` (`memory`, `embedded`,
//! `nats`) and, for deliveries, by listener. No topic or subscription id
//! is ever a label.

use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec, Registry};

use super::{counter, gauge, histogram, LATENCY_BUCKETS};
use crate::persist::{BackendKind, Meters};

/// The persistent-subscription families.
#[derive(Debug, Clone)]
pub struct PersistMetrics {
    /// Messages retained now, by backend.
    pub stored_messages: IntGaugeVec,
    /// Bytes of data retained now, by backend.
    pub stored_bytes: IntGaugeVec,
    /// Messages stored, by backend.
    pub published: IntCounterVec,
    /// Events not stored (store failed, or stopped before taking them), by
    /// backend.
    pub publish_failed: IntCounterVec,
    /// Message × subscription pairs evicted before acknowledgement.
    pub evicted_unacked: IntCounterVec,
    /// Messages sent again (ack timeout), by backend.
    pub redelivered: IntCounterVec,
    /// Acknowledgements recorded, by backend.
    pub acks: IntCounterVec,
    /// Store write (publish) time, by backend.
    pub write_seconds: HistogramVec,
    /// Subscriptions attached to a connection now, by backend.
    pub attached: IntGaugeVec,
    /// Persistent messages queued for clients, by listener.
    pub delivered: IntCounterVec,
}

// === impl PersistMetrics ===

impl PersistMetrics {
    pub(super) fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let backend = &["backend"];
        Ok(PersistMetrics {
            stored_messages: gauge(
                registry,
                "persistent_stored_messages",
                "Persistent messages retained",
                backend,
            )?,
            stored_bytes: gauge(
                registry,
                "persistent_stored_bytes",
                "Bytes of persistent message data retained",
                backend,
            )?,
            published: counter(
                registry,
                "persistent_published_total",
                "Persistent messages stored",
                backend,
            )?,
            publish_failed: counter(
                registry,
                "persistent_publish_failed_total",
                "Events of persistent topics not stored (the store failed, or stopped before taking them)",
                backend,
            )?,
            evicted_unacked: counter(
                registry,
                "persistent_evicted_unacked_total",
                "Persistent messages evicted by retention before a subscription acknowledged them (one per subscription)",
                backend,
            )?,
            redelivered: counter(
                registry,
                "persistent_redelivered_total",
                "Persistent messages sent again after their ack timeout",
                backend,
            )?,
            acks: counter(
                registry,
                "persistent_acks_total",
                "Persistent message acknowledgements recorded",
                backend,
            )?,
            write_seconds: histogram(
                registry,
                (
                    "persistent_write_duration_seconds",
                    "Time to store one persistent message",
                ),
                LATENCY_BUCKETS,
                backend,
            )?,
            attached: gauge(
                registry,
                "persistent_subscriptions_attached",
                "Persistent subscriptions attached to a client connection",
                backend,
            )?,
            delivered: counter(
                registry,
                "persistent_delivered_total",
                "Persistent messages queued for clients",
                &["listener"],
            )?,
        })
    }

    /// The series of backend `kind`, for the store to report to.
    pub fn meters(&self, kind: BackendKind) -> Meters {
        let l = [kind.as_str()];
        Meters {
            stored_messages: self.stored_messages.with_label_values(&l),
            stored_bytes: self.stored_bytes.with_label_values(&l),
            published: self.published.with_label_values(&l),
            publish_failed: self.publish_failed.with_label_values(&l),
            evicted_unacked: self.evicted_unacked.with_label_values(&l),
            redelivered: self.redelivered.with_label_values(&l),
            acks: self.acks.with_label_values(&l),
            write_seconds: self.write_seconds.with_label_values(&l),
            attached: self.attached.with_label_values(&l),
        }
    }
}
