//! What one client can make switchyard hold: a client that never reads,
//! paced so that its requests keep coming, makes the gateway hold at most
//! `(outbox_capacity + max_in_flight) × max_message_bytes` of replies
//! (`switchyard_outbox_queued_bytes_max`), however long it goes on.

mod common;

use std::time::Duration;

use common::Stack;
use futures_util::SinkExt;
use switchyard::daemon::DaemonOptions;
use tokio_tungstenite::tungstenite::Message;

const OUTBOX: usize = 16;
const IN_FLIGHT: usize = 8;
const MAX_MESSAGE: usize = 64 * 1024;
const REPLY: usize = 16 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_reading_client_makes_the_gateway_hold_no_more_than_the_documented_bound() {
    // The slow-consumer timeout is longer than the run: the client is held
    // all along, not closed.
    let listener = format!(
        "outbox_capacity = {OUTBOX}\nmax_in_flight = {IN_FLIGHT}\nmax_message_bytes = {MAX_MESSAGE}\nslow_consumer_timeout_ms = 60000"
    );
    let stack = Stack::start(&listener, "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    let pad = "x".repeat(REPLY);
    // 10 s of requests, one every 2 ms, each answered with a 16 KiB echo;
    // the client never reads. Once the socket buffers and the outbox are
    // full the gateway stops reading it, and a send blocks: the run just
    // ends at the deadline then.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut sent = 0u64;
    let mut ticks = tokio::time::interval(Duration::from_millis(2));
    while tokio::time::Instant::now() < deadline {
        ticks.tick().await;
        let request =
            format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{pad}"],"id":{sent}}}"#);
        match tokio::time::timeout_at(deadline, ws.send(Message::text(request))).await {
            Ok(Ok(())) => sent += 1,
            // The gateway may close first: an outcome, not a failure.
            Ok(Err(_)) => break,
            Err(_) => break,
        }
    }
    let bytes = stack.counter(
        "switchyard_outbox_queued_bytes_max",
        &[("listener", "public")],
    );
    let messages = stack.counter("switchyard_outbox_high_water", &[("listener", "public")]);
    let bound = ((OUTBOX + IN_FLIGHT) * MAX_MESSAGE) as f64;
    // The outbox did fill (the run reached the bound's regime)...
    assert_eq!(messages, OUTBOX as f64, "sent {sent}");
    assert!(
        bytes >= (OUTBOX * REPLY) as f64,
        "held {bytes} B, sent {sent}"
    );
    // ...and what the gateway held for the client stayed within the bound.
    assert!(
        bytes <= bound,
        "held {bytes} B > bound {bound} B, sent {sent}"
    );
    drop(ws);
    stack.gateway.shutdown().await;
}
