//! The persist scenario's table: stored and delivered events/s,
//! publish → delivery latency and the backlog's resume time, per store
//! backend. No verdict: the issue asks for the figures, not a target.

use super::super::measure::ScenarioResult;
use super::{opt, row};

/// The persist table.
pub(crate) fn table(sc: &ScenarioResult, out: &mut String) {
    out.push_str(
        "| target | subscribers | published ev/s | stored ev/s | delivered ev/s | p50 µs \
         | p99 µs | max µs | acks | not stored | errors | mismatched | lost | backlog | resume ms \
         | server CPU s | server peak RSS MiB |\n",
    );
    out.push_str(&"|---".repeat(17));
    out.push_str("|\n");
    for r in &sc.runs {
        let p = r.persist.unwrap_or_default();
        let [p50, _, p99, _, max] = r.latency_us;
        let cells = [
            r.label.clone(),
            p.subscribed.to_string(),
            format!("{:.0}", p.published_per_s),
            format!("{:.0}", p.stored_per_s),
            format!("{:.0}", p.delivered_per_s),
            format!("{p50:.1}"),
            format!("{p99:.1}"),
            format!("{max:.1}"),
            p.acked.to_string(),
            p.not_stored.to_string(),
            r.errors.to_string(),
            r.mismatches.to_string(),
            r.lost.to_string(),
            p.backlog.to_string(),
            format!("{:.0}", p.resume_ms),
            opt(r.server_cpu_s, 2),
            opt(r.server_peak_rss_kib.map(|k| k as f64 / 1024.0), 1),
        ];
        row(out, &cells);
    }
}
