//! The pass/fail verdicts of the performance issues' targets, judged
//! against the floors of the same scenario (B, and B2 for the echo as a
//! process of its own), with the ratios to every floor in the detail.

use super::super::measure::{RunResult, ScenarioResult};
use super::super::target::Role;
use super::verdict::{skip, Status, Verdict};

/// The thresholds.
const MIN_THROUGHPUT_VS_B: f64 = 0.60;
const MAX_P99_OVER_B_US: f64 = 150.0;
const MAX_IDLE_BYTES_PER_CONN: f64 = 64.0 * 1024.0;
const MIN_FAN_IN_VS_16: f64 = 0.80;

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
    super::gateway_cost::verdicts(&find, &mut out);
    idle_verdicts(find("idle"), &mut out);
    fan_in_verdict(find("fan-in"), &mut out);
    super::fanout::verdict(find("fanout"), &mut out);
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
