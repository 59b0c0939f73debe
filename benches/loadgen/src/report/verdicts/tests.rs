//! The targets against results built by hand: each boundary
//! passes and one step beyond it fails.

use super::*;
use crate::fanout::Fanout;
use crate::idle::Idle;
use crate::report::fixtures::{scenario, statuses, C, CBOR, JSON};

fn run(label: &str, role: Role, rps: f64) -> RunResult {
    RunResult {
        window_secs: 2.0,
        rps,
        ..RunResult::empty(label.to_owned(), role, None)
    }
}

#[test]
fn throughput_and_large_are_judged_against_floor_c() {
    let results = [
        scenario(
            "throughput",
            vec![
                run(C, Role::FloorC, 100_000.0),
                run(JSON, Role::Gateway, 85_000.0),
                run(CBOR, Role::Gateway, 84_900.0),
            ],
        ),
        scenario(
            "large",
            vec![
                run(C, Role::FloorC, 10_000.0),
                run(JSON, Role::Gateway, 9_490.0),
                run(CBOR, Role::Gateway, 9_500.0),
            ],
        ),
    ];
    let v = verdicts(&results, false);
    assert_eq!(
        statuses(&v, "throughput >= 85 % of floor C"),
        [Status::Pass, Status::Fail],
        "floor C is not judged against itself"
    );
    assert_eq!(
        statuses(&v, "large >= 95 % of floor C"),
        [Status::Fail, Status::Pass]
    );
}

#[test]
fn idle_memory_is_judged_against_20_kib_per_connection() {
    let idle = |kib_per_conn: u64| RunResult {
        idle: Some(Idle {
            requested: 10,
            open: 10,
            rss_before_kib: 1000,
            rss_open_kib: 1000 + 10 * kib_per_conn,
            ..Idle::default()
        }),
        ..run(JSON, Role::Gateway, 0.0)
    };
    let results = [scenario("idle", vec![idle(20), idle(21)])];
    let v = verdicts(&results, false);
    assert_eq!(statuses(&v, "idle <= 20 KiB"), [Status::Pass, Status::Fail]);
}

#[test]
fn fanout_judges_1000_and_100_subscribers_with_their_own_bounds() {
    let row = |subscribers: usize, p99_us: f64| RunResult {
        latency_us: [0.0, 0.0, p99_us, 0.0, 0.0],
        fanout: Some(Fanout {
            requested: subscribers,
            subscribed: subscribers,
            published_per_s: 1000.0,
            delivered_per_s: 1000.0 * subscribers as f64,
            ..Fanout::default()
        }),
        ..run(&format!("{subscribers} subscribers"), Role::Gateway, 0.0)
    };
    let judged = |p99_100: f64, p99_1000: f64| {
        let results = [scenario(
            "fanout",
            vec![row(1, 100.0), row(100, p99_100), row(1000, p99_1000)],
        )];
        let v = verdicts(&results, false);
        (
            statuses(&v, "fanout 1,000 subscribers"),
            statuses(&v, "fanout 100 subscribers"),
        )
    };
    assert_eq!(
        judged(1000.0, 5000.0),
        (vec![Status::Pass], vec![Status::Pass])
    );
    assert_eq!(
        judged(1001.0, 5001.0),
        (vec![Status::Fail], vec![Status::Fail])
    );
}
