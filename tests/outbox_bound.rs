//! What one client can make switchyard hold: a client that never reads,
//! its requests answered with replies of at most `F` bytes, makes the
//! gateway hold at most `min(outbox_capacity × F, outbox_max_bytes + F)` of
//! queued replies plus, waiting for room, at most `max_in_flight` replies
//! and `max(outbox_max_bytes, F)` bytes of them
//! (`switchyard_outbox_queued_bytes_max`), however long it goes on; once
//! its queue stays full for the slow-consumer timeout, or one more reply
//! would take the bytes waiting over the budget, it is closed.

mod common;

use std::time::Duration;

use common::clients::Ended;
use common::scrape::{scrape, value, wait_above};
use common::Stack;
use futures_util::{SinkExt, StreamExt};
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
    // Replies are 16 KiB echoes (at most MAX_MESSAGE as frames); the byte
    // budget (4 MiB by default) is above what 16 of them take.
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

/// `outbox_max_bytes` for the large-reply test.
const BUDGET: usize = 1 << 20;
/// Each echo's params: replies of about 256 KiB.
const LARGE: usize = 256 * 1024;
/// Rendering adds the JSON-RPC envelope and the id to the echoed params.
const LARGE_FRAME: usize = LARGE + 256;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_replies_to_a_never_reading_client_stay_within_the_byte_budget() {
    // 64 messages of 256 KiB (16 MiB) would fit the message count; the
    // byte budget is 1 MiB.
    let listener = format!(
        "outbox_capacity = 64\noutbox_max_bytes = {BUDGET}\nmax_in_flight = {IN_FLIGHT}\nmax_message_bytes = {}\nslow_consumer_timeout_ms = 2000",
        2 * LARGE
    );
    let (stack, admin) = Stack::start_with_admin(&listener, "", DaemonOptions::default()).await;
    let (sink, mut stream) = common::connect_tiny_window(&stack.url).await.split();
    // Up to 200 requests (50 MiB of replies if all were held); the client
    // never reads. Once the outbox is full and its in-flight slots hold
    // waiting replies, the gateway stops reading it and a send blocks until
    // the connection is closed.
    let sender = tokio::spawn(send_large_echoes(sink));
    // It stays full: the client is closed as a slow consumer.
    let closed = closed_as_slow(admin, Duration::from_secs(60)).await;
    assert_eq!(closed, 1.0);
    let metrics = scrape(admin).await;
    let held = value(
        &metrics,
        "switchyard_outbox_queued_bytes_max",
        &[("listener", "public")],
    );
    // The queue filled to its byte budget (the run reached the bound's
    // regime)...
    assert!(held >= (BUDGET - LARGE_FRAME) as f64, "held {held} B");
    // ...and held at most the budget plus one frame queued, and one reply
    // per in-flight slot waiting for room.
    let bound = (BUDGET + LARGE_FRAME + IN_FLIGHT * LARGE_FRAME) as f64;
    assert!(held <= bound, "held {held} B > bound {bound} B");
    // Reading now shows the end: a close (1008), or the connection cut
    // when even the close frame found no room.
    assert_closed_as_slow(&mut stream, Duration::from_secs(60)).await;
    sender.abort();
    stack.gateway.shutdown().await;
}

/// In-flight replies for the waiting-bytes test: 8 MiB of 256 KiB replies,
/// 8 times the byte budget.
const MANY_IN_FLIGHT: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_waiting_over_the_byte_budget_close_the_client_before_the_timeout() {
    // The slow-consumer timeout is far longer than the failure guard: only
    // the bytes of the replies waiting for room can close the client in
    // time.
    let listener = format!(
        "outbox_capacity = 64\noutbox_max_bytes = {BUDGET}\nmax_in_flight = {MANY_IN_FLIGHT}\nmax_message_bytes = {}\nslow_consumer_timeout_ms = 60000",
        2 * LARGE
    );
    let (stack, admin) = Stack::start_with_admin(&listener, "", DaemonOptions::default()).await;
    let (sink, mut stream) = common::connect_tiny_window(&stack.url).await.split();
    // Up to 200 requests of 256 KiB echoes; the client never reads. The
    // queue fills with its 1 MiB, replies wait for room, and the one that
    // would take the waiting bytes over 1 MiB makes the client slow.
    let sender = tokio::spawn(send_large_echoes(sink));
    // Closed as a slow consumer, counted as the timeout is, long before the
    // timeout.
    let closed = closed_as_slow(admin, Duration::from_secs(30)).await;
    assert_eq!(closed, 1.0, "closed as a slow consumer within 30 s");
    let metrics = scrape(admin).await;
    let protocol = value(
        &metrics,
        "switchyard_protocol_errors_total",
        &[("side", "client"), ("reason", "slow_consumer")],
    );
    assert_eq!(protocol, 1.0);
    let held = value(
        &metrics,
        "switchyard_outbox_queued_bytes_max",
        &[("listener", "public")],
    );
    // Replies did wait beyond the queue's budget (the run reached the
    // bound's regime)...
    assert!(held > BUDGET as f64, "held {held} B");
    // ...and the queue and the replies waiting held at most
    // max(budget, F) each, not one reply per in-flight slot.
    let bound = (2 * BUDGET.max(LARGE_FRAME)) as f64;
    assert!(held <= bound, "held {held} B > bound {bound} B");
    // The client sees the end: a close (1008), or the connection cut when
    // even the close frame found no room.
    assert_closed_as_slow(&mut stream, Duration::from_secs(30)).await;
    sender.abort();
    stack.gateway.shutdown().await;
}

/// Up to 200 echo requests of `LARGE` bytes of params on `sink`, until a
/// send fails (the gateway closed the connection) or all are sent.
async fn send_large_echoes<S>(mut sink: S)
where
    S: futures_util::Sink<Message> + Unpin,
{
    let pad = "x".repeat(LARGE);
    for i in 0..200 {
        let request = format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{pad}"],"id":{i}}}"#);
        if sink.send(Message::text(request)).await.is_err() {
            break;
        }
    }
}

/// Waits (at most `guard`) until the listener closed a client as a slow
/// consumer; returns how many it closed.
async fn closed_as_slow(admin: std::net::SocketAddr, guard: Duration) -> f64 {
    let slow = [
        ("listener", "public"),
        ("limit", "slow_consumer_timeout_ms"),
    ];
    wait_above(
        admin,
        "switchyard_limit_rejections_total",
        &slow,
        0.0,
        guard,
    )
    .await
}

/// Reads `stream` to its end (at most `guard` per message): a close 1008,
/// or the connection cut when even the close frame found no room.
async fn assert_closed_as_slow<S>(stream: &mut S, guard: Duration)
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let end = loop {
        match tokio::time::timeout(guard, stream.next()).await {
            Err(_) => panic!("the slow client's connection did not end"),
            Ok(Some(Ok(Message::Close(f)))) => {
                break Ended::Close(f.map_or(1005, |f| u16::from(f.code)))
            }
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_)) | None) => break Ended::Eof,
        }
    };
    assert!(
        matches!(end, Ended::Close(1008) | Ended::Eof),
        "the slow client ended with {end:?}"
    );
}
