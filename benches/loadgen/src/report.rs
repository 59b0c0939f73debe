//! Markdown tables and the pass/fail verdicts of the targets.
//!
//! Ratios are against the floors of the same scenario: `xB` divides a
//! target's req/s by floor B's (the bare WebSocket echo: what the client's
//! own WebSocket work allows), `xB2` by floor B2's (the same echo as a
//! process of its own, as a gateway is), `xC` by floor C's (a byte relay
//! process), `xM` by floor M's (the minimal multiplexing gateway
//! process: what a straightforward correct gateway reaches), `xA` by floor A's (the daemon over NDJSON with no gateway),
//! and `p99-B` is the extra p99 latency over floor B. The http scenario
//! compares with floor H instead (`report/http.rs`).

mod fanout;
mod gateway_cost;
mod http;
mod persist;
mod scaleout;
mod verdict;
mod verdicts;

#[cfg(test)]
mod fixtures;

use std::fmt::Write as _;

use super::measure::{RunResult, ScenarioResult};
use super::target::Role;

pub(crate) use self::verdict::{verdict_lines, Status};
pub(crate) use self::verdicts::verdicts;

/// A scenario's Markdown section: heading, description, table.
pub(crate) fn table(sc: &ScenarioResult) -> String {
    let mut out = format!("### scenario: {}\n\n{}\n\n", sc.name, sc.about);
    if sc.runs.iter().any(|r| r.idle.is_some()) {
        idle_table(sc, &mut out);
    } else if sc.name == "fanout" {
        fanout::table(sc, &mut out);
    } else if sc.name == "scaleout" {
        scaleout::table(sc, &mut out);
    } else if sc.name == "persist" {
        persist::table(sc, &mut out);
    } else if sc.name == "http" {
        http::table(sc, &mut out);
    } else {
        traffic_table(sc, &mut out);
    }
    for r in &sc.runs {
        if let Some(why) = &r.failure {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "\n**{} FAILED**: {why}", r.label);
        }
    }
    out
}

fn traffic_table(sc: &ScenarioResult, out: &mut String) {
    out.push_str(
        "| target | load | req/s | xB | xB2 | xC | xM | xA | p50 µs | p90 µs | p99 µs | p99.9 µs | p99-B µs \
         | errors | mismatched | lost | server CPU s | CPU µs/req | kernel % | switches/req \
         | daemon CPU s | loadgen CPU s | other CPU s | server peak RSS MiB |\n",
    );
    out.push_str(&"|---".repeat(24));
    out.push_str("|\n");
    let floor = |role| {
        sc.runs
            .iter()
            .find(|r| r.role == role && r.failure.is_none())
    };
    let (a, b) = (floor(Role::FloorA), floor(Role::FloorB));
    let (b2, c) = (floor(Role::FloorB2), floor(Role::FloorC));
    let m = floor(Role::FloorM);
    for r in &sc.runs {
        let [p50, p90, p99, p999, _] = r.latency_us;
        let per_req = cpu_us_per_request(r);
        let cells = [
            r.label.clone(),
            load_cell(r),
            format!("{:.0}", r.rps),
            ratio(r.rps, b.map(|b| b.rps)),
            ratio(r.rps, b2.map(|b| b.rps)),
            ratio(r.rps, c.map(|c| c.rps)),
            ratio(r.rps, m.map(|m| m.rps)),
            ratio(r.rps, a.map(|a| a.rps)),
            format!("{p50:.1}"),
            format!("{p90:.1}"),
            format!("{p99:.1}"),
            format!("{p999:.1}"),
            b.map_or_else(dash, |b| format!("{:+.1}", p99 - b.latency_us[2])),
            r.errors.to_string(),
            r.mismatches.to_string(),
            r.lost.to_string(),
            opt(r.server_cpu_s, 2),
            opt(per_req, 1),
            opt(kernel_share(r), 0),
            opt(per_request(r, r.server_switches), 2),
            opt(r.daemon_cpu_s, 2),
            opt(r.loadgen_cpu_s, 2),
            opt(r.other_cpu_s, 2),
            opt(r.server_peak_rss_kib.map(|k| k as f64 / 1024.0), 1),
        ];
        row(out, &cells);
    }
}

/// The measured server's CPU time per verified reply in the window, µs.
fn cpu_us_per_request(r: &RunResult) -> Option<f64> {
    r.server_cpu_s
        .filter(|_| r.rps > 0.0 && r.window_secs > 0.0)
        .map(|s| s * 1e6 / (r.rps * r.window_secs))
}

/// The share of the measured server's CPU time spent in the kernel, %.
fn kernel_share(r: &RunResult) -> Option<f64> {
    let cpu = r.server_cpu_s.filter(|&s| s > 0.0)?;
    Some(r.server_kernel_s? * 100.0 / cpu)
}

/// A count of the measured server's in the window per verified reply.
fn per_request(r: &RunResult, count: Option<u64>) -> Option<f64> {
    let replies = r.rps * r.window_secs;
    (replies > 0.0).then(|| count.map(|c| c as f64 / replies))?
}

fn idle_table(sc: &ScenarioResult, out: &mut String) {
    out.push_str(
        "| target | connections | RSS before MiB | RSS open MiB | per connection KiB \
         | idle CPU ms/s | connect s | checked | errors | mismatched | lost |\n",
    );
    out.push_str(&"|---".repeat(11));
    out.push_str("|\n");
    for r in &sc.runs {
        let idle = r.idle.unwrap_or_default();
        let cells = [
            r.label.clone(),
            format!("{}/{}", idle.open, idle.requested),
            format!("{:.1}", idle.rss_before_kib as f64 / 1024.0),
            format!("{:.1}", idle.rss_open_kib as f64 / 1024.0),
            opt(idle.bytes_per_conn().map(|b| b / 1024.0), 1),
            opt(idle.cpu_ms_per_s, 1),
            format!("{:.2}", idle.connect_secs),
            idle.checked.to_string(),
            r.errors.to_string(),
            r.mismatches.to_string(),
            r.lost.to_string(),
        ];
        row(out, &cells);
    }
}

fn load_cell(r: &RunResult) -> String {
    match r.load {
        Some(l) => match l.rate {
            Some(rate) => format!("{} conns @ {rate}/s, {} B", l.conns, l.params_bytes),
            None => format!("{}x{}, {} B", l.conns, l.window, l.params_bytes),
        },
        None => dash(),
    }
}

fn row(out: &mut String, cells: &[String]) {
    out.push('|');
    for c in cells {
        // Writing to a String cannot fail.
        let _ = write!(out, " {c} |");
    }
    out.push('\n');
}

fn ratio(x: f64, floor: Option<f64>) -> String {
    match floor {
        Some(f) if f > 0.0 => format!("{:.2}", x / f),
        _ => dash(),
    }
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(dash, |x| format!("{x:.decimals$}"))
}

fn dash() -> String {
    String::from("—")
}

/// Replies checked, and the mismatched and lost ones, over every run.
pub(crate) fn correctness(results: &[ScenarioResult]) -> (u64, u64, u64, usize) {
    let runs = results.iter().flat_map(|s| &s.runs);
    runs.fold((0, 0, 0, 0), |(v, m, l, f), r| {
        let checked = r.verified + r.idle.map_or(0, |i| i.checked);
        (
            v + checked,
            m + r.mismatches,
            l + r.lost,
            f + usize::from(r.failure.is_some()),
        )
    })
}
