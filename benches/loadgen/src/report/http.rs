//! The http scenario's table: each row against floor H under the same
//! load (HTTP/1.1 rows against the HTTP/1.1 floor, HTTP/2 against HTTP/2).

use super::super::measure::{RunResult, ScenarioResult};
use super::super::target::Role;
use super::{cpu_us_per_request, dash, load_cell, opt, ratio, row};

/// `xH` is req/s over floor H's with the same load; `p99-H µs` the p99
/// over floor H's.
pub(super) fn table(sc: &ScenarioResult, out: &mut String) {
    out.push_str(
        "| target | load | req/s | xH | p50 µs | p90 µs | p99 µs | p99.9 µs | p99-H µs | errors \
         | mismatched | lost | server CPU s | CPU µs/req | daemon CPU s | loadgen CPU s \
         | other CPU s | server peak RSS MiB |\n",
    );
    out.push_str(&"|---".repeat(18));
    out.push_str("|\n");
    for r in &sc.runs {
        let floor = floor_of(sc, r);
        let [p50, p90, p99, p999, _] = r.latency_us;
        let cells = [
            r.label.clone(),
            load_cell(r),
            format!("{:.0}", r.rps),
            ratio(r.rps, floor.map(|h| h.rps)),
            format!("{p50:.1}"),
            format!("{p90:.1}"),
            format!("{p99:.1}"),
            format!("{p999:.1}"),
            floor.map_or_else(dash, |h| format!("{:+.1}", p99 - h.latency_us[2])),
            r.errors.to_string(),
            r.mismatches.to_string(),
            r.lost.to_string(),
            opt(r.server_cpu_s, 2),
            opt(cpu_us_per_request(r), 1),
            opt(r.daemon_cpu_s, 2),
            opt(r.loadgen_cpu_s, 2),
            opt(r.other_cpu_s, 2),
            opt(r.server_peak_rss_kib.map(|k| k as f64 / 1024.0), 1),
        ];
        row(out, &cells);
    }
}

/// The completed floor H run with the same connections and window as `r`.
fn floor_of<'a>(sc: &'a ScenarioResult, r: &RunResult) -> Option<&'a RunResult> {
    let shape = |x: &RunResult| x.load.map(|l| (l.conns, l.window));
    sc.runs.iter().find(|h| {
        h.role == Role::FloorH && h.failure.is_none() && shape(h).is_some() && shape(h) == shape(r)
    })
}
