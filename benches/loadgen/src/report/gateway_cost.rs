//! The targets on what the gateway itself adds: latency over
//! floor C (a byte relay process, so the hop any extra process costs is
//! not counted against switchyard), CPU per request, and Sideband CBOR
//! throughput against JSON-RPC's.

use super::super::measure::{RunResult, ScenarioResult};
use super::super::target::Role;
use super::cpu_us_per_request;
use super::verdict::{skip, Status, Verdict};

/// Latency 1×1: p50 at most floor C's.
const MAX_P50_OVER_C_US: f64 = 0.0;
/// Fixed rate: p99 at most floor C's + 20 µs.
const MAX_P99_OVER_C_US: f64 = 20.0;
/// Throughput scenario: switchyard's CPU per request (twice the byte
/// relay's).
const MAX_CPU_US_PER_REQUEST: f64 = 1.3;
/// Throughput scenario: Sideband CBOR → NDJSON against JSON-RPC → NDJSON.
const MIN_CBOR_VS_JSONRPC: f64 = 0.9;

/// Percentile columns of `RunResult::latency_us`.
const P50: usize = 0;
const P99: usize = 2;

/// Appends these verdicts; `find` gives a scenario's results by name.
pub(super) fn verdicts<'a>(
    find: &impl Fn(&str) -> Option<&'a ScenarioResult>,
    out: &mut Vec<Verdict>,
) {
    over_c(
        find("latency"),
        P50,
        MAX_P50_OVER_C_US,
        "latency 1x1 p50 <= floor C p50",
        out,
    );
    over_c(
        find("fixed-rate"),
        P99,
        MAX_P99_OVER_C_US,
        "fixed-rate p99 <= floor C p99 + 20 µs",
        out,
    );
    cpu_per_request(find("throughput"), out);
    cbor_vs_jsonrpc(find("throughput"), out);
}

/// One verdict per gateway row: its percentile `col` at most floor C's
/// plus `limit` µs.
fn over_c(
    sc: Option<&ScenarioResult>,
    col: usize,
    limit: f64,
    target: &str,
    out: &mut Vec<Verdict>,
) {
    let name = if col == P50 { "p50" } else { "p99" };
    per_gateway(sc, target, out, |sc, g| {
        let c = sc
            .runs
            .iter()
            .find(|r| r.role == Role::FloorC && r.failure.is_none())?;
        let (gp, cp) = (g.latency_us[col], c.latency_us[col]);
        let over = gp - cp;
        let ok = over <= limit;
        let detail = format!(
            "{name} {gp:.1} µs vs floor C {cp:.1} µs: {over:+.1} µs (limit +{limit:.0} µs, {} by \
             {:.1} µs)",
            if ok { "under" } else { "over" },
            (limit - over).abs(),
        );
        Some((ok, detail))
    });
}

/// One verdict per gateway row of the throughput scenario.
fn cpu_per_request(sc: Option<&ScenarioResult>, out: &mut Vec<Verdict>) {
    let target = "throughput CPU per request <= 1.3 µs";
    per_gateway(sc, target, out, |_, g| {
        let us = cpu_us_per_request(g)?;
        let ok = us <= MAX_CPU_US_PER_REQUEST;
        let detail = format!(
            "{us:.2} µs of the server's CPU per request (limit {MAX_CPU_US_PER_REQUEST} µs, {} by \
             {:.2} µs)",
            if ok { "under" } else { "over" },
            (MAX_CPU_US_PER_REQUEST - us).abs(),
        );
        Some((ok, detail))
    });
}

/// One verdict per gateway row of `sc` that ran: `judge` says whether
/// it met `target` and why, or `None` when there is nothing to compare
/// (a failed floor, no CPU measurement): a failure, not a pass. Floor M,
/// the minimal gateway, is judged by the same rule for reference.
fn per_gateway(
    sc: Option<&ScenarioResult>,
    target: &str,
    out: &mut Vec<Verdict>,
    judge: impl Fn(&ScenarioResult, &RunResult) -> Option<(bool, String)>,
) {
    let Some(sc) = sc else {
        out.push(skip(target));
        return;
    };
    for g in gateways(sc) {
        let judged = judge(sc, g).filter(|_| g.failure.is_none());
        let (status, detail) = match judged {
            Some((ok, detail)) => (pass_fail(ok), detail),
            None => (
                Status::Fail,
                String::from("a run failed; nothing to compare"),
            ),
        };
        out.push(Verdict {
            target: format!("{target} [{}]", g.label),
            status,
            detail,
        });
    }
    let minimal = sc
        .runs
        .iter()
        .filter(|r| r.role == Role::FloorM && r.failure.is_none());
    for m in minimal {
        if let Some((_, detail)) = judge(sc, m) {
            out.push(Verdict {
                target: format!("{target} [{}]", m.label),
                status: Status::Reference,
                detail,
            });
        }
    }
}

/// Sideband CBOR → NDJSON against JSON-RPC → NDJSON in the same run.
fn cbor_vs_jsonrpc(sc: Option<&ScenarioResult>, out: &mut Vec<Verdict>) {
    let target = "Sideband CBOR throughput >= 0.9 x JSON-RPC";
    let Some(sc) = sc else {
        out.push(skip(target));
        return;
    };
    let row = |needle: &str| {
        gateways(sc).find(|r| r.label.contains(needle) && r.failure.is_none() && r.rps > 0.0)
    };
    let (status, detail) = match (row("sideband cbor →"), row("jsonrpc-ws →")) {
        (Some(cbor), Some(json)) => {
            let r = cbor.rps / json.rps;
            let ok = r >= MIN_CBOR_VS_JSONRPC;
            let detail = format!(
                "{:.0} req/s against {:.0} req/s = {r:.2} x (target >= {MIN_CBOR_VS_JSONRPC}, {} \
                 by {:.2})",
                cbor.rps,
                json.rps,
                if ok { "above" } else { "short" },
                (r - MIN_CBOR_VS_JSONRPC).abs(),
            );
            (pass_fail(ok), detail)
        }
        _ => (
            Status::Fail,
            String::from("a run failed or did not run; nothing to compare"),
        ),
    };
    out.push(Verdict {
        target: target.to_owned(),
        status,
        detail,
    });
}

fn gateways(sc: &ScenarioResult) -> impl Iterator<Item = &RunResult> {
    sc.runs.iter().filter(|r| r.role == Role::Gateway)
}

fn pass_fail(ok: bool) -> Status {
    if ok {
        Status::Pass
    } else {
        Status::Fail
    }
}

#[cfg(test)]
mod tests;
