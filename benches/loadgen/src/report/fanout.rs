//! The fanout scenario's table and its verdicts: 1,000 subscribers at
//! 1,000 events/s with p99 <= 5 ms, and 100 subscribers with p99 <= 1 ms,
//! each with no loss for the subscribers that keep up.

use super::super::measure::{RunResult, ScenarioResult};
use super::verdict::{Status, Verdict};
use super::{dash, opt, row};

/// The targets: subscribers (as a number and as written), and the
/// delivery latency bound in µs.
const TARGETS: [(usize, &str, f64); 2] = [(1000, "1,000", 5000.0), (100, "100", 1000.0)];
/// Share of `subscribers × published events/s` that must be delivered.
const MIN_DELIVERED_SHARE: f64 = 0.99;

/// The fanout table.
pub(crate) fn table(sc: &ScenarioResult, out: &mut String) {
    out.push_str(
        "| target | subscribers | published ev/s | delivered ev/s | per subscriber ev/s | p50 µs \
         | p90 µs | p99 µs | p99.9 µs | max µs | errors | mismatched | lost | closed \
         | server CPU s | server CPU % | daemon CPU s | loadgen CPU s | other CPU s \
         | server peak RSS MiB |\n",
    );
    out.push_str(&"|---".repeat(20));
    out.push_str("|\n");
    for r in &sc.runs {
        let f = r.fanout.unwrap_or_default();
        let [p50, p90, p99, p999, max] = r.latency_us;
        let per_sub = (f.subscribed > 0).then(|| f.delivered_per_s / f.subscribed as f64);
        let cpu_pct = r
            .server_cpu_s
            .filter(|_| r.window_secs > 0.0)
            .map(|s| s * 100.0 / r.window_secs);
        let cells = [
            r.label.clone(),
            format!("{}/{}", f.subscribed, f.requested),
            format!("{:.0}", f.published_per_s),
            format!("{:.0}", f.delivered_per_s),
            opt(per_sub, 0),
            format!("{p50:.1}"),
            format!("{p90:.1}"),
            format!("{p99:.1}"),
            format!("{p999:.1}"),
            format!("{max:.1}"),
            r.errors.to_string(),
            r.mismatches.to_string(),
            r.lost.to_string(),
            f.closed.to_string(),
            opt(r.server_cpu_s, 2),
            opt(cpu_pct, 0),
            opt(r.daemon_cpu_s, 2),
            opt(r.loadgen_cpu_s, 2),
            opt(r.other_cpu_s, 2),
            opt(r.server_peak_rss_kib.map(|k| k as f64 / 1024.0), 1),
        ];
        row(out, &cells);
    }
}

/// Judges the 1,000- and the 100-subscriber rows (the largest that ran,
/// when it is smaller than 1,000, is still judged against the first and
/// named; a missing 100 row is a failure).
pub(crate) fn verdict(sc: Option<&ScenarioResult>, out: &mut Vec<Verdict>) {
    for (subscribers, written, max_p99) in TARGETS {
        let target = format!(
            "fanout {written} subscribers x 1,000 events/s: p99 <= {} ms, zero loss",
            max_p99 / 1000.0
        );
        let Some(sc) = sc else {
            out.push(Verdict {
                target,
                status: Status::Skip,
                detail: String::from("scenario not run"),
            });
            continue;
        };
        let row = if subscribers == TARGETS[0].0 {
            sc.runs
                .iter()
                .max_by_key(|r| r.fanout.map_or(0, |f| f.requested))
        } else {
            sc.runs
                .iter()
                .find(|r| r.fanout.is_some_and(|f| f.requested == subscribers))
        };
        let (status, detail) = match row {
            Some(r) if r.failure.is_none() && r.fanout.is_some() => judge(r, subscribers, max_p99),
            Some(r) => (
                Status::Fail,
                r.failure
                    .clone()
                    .unwrap_or_else(|| String::from("no measurement")),
            ),
            None => (Status::Fail, String::from("no run")),
        };
        out.push(Verdict {
            target: format!("{target} [{}]", row.map_or_else(dash, |r| r.label.clone())),
            status,
            detail,
        });
    }
}

/// One row against its target: `subscribers` at least, p99 at most
/// `max_p99` µs.
fn judge(r: &RunResult, subscribers: usize, max_p99: f64) -> (Status, String) {
    let f = r.fanout.unwrap_or_default();
    let p99 = r.latency_us[2];
    let expected = f.published_per_s * f.subscribed as f64;
    let share = if expected > 0.0 {
        f.delivered_per_s / expected
    } else {
        0.0
    };
    let ok = p99 <= max_p99
        && r.lost == 0
        && r.mismatches == 0
        && r.errors == 0
        && f.closed == 0
        && f.subscribed == f.requested
        && f.requested >= subscribers
        && share >= MIN_DELIVERED_SHARE;
    let detail = format!(
        "{} of {} subscribed; p99 {p99:.1} µs (limit {max_p99:.0} µs, {} by {:.1} µs); \
         {:.0} of {:.0} events/s delivered ({:.1} %); {} lost, {} mismatched, {} closed, \
         {} errors",
        f.subscribed,
        f.requested,
        if p99 <= max_p99 { "under" } else { "over" },
        (max_p99 - p99).abs(),
        f.delivered_per_s,
        expected,
        share * 100.0,
        r.lost,
        r.mismatches,
        f.closed,
        r.errors,
    );
    (if ok { Status::Pass } else { Status::Fail }, detail)
}
