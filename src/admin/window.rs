//! Latency percentiles and request rates over the last minute, per
//! listener and per upstream, for the status page.
//!
//! Nothing is added to the data path: the admin listener snapshots the
//! request-duration histograms the data path already fills (client-observed
//! `switchyard_request_duration_seconds` summed per listener, upstream-only
//! `switchyard_upstream_request_duration_seconds` per upstream) every
//! [`SAMPLE_EVERY`], keeping the last [`SAMPLES`]. A figure is the
//! difference between now and the oldest snapshot at most [`WINDOW`] old:
//! the rate is calls per second, p50/p99 are interpolated inside the
//! histogram's buckets (as Prometheus' `histogram_quantile` does), so they
//! are as precise as the buckets.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus::proto::{MetricFamily, MetricType};

use crate::telemetry::metrics::Metrics;

/// Snapshot period.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The span figures cover.
pub(super) const WINDOW: Duration = Duration::from_secs(60);
/// Snapshots kept: a full window plus the one it starts from.
const SAMPLES: usize = 13;

const LISTENER_FAMILY: &str = "switchyard_request_duration_seconds";
const UPSTREAM_FAMILY: &str = "switchyard_upstream_request_duration_seconds";

/// Whose latency: a listener (client-observed) or an upstream (its own).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Series {
    Listener(String),
    Upstream(String),
}

/// Cumulative counts of one series at one time.
#[derive(Debug, Clone, Default)]
struct Hist {
    count: u64,
    /// `(upper bound, cumulative count)`, ascending; `+Inf` excluded.
    buckets: Vec<(f64, u64)>,
}

#[derive(Debug)]
struct Snapshot {
    at: Instant,
    series: BTreeMap<Series, Hist>,
}

/// The kept snapshots.
#[derive(Debug, Default)]
pub(super) struct Window {
    samples: Mutex<VecDeque<Snapshot>>,
}

/// One series over the window.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Figures {
    /// Calls settled per second.
    pub(super) rate: f64,
    /// Median, seconds; `None` without calls.
    pub(super) p50: Option<f64>,
    /// 99th percentile, seconds; `None` without calls.
    pub(super) p99: Option<f64>,
    /// Calls in the window.
    pub(super) calls: u64,
}

// === impl Window ===

impl Window {
    /// Takes a snapshot now, dropping the oldest beyond [`SAMPLES`].
    pub(super) fn sample(&self, metrics: &Metrics) {
        let snap = snapshot(metrics, Instant::now());
        let mut samples = self.samples.lock();
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back(snap);
    }

    /// Figures for every series, and the span they cover.
    pub(super) fn figures(&self, metrics: &Metrics) -> (Duration, BTreeMap<Series, Figures>) {
        let now = snapshot(metrics, Instant::now());
        let samples = self.samples.lock();
        let base = samples
            .iter()
            .find(|s| now.at.duration_since(s.at) <= WINDOW + SAMPLE_EVERY / 2);
        let Some(base) = base else {
            return (Duration::ZERO, BTreeMap::new());
        };
        let span = now.at.duration_since(base.at);
        let out = now
            .series
            .iter()
            .map(|(key, hist)| {
                let before = base.series.get(key).cloned().unwrap_or_default();
                (key.clone(), figures(hist, &before, span))
            })
            .collect();
        (span, out)
    }
}

/// Reads both histogram families, summing the listener one over upstreams.
fn snapshot(metrics: &Metrics, at: Instant) -> Snapshot {
    let mut series = BTreeMap::new();
    for family in metrics.registry().gather() {
        let key: fn(&str) -> Series = match family.name() {
            LISTENER_FAMILY => |n| Series::Listener(n.to_owned()),
            UPSTREAM_FAMILY => |n| Series::Upstream(n.to_owned()),
            _ => continue,
        };
        let label = if family.name() == LISTENER_FAMILY {
            "listener"
        } else {
            "upstream"
        };
        add_family(&family, label, key, &mut series);
    }
    Snapshot { at, series }
}

fn add_family(
    family: &MetricFamily,
    label: &str,
    key: fn(&str) -> Series,
    series: &mut BTreeMap<Series, Hist>,
) {
    if family.get_field_type() != MetricType::HISTOGRAM {
        return;
    }
    for m in family.get_metric() {
        let Some(name) = m.get_label().iter().find(|l| l.name() == label) else {
            continue;
        };
        let h = m.get_histogram();
        let entry = series.entry(key(name.value())).or_default();
        entry.count += h.get_sample_count();
        let buckets = h
            .get_bucket()
            .iter()
            .filter(|b| b.upper_bound().is_finite());
        for (i, b) in buckets.enumerate() {
            match entry.buckets.get_mut(i) {
                Some(slot) => slot.1 += b.cumulative_count(),
                None => entry.buckets.push((b.upper_bound(), b.cumulative_count())),
            }
        }
    }
}

/// The window's figures from two cumulative snapshots `span` apart.
fn figures(now: &Hist, before: &Hist, span: Duration) -> Figures {
    let calls = now.count.saturating_sub(before.count);
    let secs = span.as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let rate = if secs > 0.0 { calls as f64 / secs } else { 0.0 };
    let deltas: Vec<(f64, u64)> = now
        .buckets
        .iter()
        .enumerate()
        .map(|(i, (bound, c))| {
            let old = before.buckets.get(i).map_or(0, |b| b.1);
            (*bound, c.saturating_sub(old))
        })
        .collect();
    Figures {
        rate,
        p50: quantile(0.5, calls, &deltas),
        p99: quantile(0.99, calls, &deltas),
        calls,
    }
}

/// The `q` quantile of `total` observations in cumulative `buckets`,
/// interpolated linearly in the bucket it falls in. Above the last finite
/// bound it is that bound (the figure reads "at least").
fn quantile(q: f64, total: u64, buckets: &[(f64, u64)]) -> Option<f64> {
    if total == 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let rank = q * total as f64;
    let mut lower = (0.0, 0u64);
    for &(bound, cumulative) in buckets {
        #[allow(clippy::cast_precision_loss)]
        if cumulative as f64 >= rank {
            let (lo_bound, lo_count) = lower;
            let in_bucket = cumulative.saturating_sub(lo_count);
            if in_bucket == 0 {
                return Some(bound);
            }
            #[allow(clippy::cast_precision_loss)]
            let share = (rank - lo_count as f64) / in_bucket as f64;
            return Some(lo_bound + (bound - lo_bound) * share);
        }
        lower = (bound, cumulative);
    }
    buckets.last().map(|b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        // 100 calls: 50 at most 1 ms, 49 more at most 10 ms, 1 at most 100 ms.
        let buckets = [(0.001, 50), (0.01, 99), (0.1, 100)];
        assert_eq!(quantile(0.5, 100, &buckets), Some(0.001));
        let p99 = quantile(0.99, 100, &buckets).expect("p99");
        assert!((p99 - 0.01).abs() < 1e-12, "{p99}");
        assert_eq!(quantile(0.5, 0, &buckets), None);
        // Everything above the last finite bound.
        assert_eq!(quantile(0.5, 3, &[(0.001, 0), (30.0, 0)]), Some(30.0));
    }

    #[test]
    fn figures_are_the_difference_over_the_span() {
        let before = Hist {
            count: 10,
            buckets: vec![(0.001, 10), (0.01, 10)],
        };
        let now = Hist {
            count: 40,
            buckets: vec![(0.001, 10), (0.01, 40)],
        };
        let f = figures(&now, &before, Duration::from_secs(30));
        assert_eq!(f.calls, 30);
        assert!((f.rate - 1.0).abs() < 1e-12);
        let p50 = f.p50.expect("p50");
        assert!(p50 > 0.001 && p50 < 0.01, "{p50}");
    }

    #[test]
    fn a_window_sums_listeners_over_upstreams_and_keeps_a_bounded_history() {
        let metrics = Metrics::new().expect("metrics");
        let w = Window::default();
        for _ in 0..SAMPLES + 5 {
            w.sample(&metrics);
        }
        assert_eq!(w.samples.lock().len(), SAMPLES);
        for upstream in ["a", "b"] {
            metrics
                .request_duration
                .with_label_values(&["l", upstream])
                .observe_duration(Duration::from_millis(2));
        }
        metrics
            .upstream_request_duration
            .with_label_values(&["a"])
            .observe_duration(Duration::from_millis(1));
        let (_, figures) = w.figures(&metrics);
        assert_eq!(figures[&Series::Listener("l".into())].calls, 2);
        assert_eq!(figures[&Series::Upstream("a".into())].calls, 1);
    }
}
