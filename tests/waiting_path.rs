//! The waiting path of requests to a pooled upstream with no room: they
//! park in the upstream's queue (no task each), go out in arrival order
//! when room frees, are answered `resource_exhausted` once they waited
//! the queue timeout (or `timeout` at an earlier deadline), and never reach
//! the upstream when their client left.
//!
//! The upstream here is a real NDJSON peer on a Unix socket that the test
//! drives: it reports every request it reads, holds `hold` until released
//! and echoes anything else at once.

mod common;

use std::time::{Duration, Instant};

use common::clients::{Speak, TestClient};
use common::{json, metric_value, stack_toml, wait_connected};
use serde_json::Value;
use switchyard::app::Running;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tokio::sync::mpsc;

/// How long a test waits for something the upstream should have read.
const STEP: Duration = Duration::from_secs(10);

/// How long the upstream must read nothing when nothing may reach it.
const QUIET: Duration = Duration::from_millis(500);

/// The test's end of the upstream.
struct Gate {
    /// Every request line the upstream read, in order.
    seen: mpsc::UnboundedReceiver<Value>,
    /// Answers the `hold` being held.
    release: mpsc::UnboundedSender<()>,
    _dir: tempfile::TempDir,
    gateway: Running,
    url: String,
    /// The holder's listener (`public` unless a `holder` listener exists).
    holder_url: String,
}

impl Gate {
    /// A gateway in front of the test's upstream; `upstream_extra` and
    /// `listener_extra` are TOML lines for their tables.
    async fn start(listener_extra: &str, upstream_extra: &str) -> Gate {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("gate.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        let (seen_tx, seen) = mpsc::unbounded_channel();
        let (release, release_rx) = mpsc::unbounded_channel();
        tokio::spawn(serve(listener, seen_tx, release_rx));
        let toml = stack_toml(&socket, listener_extra, upstream_extra);
        let cfg = switchyard::config::Config::from_toml(&toml).expect("config");
        let bound = switchyard::app::bind(cfg).await.expect("bind");
        let url = bound.ws_url("public").expect("url");
        let holder_url = bound.ws_url("holder").unwrap_or_else(|| url.clone());
        let gateway = bound.spawn();
        wait_connected(&gateway, "daemon").await;
        Gate {
            seen,
            release,
            _dir: dir,
            gateway,
            url,
            holder_url,
        }
    }

    /// The next request the upstream read.
    async fn next_seen(&mut self) -> Value {
        tokio::time::timeout(STEP, self.seen.recv())
            .await
            .expect("the upstream read nothing")
            .expect("upstream gone")
    }

    /// Asserts that the upstream reads nothing more during a quiet period.
    /// Callers get a marker first (a reply that proves the gateway handled
    /// everything sent before it), so a request that was going to be
    /// written has had its chance; the quiet period gives the write and the
    /// upstream's read the time a busy machine may need.
    async fn nothing_more_seen(&mut self) {
        if let Ok(Some(v)) = tokio::time::timeout(QUIET, self.seen.recv()).await {
            panic!("the upstream read {v}");
        }
    }

    /// A client that has the upstream's only slot taken by a `hold`.
    async fn holder(&mut self) -> TestClient {
        let mut c = TestClient::connect(Speak::JsonRpc, &self.holder_url).await;
        c.send(r#"{"jsonrpc":"2.0","method":"hold","id":"hold"}"#)
            .await;
        assert_eq!(self.next_seen().await["method"], "hold");
        c
    }
}

/// Serves one connection: reports each request as it is read, holds
/// `hold` until released (reading on meanwhile), echoes the rest.
async fn serve(
    listener: UnixListener,
    seen: mpsc::UnboundedSender<Value>,
    mut release: mpsc::UnboundedReceiver<()>,
) {
    let (stream, _) = listener.accept().await.expect("accept");
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut held = Vec::new();
    loop {
        let reply = tokio::select! {
            line = lines.next_line() => {
                let Ok(Some(line)) = line else { return };
                let v: Value = serde_json::from_str(&line).expect("a JSON line");
                let _ = seen.send(v.clone());
                if v["method"] == "hold" {
                    held.push(v);
                    continue;
                }
                v
            }
            released = release.recv() => {
                if released.is_none() || held.is_empty() {
                    return;
                }
                held.remove(0)
            }
        };
        let reply =
            serde_json::json!({"jsonrpc": "2.0", "result": reply["params"], "id": reply["id"]});
        if write
            .write_all(format!("{reply}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// A request answered by switchyard itself through the task path: once its
/// reply is back, the reader has handled everything sent before it.
const SENTINEL: &str = r#"{"jsonrpc":"2.0","method":"rpc.no_such_method","id":"sentinel"}"#;

fn echo(id: usize, tag: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{tag}",{id}],"id":{id}}}"#)
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

#[tokio::test]
async fn parked_requests_take_no_task_each_and_go_out_in_arrival_order() {
    const PARKED: usize = 120;
    let mut gate = Gate::start("", "pool_size = 1\nmax_pending = 1").await;
    let mut c = gate.holder().await;
    let before = alive_tasks();
    for i in 0..PARKED {
        c.send(&echo(i, "p")).await;
    }
    c.send(SENTINEL).await;
    assert_eq!(json(&c.recv().await)["id"], "sentinel");
    // Every request is parked now: none reached the upstream, and none
    // has a task of its own (the task path held one per request).
    let grown = alive_tasks().saturating_sub(before);
    assert!(
        grown < PARKED / 4,
        "{grown} more tasks for {PARKED} parked requests"
    );
    gate.nothing_more_seen().await;
    gate.release.send(()).expect("release");
    assert_eq!(json(&c.recv().await)["id"], "hold");
    for i in 0..PARKED {
        let v = gate.next_seen().await;
        assert_eq!(v["params"], serde_json::json!(["p", i]), "upstream order");
        let reply = json(&c.recv().await);
        assert_eq!(reply["id"], i, "reply order: {reply}");
    }
    gate.gateway.shutdown().await;
}

#[tokio::test]
async fn a_parked_request_gets_resource_exhausted_at_the_queue_timeout_and_not_before() {
    let mut gate = Gate::start("", "pool_size = 1\nmax_pending = 1\nqueue_timeout_ms = 400").await;
    let mut c = gate.holder().await;
    let parked = Instant::now();
    c.send(&echo(1, "late")).await;
    let v = json(&c.recv().await);
    let waited = parked.elapsed();
    assert_eq!(v["id"], 1, "{v}");
    assert_eq!(v["error"]["code"], -32007, "{v}");
    assert_eq!(
        v["error"]["data"],
        "no upstream capacity within the queue timeout (400 ms)"
    );
    assert!(waited >= Duration::from_millis(400), "after {waited:?}");
    let side = [("side", "upstream"), ("kind", "resource_exhausted")];
    assert_eq!(
        metric_value(&gate.gateway, "switchyard_errors_total", &side),
        1.0
    );
    gate.nothing_more_seen().await;
    // The slot held all along: the timed-out request was never written.
    gate.release.send(()).expect("release");
    assert_eq!(json(&c.recv().await)["id"], "hold");
    c.send(&echo(2, "after")).await;
    assert_eq!(
        gate.next_seen().await["params"],
        serde_json::json!(["after", 2])
    );
    assert_eq!(json(&c.recv().await)["id"], 2);
    gate.gateway.shutdown().await;
}

#[tokio::test]
async fn a_parked_request_whose_deadline_comes_first_gets_timeout() {
    // The holder comes through a listener of its own, with a long timeout.
    let holder = r#"
[listeners.holder]
dialect = "jsonrpc-ws"
address = "127.0.0.2:0"
path = "/rpc"
"#;
    let route = "\n[[routes]]\nlistener = \"holder\"\nupstream = \"daemon\"\n";
    let mut gate = Gate::start(
        &format!("request_timeout_ms = 300\n{holder}"),
        &format!("pool_size = 1\nmax_pending = 1\nqueue_timeout_ms = 60000\n{route}"),
    )
    .await;
    let mut held = gate.holder().await;
    let mut c = TestClient::connect(Speak::JsonRpc, &gate.url).await;
    let parked = Instant::now();
    c.send(&echo(1, "late")).await;
    let v = json(&c.recv().await);
    assert!(parked.elapsed() >= Duration::from_millis(300));
    assert_eq!(v["id"], 1, "{v}");
    assert_eq!(v["error"]["code"], -32008, "{v}");
    gate.nothing_more_seen().await;
    gate.release.send(()).expect("release");
    assert_eq!(json(&held.recv().await)["id"], "hold");
    gate.gateway.shutdown().await;
}

#[tokio::test]
async fn parked_requests_of_a_client_that_left_never_reach_the_upstream() {
    let mut gate = Gate::start("", "pool_size = 1\nmax_pending = 1").await;
    let mut holder = gate.holder().await;
    let mut leaver = TestClient::connect(Speak::JsonRpc, &gate.url).await;
    for i in 0..20 {
        leaver.send(&echo(i, "gone")).await;
    }
    leaver.send(SENTINEL).await;
    assert_eq!(json(&leaver.recv().await)["id"], "sentinel");
    drop(leaver);
    let open = || metric_value(&gate.gateway, "switchyard_connections_open", &[]);
    assert!(common::eventually(STEP, || open() == 1.0).await);
    gate.release.send(()).expect("release");
    assert_eq!(json(&holder.recv().await)["id"], "hold");
    holder.send(&echo(7, "stayed")).await;
    // The next request the upstream reads is the one sent after them.
    assert_eq!(
        gate.next_seen().await["params"],
        serde_json::json!(["stayed", 7])
    );
    assert_eq!(json(&holder.recv().await)["id"], 7);
    gate.nothing_more_seen().await;
    gate.gateway.shutdown().await;
}

#[tokio::test]
async fn parked_requests_are_answered_unavailable_when_the_shutdown_grace_ends() {
    let mut gate = Gate::start(
        "",
        "pool_size = 1\nmax_pending = 1\n[gateway]\nshutdown_grace_ms = 300\n",
    )
    .await;
    let mut holder = gate.holder().await;
    let mut c = TestClient::connect(Speak::JsonRpc, &gate.url).await;
    for i in 0..3 {
        c.send(&echo(i, "parked")).await;
    }
    c.send(SENTINEL).await;
    assert_eq!(json(&c.recv().await)["id"], "sentinel");
    let Gate {
        gateway,
        mut seen,
        release,
        ..
    } = gate;
    let stopping = tokio::spawn(gateway.shutdown());
    let mut ids = Vec::new();
    for _ in 0..3 {
        let v = json(&c.recv().await);
        assert_eq!(v["error"]["code"], -32009, "{v}");
        assert_eq!(v["error"]["data"], "switchyard is shutting down", "{v}");
        ids.push(v["id"].as_u64().expect("id"));
    }
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2]);
    assert_eq!(json(&holder.recv().await)["error"]["code"], -32009);
    stopping.await.expect("shutdown");
    // Only the hold ever reached the upstream.
    assert!(seen.try_recv().is_err());
    // Each call was answered once: the gateway closes both connections
    // with nothing after those answers.
    for client in [&mut c, &mut holder] {
        if let Ok(extra) = client.next().await {
            panic!("a second answer: {extra}");
        }
    }
    drop(release);
}
