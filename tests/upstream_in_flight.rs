//! `switchyard_upstream_in_flight` and `switchyard_upstream_request_duration_seconds`
//! for calls settled in place that never get their reply: abandoned when
//! their client leaves, and timed out. Both must leave the gauge (the call
//! is no longer in flight) and neither has an upstream duration. And the
//! room itself: every call gives its pending and link slots back.

mod common;

use std::time::Duration;

use common::scrape::{scrape, value, wait_value};
use common::*;
use switchyard::daemon::DaemonOptions;

/// Long enough that only abandonment or the timeout can end the call.
const SLEEP_MS: u64 = 60_000;
/// How long each wait on a metric may take on a busy machine.
const WITHIN: Duration = Duration::from_secs(30);

const IN_FLIGHT: &str = "switchyard_upstream_in_flight";
const DURATION_COUNT: &str = "switchyard_upstream_request_duration_seconds_count";
const UPSTREAM: [(&str, &str); 1] = [("upstream", "daemon")];

async fn send_sleeps(ws: &mut Ws, ids: std::ops::Range<u32>) {
    for id in ids {
        let req =
            format!(r#"{{"jsonrpc":"2.0","method":"sleep","params":[{SLEEP_MS}],"id":{id}}}"#);
        send(ws, &req).await;
    }
}

#[tokio::test]
async fn calls_abandoned_by_a_leaving_client_leave_the_in_flight_gauge() {
    let (stack, admin) = Stack::start_with_admin("", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    send_sleeps(&mut ws, 1..4).await;
    let seen = wait_value(admin, IN_FLIGHT, &UPSTREAM, 3.0, WITHIN).await;
    assert_eq!(seen, 3.0, "three calls in flight");
    drop(ws);
    let seen = wait_value(admin, IN_FLIGHT, &UPSTREAM, 0.0, WITHIN).await;
    assert_eq!(seen, 0.0, "abandoned calls still counted in flight");
    let durations = value(&scrape(admin).await, DURATION_COUNT, &UPSTREAM);
    assert_eq!(durations, 0.0, "an abandoned call has no upstream duration");
}

#[tokio::test]
async fn timed_out_calls_leave_the_in_flight_gauge_without_a_duration() {
    let (stack, admin) =
        Stack::start_with_admin("request_timeout_ms = 200", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    send_sleeps(&mut ws, 1..3).await;
    for _ in 0..2 {
        let reply: serde_json::Value = serde_json::from_str(&recv(&mut ws).await).expect("JSON");
        assert!(reply["error"].is_object(), "a timeout error: {reply}");
    }
    let seen = wait_value(admin, IN_FLIGHT, &UPSTREAM, 0.0, WITHIN).await;
    assert_eq!(seen, 0.0, "timed-out calls still counted in flight");
    // A call that settles normally is counted, so the count below is not
    // zero for want of recording.
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":9}"#,
    )
    .await;
    let reply: serde_json::Value = serde_json::from_str(&recv(&mut ws).await).expect("JSON");
    assert_eq!(reply["id"], 9, "{reply}");
    let durations = value(&scrape(admin).await, DURATION_COUNT, &UPSTREAM);
    assert_eq!(
        durations, 1.0,
        "only the answered call has an upstream duration"
    );
}

/// With room for two calls (two pending slots, two in flight on the one
/// link), twenty calls and five batches of two, one after another, are
/// all answered: every path that takes room (a call settled in place, a
/// batch's pending slots and its link slots) gives it back when it
/// settles. A slot kept would leave the third call waiting for room until
/// the queue timeout, and answered with an error. A call's room comes
/// back just after its reply is queued, so a batch sent on that reply may
/// wait a moment for it: the timeout leaves a busy machine 10 s.
#[tokio::test]
async fn every_settled_call_gives_its_room_back() {
    let upstream = "pool_size = 1\nmax_pending = 2\nmax_in_flight_per_connection = 2\n\
                    queue_timeout_ms = 10000";
    let stack = Stack::start("", upstream, DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    for id in 1..=20 {
        let req = format!(r#"{{"jsonrpc":"2.0","method":"echo","params":[{id}],"id":{id}}}"#);
        send(&mut ws, &req).await;
        let reply: serde_json::Value = serde_json::from_str(&recv(&mut ws).await).expect("JSON");
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["result"], serde_json::json!([id]), "{reply}");
    }
    for batch in 0..5 {
        let (a, b) = (100 + 2 * batch, 101 + 2 * batch);
        let req = format!(
            r#"[{{"jsonrpc":"2.0","method":"echo","params":[{a}],"id":{a}}},{{"jsonrpc":"2.0","method":"echo","params":[{b}],"id":{b}}}]"#
        );
        send(&mut ws, &req).await;
        let reply: serde_json::Value = serde_json::from_str(&recv(&mut ws).await).expect("JSON");
        let results: Vec<&serde_json::Value> = reply
            .as_array()
            .expect("a batch reply")
            .iter()
            .map(|r| &r["result"])
            .collect();
        assert_eq!(results.len(), 2, "{reply}");
        assert!(
            results.iter().all(|r| r.is_array()),
            "both calls answered: {reply}"
        );
    }
}

/// A call settled in place whose client leaves is taken back from its
/// link at once (the client's receipt): the daemon's reply that comes
/// later is counted as stale, not handed to the client that left.
#[tokio::test]
async fn the_late_reply_to_a_call_whose_client_left_is_stale() {
    let stack = Stack::start("", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    // Long enough for the client to be gone before the reply, short
    // enough to wait for the reply.
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"sleep","params":{"ms":4000},"id":1}"#,
    )
    .await;
    assert!(
        eventually(WITHIN, || stack
            .counter("switchyard_correlator_entries", &[])
            == 1.0)
        .await,
        "the call was written"
    );
    drop(ws);
    let stale = [("kind", "stale")];
    assert!(
        eventually(WITHIN, || stack
            .counter("switchyard_unmatched_responses_total", &stale)
            == 1.0)
        .await,
        "the late reply is stale"
    );
    stack.gateway.shutdown().await;
}
