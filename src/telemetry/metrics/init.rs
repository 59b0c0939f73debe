//! [`Metrics::init_labels`]: the series that exist from the first scrape.
//!
//! A labelled family shows up in the text output only after one of its
//! label sets was touched. Touching every set known from the configuration
//! and the closed label sets at bind time means `rate()` in dashboards and
//! alerts sees zeros instead of "no data", and a renamed metric is caught
//! by `tests/dashboards.rs` without having to provoke every error first.

use super::{
    Direction, DropReason, Limit, Metrics, ProtocolError, Quirk, RejectReason, RequestOutcome,
    Unmatched,
};
use crate::config::{Config, UpstreamConfig, UpstreamMode};
use crate::dialect::Dialect;
use crate::envelope::Kind;
use crate::error::{ErrorKind, Side};

/// Every message kind.
const KINDS: [Kind; 4] = [
    Kind::Request,
    Kind::Notification,
    Kind::Response,
    Kind::Error,
];

// === impl Metrics ===

impl Metrics {
    /// Touches every label set known from `cfg` and the closed label sets,
    /// so the families exist (at zero) from the first scrape, and sets
    /// `switchyard_upstream_info`. Called once by `app::bind`.
    pub fn init_labels(&self, cfg: &Config) {
        for l in &cfg.listeners {
            let name = l.name.as_str();
            self.connections_open.with_label_values(&[name]);
            self.connections_accepted.with_label_values(&[name]);
            self.batch_size.with_label_values(&[name]);
            self.outbox_high_water.with_label_values(&[name]);
            self.outbox_queued_bytes_max.with_label_values(&[name]);
            self.events.init_listener(name);
            self.persist.delivered.with_label_values(&[name]);
            for reason in RejectReason::ALL {
                let labels = [name, reason.as_str()];
                self.connections_rejected.with_label_values(&labels);
            }
            for side in Side::ALL {
                for kind in ErrorKind::ALL {
                    let labels = [name, side.as_str(), kind.as_str()];
                    self.errors.with_label_values(&labels);
                }
            }
            for limit in Limit::ALL {
                self.limit_rejections
                    .with_label_values(&[name, limit.as_str()]);
            }
            for upstream in l.routes.upstreams() {
                self.request_duration.with_label_values(&[name, upstream]);
                for outcome in RequestOutcome::INITIAL {
                    let labels = [name, upstream.as_str(), outcome.as_str()];
                    self.requests.with_label_values(&labels);
                }
            }
            self.init_side(l.dialect, Side::Client);
        }
        for u in &cfg.upstreams {
            let name = u.name.as_str();
            self.upstream_connections.with_label_values(&[name]);
            self.upstream_reconnects.with_label_values(&[name]);
            self.correlator_entries.with_label_values(&[name]);
            self.events.published.with_label_values(&[name]);
            self.events.feeds_open.with_label_values(&[name]);
            self.upstream_in_flight.with_label_values(&[name]);
            self.upstream_request_duration.with_label_values(&[name]);
            self.upstream_info.with_label_values(&info_labels(u)).set(1);
            self.init_side(u.dialect, Side::Upstream);
            if matches!(u.target, crate::config::UpstreamTarget::Process(_)) {
                self.processes.init_upstream(name);
            }
        }
    }

    /// Drops the `upstream_info` series of an upstream a reload removed
    /// or changed (the new definition, if any, gets its own).
    pub fn forget_upstream(&self, u: &UpstreamConfig) {
        // Absent already is fine.
        let _ = self.upstream_info.remove_label_values(&info_labels(u));
    }

    /// The per-dialect series of one side: traffic, and every protocol
    /// error and drop reason that side can report.
    fn init_side(&self, dialect: Dialect, side: Side) {
        let (d, s) = (dialect.as_str(), side.as_str());
        for direction in [Direction::In, Direction::Out] {
            let dir = direction.as_str();
            self.bytes.with_label_values(&[d, s, dir]);
            self.message_size.with_label_values(&[d, s, dir]);
            for kind in KINDS {
                self.messages.with_label_values(&[d, s, dir, kind.as_str()]);
            }
        }
        for quirk in Quirk::ALL {
            self.peer_quirks.with_label_values(&[d, quirk.as_str()]);
        }
        for reason in ProtocolError::ALL.into_iter().filter(|r| r.seen_on(side)) {
            self.protocol_errors
                .with_label_values(&[d, s, reason.as_str()]);
        }
        for reason in DropReason::ALL.into_iter().filter(|r| r.seen_on(side)) {
            self.dropped_messages
                .with_label_values(&[d, s, reason.as_str()]);
        }
        if side == Side::Upstream {
            for kind in Unmatched::ALL {
                let labels = [d, s, kind.as_str()];
                self.unmatched_responses.with_label_values(&labels);
            }
        }
    }
}

/// The labels of an upstream's `upstream_info` series.
fn info_labels(u: &UpstreamConfig) -> [&str; 4] {
    let mode = match u.mode {
        UpstreamMode::Shared => "shared",
        UpstreamMode::PerClient => "per-client",
    };
    let required = if u.required { "true" } else { "false" };
    [u.name.as_str(), u.dialect.as_str(), mode, required]
}
