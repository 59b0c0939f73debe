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

/// Never-reading clients of the RSS test.
const RSS_CLIENTS: usize = 8;
/// Each echo's params in the RSS test: requests and replies of about 64 KiB
/// (the outbox's 1,024 messages alone would let 64 MiB of them queue).
const RSS_REPLY: usize = 64 * 1024;
/// The default `outbox_max_bytes`.
const DEFAULT_BUDGET: usize = 4 << 20;
/// The default `max_in_flight`.
const DEFAULT_IN_FLIGHT: usize = 256;

/// The gateway's own gauge is not the only witness: a child switchyard with
/// the default listener limits, in front of the reference daemon, serves
/// never-reading clients that each send up to 96 MiB worth of echo
/// requests, and the peak RSS the kernel reports for it (`VmHWM`) grows by
/// no more than the documented bound per client (requests waiting to be
/// written, and 2 × max(outbox_max_bytes, F) + F of replies), with slack for
/// the allocator and the runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_reading_clients_grow_a_child_gateways_rss_by_no_more_than_the_bound() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let daemon = switchyard::daemon::Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    let gateway = common::child::Gateway::start(dir.path(), &socket, "").await;
    // Connected and warm: every client made one round trip.
    let mut clients = Vec::new();
    for i in 0..RSS_CLIENTS {
        let mut ws = common::connect_tiny_window(&gateway.url).await;
        common::send(
            &mut ws,
            &format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["warm"],"id":"w{i}"}}"#),
        )
        .await;
        common::recv(&mut ws).await;
        clients.push(ws);
    }
    let before = gateway.rss_kib("VmRSS");
    let sent: Arc<Vec<AtomicUsize>> =
        Arc::new((0..RSS_CLIENTS).map(|_| AtomicUsize::new(0)).collect());
    let mut senders = Vec::new();
    let mut readers = Vec::new();
    for (i, ws) in clients.into_iter().enumerate() {
        let (mut sink, stream) = ws.split();
        readers.push(stream); // never read, kept open
        let sent = sent.clone();
        senders.push(tokio::spawn(async move {
            let pad = "x".repeat(RSS_REPLY);
            for id in 0..1500 {
                let request =
                    format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{pad}"],"id":{id}}}"#);
                if sink.send(Message::text(request)).await.is_err() {
                    return; // closed as a slow consumer: an outcome
                }
                sent[i].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // The run ends when every sender is done (closed, or all sent) or none
    // made progress for two seconds in a row (the gateway stopped reading
    // them all): then whatever the gateway holds, it holds.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let total = || {
        sent.iter()
            .map(|s| s.load(Ordering::Relaxed))
            .sum::<usize>()
    };
    let mut last = (total(), tokio::time::Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = total();
        if now != last.0 {
            last = (now, tokio::time::Instant::now());
        }
        let stalled = last.1.elapsed() >= Duration::from_secs(2);
        if senders.iter().all(|s| s.is_finished()) || stalled {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the clients kept sending for 120 s ({now} requests)"
        );
    }
    let peak = gateway.rss_kib("VmHWM");
    let sent = total();
    // The clients pushed more than a byte budget each on average (the run
    // reached the bound's regime: replies queued and waiting to the budget).
    assert!(
        sent * RSS_REPLY > RSS_CLIENTS * DEFAULT_BUDGET,
        "only {sent} requests were sent"
    );
    // The documented bound per client (README, Architecture): requests
    // waiting to be written keep their read buffers (at most max_in_flight
    // of them, each at most twice the frame it grew to hold), and the
    // outbox holds 2 × max(outbox_max_bytes, F) + F of replies; plus the
    // frame being read. The slack is the allocator's and the runtime's: a
    // quarter more, and 32 MiB.
    let frame = RSS_REPLY + 256;
    let per_client =
        DEFAULT_IN_FLIGHT * 2 * frame.max(8 * 1024) + 2 * DEFAULT_BUDGET.max(frame) + 2 * frame;
    let bound_kib = (RSS_CLIENTS * per_client * 5 / 4 + (32 << 20)) / 1024;
    let grown = peak.saturating_sub(before);
    eprintln!("peak RSS grew by {grown} KiB; bound {bound_kib} KiB; {sent} requests sent");
    assert!(
        grown <= bound_kib,
        "peak RSS grew by {grown} KiB > {bound_kib} KiB ({sent} requests of {RSS_REPLY} B sent)"
    );
    for s in senders {
        s.abort();
    }
    drop(readers);
    gateway.stop();
    daemon.stop().await;
}
