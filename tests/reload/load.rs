//! 20 reloads under load: two configurations alternate, changing the route
//! of `who*` methods (NDJSON daemon `a` ⇄ WebSocket daemon `b`), the
//! listener's limits, and upstream `a` itself (so it is replaced and
//! drained each time), while 20 clients keep 50 requests each in flight.
//! `whoami` tells the upstreams apart: `a` does not know it (-32601
//! `Method not found`, no `data`), `b` answers `{"connection":N}`.
//!
//! Every request is answered, by an upstream, on the same connection; none
//! is closed. A request whose whole life fell between two reloads (the
//! epoch, odd while a reload runs, did not move) must be answered by the
//! upstream its generation routes `who*` to.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use super::common::*;
use super::{start, TOKEN};
use switchyard::client::reload::{reload, Reloaded};
use switchyard::daemon::ws::{WsDaemon, WsDialect};
use switchyard::daemon::{Daemon, DaemonOptions};

const CLIENTS: usize = 20;
const WINDOW: usize = 50;
const RELOADS: u64 = 20;
/// Requests each generation answers, whole lives within it (exactly
/// checked), before the next reload: each one really serves traffic.
const PER_GENERATION: u64 = 100;

/// Generation `g`'s configuration: odd ones route `who*` to `a`, even ones
/// to `b`; limits and `a`'s pool differ.
fn config(socket: &std::path::Path, b_url: &str, generation: u64) -> String {
    let odd = generation % 2 == 1;
    let (who, pool, rate, conns) = if odd {
        ("a", 2, 1_000_000, 100)
    } else {
        ("b", 3, 2_000_000, 200)
    };
    format!(
        r#"
[admin]
address = "127.0.0.1:0"
reload_token = "{TOKEN}"

[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"
request_timeout_ms = 60000
rate_per_second = {rate}
rate_burst = {rate}
max_connections = {conns}

[upstreams.a]
dialect = "ndjson"
socket = "{socket}"
pool_size = {pool}
max_in_flight_per_connection = 512
max_pending = 2048
backoff_initial_ms = 50
backoff_max_ms = 200

[upstreams.b]
dialect = "jsonrpc-ws"
url = "{b_url}"
pool_size = 2
max_in_flight_per_connection = 512
max_pending = 2048

[[routes]]
listener = "public"
upstream = "a"

[[routes]]
listener = "public"
upstream = "{who}"
method_prefix = "who"
"#,
        socket = socket.display()
    )
}

/// What the clients saw, all together.
#[derive(Default)]
struct Seen {
    answered: AtomicU64,
    /// Requests whose whole life fell in one generation, checked exactly.
    checked_a: AtomicU64,
    checked_b: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_reloads_under_load_lose_misroute_and_close_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("a.sock");
    let a = Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon a");
    let b = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::JsonRpc)
        .await
        .expect("daemon b");
    let file = dir.path().join("switchyard.toml");
    std::fs::write(&file, config(&socket, &b.url(), 1)).expect("write");
    let (gateway, url, admin) = start(&file).await;
    wait_connected(&gateway, "a").await;
    wait_connected(&gateway, "b").await;
    let epoch = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let ws = connect(&url).await;
        let (epoch, stop, seen) = (epoch.clone(), stop.clone(), seen.clone());
        clients.push(tokio::spawn(client(c, ws, epoch, stop, seen)));
    }
    for k in 0..RELOADS {
        // Generation k + 1 serves until it has answered enough requests
        // admitted and answered within it.
        let checked = if k % 2 == 0 {
            &seen.checked_a
        } else {
            &seen.checked_b
        };
        let target = checked.load(Ordering::SeqCst) + PER_GENERATION;
        assert!(
            eventually(Duration::from_secs(120), || {
                checked.load(Ordering::SeqCst) >= target
            })
            .await,
            "traffic stalled before reload {k}"
        );
        let generation = k + 2;
        epoch.fetch_add(1, Ordering::SeqCst);
        std::fs::write(&file, config(&socket, &b.url(), generation)).expect("write");
        let outcome = reload(&admin, Some(TOKEN), Duration::from_secs(60)).await;
        assert!(
            matches!(outcome, Ok(Reloaded::Ok(g)) if g == generation),
            "reload {k}: {outcome:?}"
        );
        epoch.fetch_add(1, Ordering::SeqCst);
    }
    let target = seen.checked_a.load(Ordering::SeqCst) + PER_GENERATION;
    assert!(
        eventually(Duration::from_secs(120), || {
            seen.checked_a.load(Ordering::SeqCst) >= target
        })
        .await
    );
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.expect("client");
    }
    let (ca, cb) = (
        seen.checked_a.load(Ordering::SeqCst),
        seen.checked_b.load(Ordering::SeqCst),
    );
    let answered = seen.answered.load(Ordering::SeqCst);
    assert!(ca > 0 && cb > 0, "exact checks: a {ca}, b {cb}");
    assert!(answered >= ca + cb, "{answered} answers");
    let m = |name, labels| metric_value(&gateway, name, labels);
    // Every replaced `a` drained and closed: only the last one's pool
    // (generation 21: 2 connections) is left, long before the request
    // timeout (60 s) that bounds a drain.
    let a_conns = || m("switchyard_upstream_connections", &[("upstream", "a")]);
    assert!(
        eventually(Duration::from_secs(30), || a_conns() == 2.0).await,
        "connections to a: {}",
        a_conns()
    );
    assert_eq!(m("switchyard_config_generation", &[]), (RELOADS + 1) as f64);
    assert_eq!(
        m("switchyard_config_reloads_total", &[("result", "ok")]),
        RELOADS as f64
    );
    gateway.shutdown().await;
    a.stop().await;
    b.stop().await;
}

/// One client: keeps `WINDOW` requests in flight until `stop`, then waits
/// for the last answers. Every answer is checked.
async fn client(c: usize, ws: Ws, epoch: Arc<AtomicU64>, stop: Arc<AtomicBool>, seen: Arc<Seen>) {
    let (mut tx, mut rx) = ws.split();
    // Request id → the epoch when it was sent.
    let mut out: HashMap<u64, u64> = HashMap::new();
    let mut next = 0u64;
    loop {
        while out.len() < WINDOW && !stop.load(Ordering::SeqCst) {
            let id = next;
            next += 1;
            out.insert(id, epoch.load(Ordering::SeqCst));
            let text = format!(r#"{{"jsonrpc":"2.0","method":"whoami","id":{id}}}"#);
            tx.send(Message::Text(text.into())).await.expect("send");
        }
        if out.is_empty() {
            return;
        }
        let frame = tokio::time::timeout(Duration::from_secs(120), rx.next())
            .await
            .unwrap_or_else(|_| panic!("client {c}: no answer for {} requests", out.len()));
        let text = match frame {
            Some(Ok(Message::Text(t))) => t.to_string(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("client {c}: connection ended: {other:?}"),
        };
        let after = epoch.load(Ordering::SeqCst);
        let reply = json(&text);
        let id = reply["id"].as_u64().expect("id");
        let before = out.remove(&id).unwrap_or_else(|| panic!("unknown id {id}"));
        let by_a = reply["error"]["code"] == -32601
            && reply["error"]["message"] == "Method not found"
            && reply["error"].get("data").is_none();
        let by_b = reply["result"]["connection"].is_u64();
        assert!(by_a || by_b, "client {c}: not an upstream's answer: {text}");
        if before == after && before.is_multiple_of(2) {
            let generation = 1 + before / 2;
            let want_a = generation % 2 == 1;
            assert_eq!(
                by_a, want_a,
                "client {c}: generation {generation} misrouted {text}"
            );
            let checked = if want_a {
                &seen.checked_a
            } else {
                &seen.checked_b
            };
            checked.fetch_add(1, Ordering::SeqCst);
        }
        seen.answered.fetch_add(1, Ordering::SeqCst);
    }
}
