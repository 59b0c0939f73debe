//! Markdown tables and the pass/fail verdicts of the targets.
//!
//! Ratios are against the floors of the same scenario: `xB` divides a
//! target's req/s by floor B's (the bare WebSocket echo: what the client's
//! own WebSocket work allows), `xB2` by floor B2's (the same echo as a
//! process of its own, as a gateway is), `xC` by floor C's (a byte relay
//! process), `xA` by floor A's (the daemon over NDJSON with no gateway),
//! and `p99-B` is the extra p99 latency over floor B.

use std::fmt::Write as _;

use super::measure::{RunResult, ScenarioResult};
use super::target::Role;

/// The thresholds.
const MIN_THROUGHPUT_VS_B: f64 = 0.60;
const MAX_P99_OVER_B_US: f64 = 150.0;
const MAX_IDLE_BYTES_PER_CONN: f64 = 64.0 * 1024.0;
const MIN_FAN_IN_VS_16: f64 = 0.80;

/// How a target fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) enum Status {
    /// Met.
    Pass,
    /// Missed.
    Fail,
    /// Its scenario did not run.
    Skip,
    /// Smoke runs are too small to judge performance.
    NotJudged,
    /// Floor C judged by the same rule: not a target, the bound that any
    /// extra process between client and daemon meets on this machine.
    Reference,
}

/// One line of the verdict list.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Verdict {
    /// The target, as the issue states it.
    pub(crate) target: String,
    /// The outcome.
    pub(crate) status: Status,
    /// Measured values and the margin.
    pub(crate) detail: String,
}

/// A scenario's Markdown section: heading, description, table.
pub(crate) fn table(sc: &ScenarioResult) -> String {
    let mut out = format!("### scenario: {}\n\n{}\n\n", sc.name, sc.about);
    if sc.runs.iter().any(|r| r.idle.is_some()) {
        idle_table(sc, &mut out);
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
        "| target | load | req/s | xB | xB2 | xC | xA | p50 µs | p90 µs | p99 µs | p99.9 µs | p99-B µs \
         | errors | mismatched | lost | server CPU s | CPU µs/req | daemon CPU s | loadgen CPU s \
         | other CPU s | server peak RSS MiB |\n",
    );
    out.push_str(&"|---".repeat(21));
    out.push_str("|\n");
    let floor = |role| {
        sc.runs
            .iter()
            .find(|r| r.role == role && r.failure.is_none())
    };
    let (a, b) = (floor(Role::FloorA), floor(Role::FloorB));
    let (b2, c) = (floor(Role::FloorB2), floor(Role::FloorC));
    for r in &sc.runs {
        let [p50, p90, p99, p999, _] = r.latency_us;
        let per_req = r
            .server_cpu_s
            .filter(|_| r.rps > 0.0)
            .map(|s| s * 1e6 / (r.rps * r.window_secs));
        let cells = [
            r.label.clone(),
            load_cell(r),
            format!("{:.0}", r.rps),
            ratio(r.rps, b.map(|b| b.rps)),
            ratio(r.rps, b2.map(|b| b.rps)),
            ratio(r.rps, c.map(|c| c.rps)),
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
            opt(r.daemon_cpu_s, 2),
            opt(r.loadgen_cpu_s, 2),
            opt(r.other_cpu_s, 2),
            opt(r.server_peak_rss_kib.map(|k| k as f64 / 1024.0), 1),
        ];
        row(out, &cells);
    }
}

fn idle_table(sc: &ScenarioResult, out: &mut String) {
    out.push_str(
        "| target | connections | RSS before MiB | RSS open MiB | per connection KiB \
         | connect s | checked | errors | mismatched | lost |\n",
    );
    out.push_str(&"|---".repeat(10));
    out.push_str("|\n");
    for r in &sc.runs {
        let idle = r.idle.unwrap_or_default();
        let cells = [
            r.label.clone(),
            format!("{}/{}", idle.open, idle.requested),
            format!("{:.1}", idle.rss_before_kib as f64 / 1024.0),
            format!("{:.1}", idle.rss_open_kib as f64 / 1024.0),
            opt(idle.bytes_per_conn().map(|b| b / 1024.0), 1),
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

// === verdicts ===

/// The targets, judged against the results (`smoke`: not judged).
pub(crate) fn verdicts(results: &[ScenarioResult], smoke: bool) -> Vec<Verdict> {
    let find = |name: &str| results.iter().find(|s| s.name == name);
    let mut out = Vec::new();
    vs_floor(
        find("throughput"),
        Role::FloorB,
        "throughput >= 60 % of floor B",
        &mut out,
        |g, b, sc| judge_ratio(g, b, sc, "floor B"),
    );
    vs_floor(
        find("fixed-rate"),
        Role::FloorB,
        "fixed-rate p99 <= floor B p99 + 150 µs",
        &mut out,
        |g, b, sc| {
            let (gp, bp) = (g.latency_us[2], b.latency_us[2]);
            let over = gp - bp;
            let ok = over <= MAX_P99_OVER_B_US;
            let detail = format!(
                "p99 {gp:.1} µs vs floor B {bp:.1} µs: {over:+.1} µs (limit +150 µs, {} by \
                 {:.1} µs){}",
                if ok { "under" } else { "over" },
                (MAX_P99_OVER_B_US - over).abs(),
                p99_over_other_floors(gp, sc),
            );
            (ok, detail)
        },
    );
    vs_floor(
        find("large"),
        Role::FloorB,
        "large >= 60 % of floor B",
        &mut out,
        |g, b, sc| judge_ratio(g, b, sc, "floor B"),
    );
    // The same two against the echo *process* (the fairer floor for a
    // gateway that is its own process).
    vs_floor(
        find("throughput"),
        Role::FloorB2,
        "throughput >= 60 % of floor B2",
        &mut out,
        |g, b, sc| judge_ratio(g, b, sc, "floor B2"),
    );
    vs_floor(
        find("large"),
        Role::FloorB2,
        "large >= 60 % of floor B2",
        &mut out,
        |g, b, sc| judge_ratio(g, b, sc, "floor B2"),
    );
    idle_verdicts(find("idle"), &mut out);
    fan_in_verdict(find("fan-in"), &mut out);
    if smoke {
        for v in &mut out {
            if v.status != Status::Skip {
                v.status = Status::NotJudged;
            }
        }
    }
    out
}

/// One verdict per gateway row of a scenario, judged against the floor
/// of role `floor` (`judge` also gets the scenario, for the other ratios).
fn vs_floor(
    sc: Option<&ScenarioResult>,
    floor: Role,
    target: &str,
    out: &mut Vec<Verdict>,
    judge: impl Fn(&RunResult, &RunResult, &ScenarioResult) -> (bool, String),
) {
    let Some(sc) = sc else {
        out.push(skip(target));
        return;
    };
    let b = sc.runs.iter().find(|r| r.role == floor);
    let judged = |r: &RunResult| match b {
        Some(b) if b.failure.is_none() && r.failure.is_none() => judge(r, b, sc),
        _ => (false, String::from("a run failed; nothing to compare")),
    };
    for g in sc.runs.iter().filter(|r| r.role == Role::Gateway) {
        let (ok, detail) = judged(g);
        out.push(Verdict {
            target: format!("{target} [{}]", g.label),
            status: if ok { Status::Pass } else { Status::Fail },
            detail,
        });
    }
    for c in sc.runs.iter().filter(|r| r.role == Role::FloorC) {
        out.push(Verdict {
            target: format!("{target} [{}]", c.label),
            status: Status::Reference,
            detail: judged(c).1,
        });
    }
}

/// Req/s of `g` >= 60 % of the floor row `f`'s (named `name`), with the
/// margin in percentage points and the ratios to every floor of `sc`.
fn judge_ratio(g: &RunResult, f: &RunResult, sc: &ScenarioResult, name: &str) -> (bool, String) {
    let (x, floor, min) = (g.rps, f.rps, MIN_THROUGHPUT_VS_B);
    let r = if floor > 0.0 { x / floor } else { 0.0 };
    let ok = r >= min;
    let detail = format!(
        "{x:.0} req/s = {:.1} % of {name} ({floor:.0}); target >= {:.0} %, {} by {:.1} points \
         ({})",
        r * 100.0,
        min * 100.0,
        if ok { "above" } else { "short" },
        ((r - min) * 100.0).abs(),
        all_ratios(x, sc),
    );
    (ok, detail)
}

/// `; over B2 +40.0 µs, over C +10.0 µs`: p99 `p99` against the floors
/// B2 and C of `sc` that ran.
fn p99_over_other_floors(p99: f64, sc: &ScenarioResult) -> String {
    let parts: Vec<String> = [(Role::FloorB2, "B2"), (Role::FloorC, "C")]
        .into_iter()
        .filter_map(|(role, name)| {
            let f = sc
                .runs
                .iter()
                .find(|r| r.role == role && r.failure.is_none())?;
            Some(format!("over {name} {:+.1} µs", p99 - f.latency_us[2]))
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("; {}", parts.join(", "))
    }
}

/// `xB 0.50, xB2 0.40, xC 0.90`: `rps` against each floor of `sc` that ran.
fn all_ratios(rps: f64, sc: &ScenarioResult) -> String {
    [
        (Role::FloorB, "xB"),
        (Role::FloorB2, "xB2"),
        (Role::FloorC, "xC"),
    ]
    .into_iter()
    .filter_map(|(role, name)| {
        let f = sc
            .runs
            .iter()
            .find(|r| r.role == role && r.failure.is_none() && r.rps > 0.0)?;
        Some(format!("{name} {:.2}", rps / f.rps))
    })
    .collect::<Vec<_>>()
    .join(", ")
}

fn idle_verdicts(sc: Option<&ScenarioResult>, out: &mut Vec<Verdict>) {
    let target = "idle <= 64 KiB RSS per connection";
    let Some(sc) = sc else {
        out.push(skip(target));
        return;
    };
    for r in &sc.runs {
        let per = r.idle.and_then(|i| i.bytes_per_conn());
        let (status, detail) = match (per, &r.failure) {
            (Some(per), None) => {
                let ok = per <= MAX_IDLE_BYTES_PER_CONN && r.lost == 0 && r.mismatches == 0;
                let open = r.idle.map_or(0, |i| i.open);
                let detail = format!(
                    "{:.1} KiB per connection over {open} connections (limit 64 KiB, {} by {:.1} KiB)",
                    per / 1024.0,
                    if per <= MAX_IDLE_BYTES_PER_CONN { "under" } else { "over" },
                    (MAX_IDLE_BYTES_PER_CONN - per).abs() / 1024.0
                );
                (if ok { Status::Pass } else { Status::Fail }, detail)
            }
            _ => (Status::Fail, String::from("no measurement")),
        };
        out.push(Verdict {
            target: format!("{target} [{}]", r.label),
            status,
            detail,
        });
    }
}

fn fan_in_verdict(sc: Option<&ScenarioResult>, out: &mut Vec<Verdict>) {
    let target = "fan-in: zero lost/misrouted, many clients within 20 % of 16 clients";
    let Some(sc) = sc else {
        out.push(skip(target));
        return;
    };
    let (status, detail) = match sc.runs.as_slice() {
        [many, few] if many.failure.is_none() && few.failure.is_none() => {
            let bad = many.lost + many.mismatches + few.lost + few.mismatches;
            let r = if few.rps > 0.0 {
                many.rps / few.rps
            } else {
                0.0
            };
            let ok = bad == 0 && r >= MIN_FAN_IN_VS_16;
            let detail =
                format!(
                "{} lost+misrouted; {:.0} req/s with {} clients = {:.1} % of {:.0} req/s with {} \
                 (target >= {:.0} %, {} by {:.1} points)",
                bad,
                many.rps,
                many.load.map_or(0, |l| l.conns),
                r * 100.0,
                few.rps,
                few.load.map_or(0, |l| l.conns),
                MIN_FAN_IN_VS_16 * 100.0,
                if r >= MIN_FAN_IN_VS_16 { "above" } else { "short" },
                ((r - MIN_FAN_IN_VS_16) * 100.0).abs()
            );
            (if ok { Status::Pass } else { Status::Fail }, detail)
        }
        _ => (
            Status::Fail,
            String::from("a run failed; nothing to compare"),
        ),
    };
    out.push(Verdict {
        target: target.to_owned(),
        status,
        detail,
    });
}

fn skip(target: &str) -> Verdict {
    Verdict {
        target: target.to_owned(),
        status: Status::Skip,
        detail: String::from("scenario not run"),
    }
}

/// The verdict list as Markdown lines.
pub(crate) fn verdict_lines(verdicts: &[Verdict]) -> String {
    let mut out = String::from("### targets\n\n");
    for v in verdicts {
        let status = match v.status {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
            Status::NotJudged => "NOT JUDGED (smoke)",
            Status::Reference => "REF",
        };
        // Writing to a String cannot fail.
        let _ = writeln!(out, "- {status} {}: {}", v.target, v.detail);
    }
    out
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
