//! The guard of one call in flight on an upstream.

use std::time::Instant;

use super::sharded::{Gauge, Histogram};

/// One call in flight on an upstream: holds the in-flight gauge up until
/// dropped. See [`Metrics::start_upstream_call`](super::Metrics::start_upstream_call).
#[derive(Debug)]
#[must_use = "the call counts as in flight only while this guard lives"]
pub struct UpstreamCall {
    in_flight: Gauge,
    duration: Histogram,
    started: Instant,
}

// === impl UpstreamCall ===

impl UpstreamCall {
    /// Starts a call on resolved handles (see
    /// [`Metrics::start_upstream_call`](super::Metrics::start_upstream_call)).
    pub fn start(in_flight: Gauge, duration: Histogram) -> Self {
        Self::start_at(in_flight, duration, Instant::now())
    }

    /// Like [`start`](Self::start), with the time already read.
    pub fn start_at(in_flight: Gauge, duration: Histogram, started: Instant) -> Self {
        in_flight.inc();
        UpstreamCall {
            in_flight,
            duration,
            started,
        }
    }

    /// The reply arrived: records the upstream-only duration. Calls that
    /// time out or are abandoned are not recorded (they have no duration).
    pub fn settled(self) {
        self.duration.observe_duration(self.started.elapsed());
    }
}

impl Drop for UpstreamCall {
    fn drop(&mut self) {
        self.in_flight.dec();
    }
}
