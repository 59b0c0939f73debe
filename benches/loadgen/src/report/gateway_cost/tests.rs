//! Each verdict against results built by hand: the boundary passes, one
//! step beyond it fails, and a missing floor is a failure, not a pass.

use super::*;
use crate::report::fixtures::{scenario, statuses, C, CBOR, JSON};

fn run(label: &str, role: Role, rps: f64, p50: f64, p99: f64, cpu_s: f64) -> RunResult {
    RunResult {
        window_secs: 2.0,
        rps,
        latency_us: [p50, 0.0, p99, 0.0, 0.0],
        server_cpu_s: Some(cpu_s),
        ..RunResult::empty(label.to_owned(), role, None)
    }
}

fn judged(results: &[ScenarioResult]) -> Vec<Verdict> {
    let find = |name: &str| results.iter().find(|s| s.name == name);
    let mut out = Vec::new();
    verdicts(&find, &mut out);
    out
}

#[test]
fn latency_and_fixed_rate_are_judged_against_floor_c() {
    let results = [
        scenario(
            "latency",
            vec![
                run(C, Role::FloorC, 1.0, 80.0, 0.0, 0.0),
                run(JSON, Role::Gateway, 1.0, 80.0, 0.0, 0.0),
                run(CBOR, Role::Gateway, 1.0, 80.5, 0.0, 0.0),
            ],
        ),
        scenario(
            "fixed-rate",
            vec![
                run(C, Role::FloorC, 1.0, 0.0, 300.0, 0.0),
                run(JSON, Role::Gateway, 1.0, 0.0, 321.0, 0.0),
                run(CBOR, Role::Gateway, 1.0, 0.0, 320.0, 0.0),
            ],
        ),
    ];
    let v = judged(&results);
    assert_eq!(statuses(&v, "latency 1x1"), [Status::Pass, Status::Fail]);
    assert_eq!(
        v[0].target,
        format!("latency 1x1 p50 <= floor C p50 [{JSON}]")
    );
    assert_eq!(statuses(&v, "fixed-rate"), [Status::Fail, Status::Pass]);
    assert!(v[0].detail.contains("+0.0 µs"), "{}", v[0].detail);
    assert!(v[3].detail.contains("+20 µs"), "{}", v[3].detail);
}

#[test]
fn cpu_per_request_and_the_cbor_ratio_come_from_the_throughput_rows() {
    // 100k req/s over 2 s: 0.26 CPU-seconds is 1.3 µs per request.
    let results = [scenario(
        "throughput",
        vec![
            run(C, Role::FloorC, 500_000.0, 0.0, 0.0, 0.5),
            run(JSON, Role::Gateway, 100_000.0, 0.0, 0.0, 0.26),
            run(CBOR, Role::Gateway, 89_000.0, 0.0, 0.0, 0.6),
        ],
    )];
    let v = judged(&results);
    assert_eq!(
        statuses(&v, "throughput CPU"),
        [Status::Pass, Status::Fail],
        "floor C is not judged"
    );
    assert_eq!(statuses(&v, "Sideband CBOR"), [Status::Fail]);

    let mut results = results;
    results[0].runs[2].rps = 90_000.0;
    let v = judged(&results);
    assert_eq!(statuses(&v, "Sideband CBOR"), [Status::Pass]);
}

#[test]
fn a_missing_floor_or_scenario_is_not_a_pass() {
    let results = [scenario(
        "latency",
        vec![run(JSON, Role::Gateway, 1.0, 1.0, 1.0, 0.0)],
    )];
    let v = judged(&results);
    assert_eq!(statuses(&v, "latency 1x1"), [Status::Fail]);
    assert_eq!(statuses(&v, "fixed-rate"), [Status::Skip]);
    assert_eq!(statuses(&v, "throughput CPU"), [Status::Skip]);
}
