//! Upstream death, timeouts, clients that leave, and replies for ids
//! switchyard never issued.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use switchyard::daemon::{Daemon, DaemonOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

#[tokio::test]
async fn upstream_killed_mid_flight_fails_pending_at_once_then_recovers() {
    let mut stack = Stack::start("", "pool_size = 2", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    for i in 0..10 {
        send(
            &mut ws,
            &format!(r#"{{"jsonrpc":"2.0","method":"sleep","params":{{"ms":10000}},"id":{i}}}"#),
        )
        .await;
    }
    // Let the requests reach the daemon.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed = Instant::now();
    stack.daemon.take().expect("daemon").stop().await;
    let mut ids = Vec::new();
    for _ in 0..10 {
        let v = json(&recv(&mut ws).await);
        assert_eq!(v["error"]["code"], -32009, "{v}");
        ids.push(v["id"].as_u64().expect("id"));
    }
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "took {:?}",
        killed.elapsed()
    );
    ids.sort_unstable();
    assert_eq!(ids, (0..10).collect::<Vec<u64>>());

    // While the daemon is down, calls fail fast with -32009.
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":"down"}"#,
    )
    .await;
    assert_eq!(json(&recv(&mut ws).await)["error"]["code"], -32009);

    // Restart the daemon on the same path: switchyard reconnects by itself.
    let daemon = Daemon::start(&stack.socket, DaemonOptions::default())
        .await
        .expect("restart");
    stack.daemon = Some(daemon);
    let mut recovered = false;
    for attempt in 0..100 {
        send(
            &mut ws,
            &format!(r#"{{"jsonrpc":"2.0","method":"echo","params":[{attempt}],"id":{attempt}}}"#),
        )
        .await;
        let v = json(&recv(&mut ws).await);
        if v.get("result").is_some() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        recovered,
        "requests never succeeded after the daemon restarted"
    );
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn timeout_answers_32008_and_the_late_reply_is_dropped_and_counted() {
    let stack = Stack::start("request_timeout_ms = 200", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"sleep","params":{"ms":3000},"id":"slow"}"#,
    )
    .await;
    let started = Instant::now();
    assert_eq!(
        recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","error":{"code":-32008,"message":"Timeout","data":"no reply from upstream within 200 ms"},"id":"slow"}"#
    );
    // Settled by the 200 ms timeout, well before the daemon's reply (3 s).
    assert!(started.elapsed() < Duration::from_millis(2500));
    // The daemon's late reply arrives and is counted as stale, not delivered.
    let stale = [("kind", "stale")];
    assert!(
        eventually(Duration::from_secs(20), || stack
            .counter("switchyard_unmatched_responses_total", &stale)
            == 1.0)
        .await
    );
    expect_silence(&mut ws, Duration::from_millis(100)).await;
    assert_eq!(stack.counter("switchyard_correlator_entries", &[]), 0.0);
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn a_client_that_disconnects_has_its_pending_entries_purged() {
    let stack = Stack::start("", "", DaemonOptions::default()).await;
    let mut ws = stack.client().await;
    for i in 0..5 {
        send(
            &mut ws,
            &format!(r#"{{"jsonrpc":"2.0","method":"sleep","params":[3000],"id":{i}}}"#),
        )
        .await;
    }
    let entries = || stack.counter("switchyard_correlator_entries", &[("upstream", "daemon")]);
    assert!(
        eventually(Duration::from_secs(20), || entries() == 5.0).await,
        "entries {}",
        entries()
    );
    // Purged when the client goes, long before the daemon answers (3 s).
    drop(ws);
    assert!(
        eventually(Duration::from_millis(2500), || entries() == 0.0).await,
        "entries {}",
        entries()
    );
    // The daemon still answers later; those replies are stale and go nowhere.
    let stale = [("kind", "stale")];
    assert!(
        eventually(Duration::from_secs(20), || stack
            .counter("switchyard_unmatched_responses_total", &stale)
            == 5.0)
        .await
    );
    // Another client is unaffected.
    let mut other = stack.client().await;
    send(
        &mut other,
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#,
    )
    .await;
    assert_eq!(
        recv(&mut other).await,
        r#"{"jsonrpc":"2.0","result":[1],"id":1}"#
    );
    stack.gateway.shutdown().await;
}

/// An upstream that answers every request first with a reply for an id
/// switchyard never issued, then with the right one.
async fn rogue_upstream(listener: UnixListener) {
    let (stream, _) = listener.accept().await.expect("accept");
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let v: serde_json::Value = serde_json::from_str(&line).expect("json line");
        let id = v["id"].as_u64().expect("gateway ids are integers");
        let bogus = format!(
            "{{\"jsonrpc\":\"2.0\",\"result\":\"not yours\",\"id\":{}}}\n",
            id + 1000
        );
        let real = format!("{{\"jsonrpc\":\"2.0\",\"result\":\"yours\",\"id\":{id}}}\n");
        write.write_all(bogus.as_bytes()).await.expect("write");
        write.write_all(real.as_bytes()).await.expect("write");
    }
}

#[tokio::test]
async fn replies_for_unknown_ids_are_dropped_and_counted() {
    let (_dir, gateway, url) = front_of("pool_size = 1", rogue_upstream).await;
    let mut ws = connect(&url).await;
    for i in 0..3 {
        send(
            &mut ws,
            &format!(r#"{{"jsonrpc":"2.0","method":"m","id":{i}}}"#),
        )
        .await;
        assert_eq!(
            recv(&mut ws).await,
            format!(r#"{{"jsonrpc":"2.0","result":"yours","id":{i}}}"#)
        );
    }
    expect_silence(&mut ws, Duration::from_millis(100)).await;
    let unknown = metric_value(
        &gateway,
        "switchyard_unmatched_responses_total",
        &[("kind", "unknown")],
    );
    assert_eq!(unknown, 3.0);
    gateway.shutdown().await;
}

#[tokio::test]
async fn an_oversize_upstream_reply_fails_only_its_own_call() {
    let stack = Stack::start(
        "",
        "pool_size = 1\nmax_response_bytes = 1024",
        DaemonOptions::default(),
    )
    .await;
    let mut ws = stack.client().await;
    let big = "x".repeat(1500);
    send(
        &mut ws,
        &format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{big}"],"id":"big"}}"#),
    )
    .await;
    let v = json(&recv(&mut ws).await);
    assert_eq!(v["id"], "big");
    assert_eq!(v["error"]["code"], -32007, "{v}");
    assert!(
        v["error"]["data"]
            .as_str()
            .is_some_and(|d| d.contains("max_response_bytes")),
        "{v}"
    );
    // The same upstream connection carries on.
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":["small"],"id":"small"}"#,
    )
    .await;
    assert_eq!(
        recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","result":["small"],"id":"small"}"#
    );
    assert_eq!(
        stack.counter("switchyard_upstream_reconnects_total", &[]),
        0.0
    );
    stack.gateway.shutdown().await;
}

/// The client asked for nothing wrong: the upstream's oversize reply is
/// the upstream's fault, and counted on its side (not as a client error,
/// which `resource_exhausted` usually is).
#[tokio::test]
async fn an_oversize_upstream_reply_is_counted_on_the_upstream_side() {
    let stack = Stack::start(
        "",
        "pool_size = 1\nmax_response_bytes = 1024",
        DaemonOptions::default(),
    )
    .await;
    let mut ws = stack.client().await;
    let big = "x".repeat(1500);
    send(
        &mut ws,
        &format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{big}"],"id":1}}"#),
    )
    .await;
    let v = json(&recv(&mut ws).await);
    assert_eq!(v["error"]["code"], -32007, "{v}");
    let errors = |side| {
        stack.counter(
            "switchyard_errors_total",
            &[("side", side), ("kind", "resource_exhausted")],
        )
    };
    assert_eq!(errors("upstream"), 1.0);
    assert_eq!(errors("client"), 0.0);
    assert_eq!(
        stack.counter(
            "switchyard_protocol_errors_total",
            &[("side", "upstream"), ("reason", "response_too_large")],
        ),
        1.0
    );
    stack.gateway.shutdown().await;
}

/// A reply too long to read whole (over twice `max_response_bytes`) ends
/// the connection; it is counted as the upstream's oversize reply.
#[tokio::test]
async fn a_reply_too_long_to_read_ends_the_link_and_is_counted() {
    let stack = Stack::start(
        "",
        "pool_size = 1\nmax_response_bytes = 1024",
        DaemonOptions::default(),
    )
    .await;
    let mut ws = stack.client().await;
    let huge = "x".repeat(3000);
    send(
        &mut ws,
        &format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{huge}"],"id":1}}"#),
    )
    .await;
    let v = json(&recv(&mut ws).await);
    assert_eq!(v["error"]["code"], -32009, "{v}");
    assert_eq!(
        stack.counter(
            "switchyard_protocol_errors_total",
            &[("side", "upstream"), ("reason", "response_too_large")],
        ),
        1.0
    );
    stack.gateway.shutdown().await;
}

/// An upstream that, once three requests are in, answers them with a
/// non-UTF-8 line and a non-JSON line between the replies, then answers
/// plainly. Counts the connections it accepts.
async fn garbling_upstream(listener: UnixListener, accepted: Arc<AtomicUsize>) {
    while let Ok((stream, _)) = listener.accept().await {
        accepted.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            let mut ids = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                let v: serde_json::Value = serde_json::from_str(&line).expect("json line");
                ids.push(v["id"].as_u64().expect("gateway ids are integers"));
                if ids.len() < 3 {
                    continue;
                }
                let reply =
                    |id: u64| format!("{{\"jsonrpc\":\"2.0\",\"result\":\"ok\",\"id\":{id}}}\n");
                let mut out = Vec::new();
                for (i, id) in ids.drain(..).enumerate() {
                    out.extend_from_slice(reply(id).as_bytes());
                    match i {
                        0 => out.extend_from_slice(b"\xff\xfe not UTF-8 \xc3\x28\n"),
                        1 => out.extend_from_slice(b"not JSON at all\n"),
                        _ => {}
                    }
                }
                write.write_all(&out).await.expect("write");
                // From now on, one reply per request.
                while let Ok(Some(line)) = lines.next_line().await {
                    let v: serde_json::Value = serde_json::from_str(&line).expect("json line");
                    let id = v["id"].as_u64().expect("gateway ids are integers");
                    write.write_all(reply(id).as_bytes()).await.expect("write");
                }
            }
        });
    }
}

#[tokio::test]
async fn a_garbage_line_from_an_ndjson_upstream_is_dropped_and_the_connection_kept() {
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let (_dir, gateway, url) = front_of("pool_size = 1", move |listener| {
        garbling_upstream(listener, counter)
    })
    .await;
    wait_connected(&gateway, "daemon").await;
    let mut ws = connect(&url).await;
    // Three calls in flight at once; the garbage arrives between their replies.
    for i in 0..3 {
        send(
            &mut ws,
            &format!(r#"{{"jsonrpc":"2.0","method":"m","id":{i}}}"#),
        )
        .await;
    }
    let mut answered = Vec::new();
    for _ in 0..3 {
        let v = json(&recv(&mut ws).await);
        assert_eq!(v["result"], "ok", "{v}");
        answered.push(v["id"].as_u64().expect("id"));
    }
    answered.sort_unstable();
    assert_eq!(answered, [0, 1, 2]);
    // The same connection carries on.
    send(&mut ws, r#"{"jsonrpc":"2.0","method":"m","id":3}"#).await;
    assert_eq!(
        recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","result":"ok","id":3}"#
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "no reconnection");
    assert_eq!(
        metric_value(&gateway, "switchyard_upstream_reconnects_total", &[]),
        0.0
    );
    let garbage = metric_value(
        &gateway,
        "switchyard_protocol_errors_total",
        &[("side", "upstream"), ("reason", "invalid_message")],
    );
    assert_eq!(garbage, 2.0);
    gateway.shutdown().await;
}
