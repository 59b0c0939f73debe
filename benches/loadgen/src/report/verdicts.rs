//! The pass/fail verdicts of the performance issue's targets, judged
//! against the floors of the same scenario (floor C, the byte relay
//! process, for throughput and large messages), with the ratios to every
//! floor in the detail.

use super::super::measure::{RunResult, ScenarioResult};
use super::super::target::Role;
use super::verdict::{skip, Status, Verdict};

/// The thresholds: throughput and large messages against floor
/// C, the byte relay process (what any extra process costs); idle memory
/// per connection; fan-in.
const MIN_THROUGHPUT_VS_C: f64 = 0.85;
const MIN_LARGE_VS_C: f64 = 0.95;
const MAX_IDLE_BYTES_PER_CONN: f64 = 20.0 * 1024.0;
const MIN_FAN_IN_VS_16: f64 = 0.80;

/// The targets, judged against the results (`smoke`: not judged).
pub(crate) fn verdicts(results: &[ScenarioResult], smoke: bool) -> Vec<Verdict> {
    let find = |name: &str| results.iter().find(|s| s.name == name);
    let mut out = Vec::new();
    vs_floor(
        find("throughput"),
        Role::FloorC,
        "throughput >= 85 % of floor C",
        &mut out,
        |g, c, sc| judge_ratio(g, c, sc, "floor C", MIN_THROUGHPUT_VS_C),
    );
    vs_floor(
        find("large"),
        Role::FloorC,
        "large >= 95 % of floor C",
        &mut out,
        |g, c, sc| judge_ratio(g, c, sc, "floor C", MIN_LARGE_VS_C),
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
    // Floor C beside the floor judged against, for reference (not against
    // itself), and floor M, the minimal gateway, judged by the same rule.
    for c in sc
        .runs
        .iter()
        .filter(|r| (r.role == Role::FloorC && floor != Role::FloorC) || r.role == Role::FloorM)
    {
        out.push(Verdict {
            target: format!("{target} [{}]", c.label),
            status: Status::Reference,
            detail: judged(c).1,
        });
    }
}

/// Req/s of `g` at least `min` of the floor row `f`'s (named `name`),
/// with the margin in percentage points and the ratios to every floor of
/// `sc`.
fn judge_ratio(
    g: &RunResult,
    f: &RunResult,
    sc: &ScenarioResult,
    name: &str,
    min: f64,
) -> (bool, String) {
    let (x, floor) = (g.rps, f.rps);
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

/// `xB 0.50, xB2 0.40, xC 0.90`: `rps` against each floor of `sc` that ran.
fn all_ratios(rps: f64, sc: &ScenarioResult) -> String {
    [
        (Role::FloorB, "xB"),
        (Role::FloorB2, "xB2"),
        (Role::FloorC, "xC"),
        (Role::FloorM, "xM"),
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
    let target = "idle <= 20 KiB RSS per connection";
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
                    "{:.1} KiB per connection over {open} connections (limit 20 KiB, {} by {:.1} KiB)",
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

#[cfg(test)]
mod tests;
