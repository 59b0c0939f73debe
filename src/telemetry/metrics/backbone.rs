//! The pub/sub backbone's families (`[pubsub] backend = "nats"`): the NATS
//! connection, its subscriptions, events across it and events lost. No
//! topic is ever a label.

use prometheus::{Counter, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use super::counter;
use crate::pubsub::nats::{Loss, Meters};

/// The backbone families.
#[derive(Debug, Clone)]
pub struct BackboneMetrics {
    /// 1 while connected to NATS.
    pub connected: IntGauge,
    /// NATS connections lost.
    pub disconnects: IntCounter,
    /// Seconds disconnected from NATS after having connected.
    pub disconnected_seconds: Counter,
    /// NATS subscriptions open (distinct patterns held here).
    pub subscriptions: IntGauge,
    /// Events across the backbone, by direction (`out`: written to NATS,
    /// `in`: received and fanned out here).
    pub events: IntCounterVec,
    /// Events lost, by reason.
    pub dropped: IntCounterVec,
}

// === impl BackboneMetrics ===

impl BackboneMetrics {
    pub(super) fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let connected = IntGauge::new(
            "switchyard_pubsub_nats_connected",
            "1 while the pub/sub backbone is connected to NATS",
        )?;
        registry.register(Box::new(connected.clone()))?;
        let subscriptions = IntGauge::new(
            "switchyard_pubsub_nats_subscriptions",
            "NATS subscriptions of the pub/sub backbone (distinct patterns held here)",
        )?;
        registry.register(Box::new(subscriptions.clone()))?;
        let disconnected_seconds = Counter::with_opts(Opts::new(
            "switchyard_pubsub_nats_disconnected_seconds_total",
            "Time the pub/sub backbone spent disconnected from NATS (events missed)",
        ))?;
        registry.register(Box::new(disconnected_seconds.clone()))?;
        let disconnects = IntCounter::new(
            "switchyard_pubsub_nats_disconnects_total",
            "NATS connections of the pub/sub backbone lost",
        )?;
        registry.register(Box::new(disconnects.clone()))?;
        let m = BackboneMetrics {
            connected,
            disconnects,
            disconnected_seconds,
            subscriptions,
            events: counter(
                registry,
                "pubsub_nats_events_total",
                "Events across the pub/sub backbone",
                &["direction"],
            )?,
            dropped: counter(
                registry,
                "pubsub_nats_events_dropped_total",
                "Events the pub/sub backbone lost",
                &["reason"],
            )?,
        };
        for direction in ["in", "out"] {
            m.events.with_label_values(&[direction]);
        }
        for reason in Loss::ALL {
            m.dropped.with_label_values(&[reason.as_str()]);
        }
        Ok(m)
    }

    /// The handles the backbone reports to.
    pub fn meters(&self) -> Meters {
        Meters {
            connected: self.connected.clone(),
            disconnects: self.disconnects.clone(),
            disconnected_seconds: self.disconnected_seconds.clone(),
            subscriptions: self.subscriptions.clone(),
            published: self.events.with_label_values(&["out"]),
            received: self.events.with_label_values(&["in"]),
            dropped: Loss::ALL.map(|r| self.dropped.with_label_values(&[r.as_str()])),
        }
    }
}
