//! Two switchyard instances on one NATS JetStream:
//! a client subscribes persistently on instance A and acknowledges some of
//! what it gets; A is killed with SIGKILL while events keep coming; the
//! client resumes the same `subscription_id` on instance B and gets every
//! unacknowledged message, and only those. Received on A ∪ received on B
//! is every published message: no loss, no sequence gap.
//!
//! A and B are child processes of the built binary, each in front of the
//! reference JSON-RPC WebSocket daemon (upstream `events`) and with
//! `[persistence] backend = "nats"` on a real `nats-server -js` (random
//! loopback port, temp dir). Events are the daemon's notifications,
//! published by calling its `push` method through an instance: each
//! event enters the store through the instance whose upstream connection
//! carried it (here B, which stays up, so that the publisher never loses
//! an event to the kill; a push through A would be just as stored).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::clients::{Speak, TestClient};
use common::nats::NatsServer;
use serde_json::{json, Value};
use switchyard::daemon::ws::{WsDaemon, WsDialect};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
const TOPIC: &str = "events.tick";
const ID: &str = "two-instance-1";
/// A failure guard for a child's start, never a pause.
const START: Duration = Duration::from_secs(60);

/// A switchyard child process; killed on drop.
struct Instance {
    child: Child,
    url: String,
}

impl Instance {
    fn start(dir: &Path, name: &str, nats: &str, upstream: &str) -> Instance {
        let file = dir.join(format!("{name}.toml"));
        let text = config("[log]\nlevel = \"info\"", nats, upstream);
        std::fs::write(&file, text).unwrap();
        let mut child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&file)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn switchyard");
        // Every line is read, so that the child never blocks on a full
        // pipe. Ready: `public` listening and upstream `events` connected
        // (the order of the two lines is not fixed).
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let tag = name.to_owned();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let wanted = (line.contains("listening") && line.contains("public"))
                    || line.contains("upstream connected");
                if wanted {
                    let _ = tx.send(line.clone());
                }
                if line.contains("ERROR") || line.contains("WARN") {
                    eprintln!("[{tag}] {line}");
                }
            }
        });
        let mut listening = None;
        let mut connected = false;
        while listening.is_none() || !connected {
            let line = rx.recv_timeout(START).unwrap_or_else(|_| {
                panic!("{name} did not log its listener and upstream within {START:?}")
            });
            if line.contains("upstream connected") {
                connected = true;
            } else {
                listening = Some(line);
            }
        }
        let line = listening.unwrap();
        // `address=ws://127.0.0.1:PORT/rpc`
        let url = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("address="))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .trim_matches('"')
            .to_owned();
        Instance { child, url }
    }

    /// SIGKILL, and wait until it is gone.
    fn kill(&mut self) {
        self.child.kill().unwrap(); // SIGKILL on Unix
        self.child.wait().unwrap();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JSON-RPC client that keeps the persistent deliveries it reads while
/// waiting for a reply.
struct Client {
    c: TestClient,
    next_id: u64,
    deliveries: Vec<Value>,
}

impl Client {
    async fn connect(url: &str) -> Client {
        Client {
            c: TestClient::connect(Speak::JsonRpc, url).await,
            next_id: 1,
            deliveries: Vec::new(),
        }
    }

    async fn read(&mut self) -> Value {
        let msg: Value = serde_json::from_str(&self.c.recv().await).expect("JSON");
        if msg["method"] == "rpc.notification.persistent" {
            self.deliveries.push(msg["params"].clone());
        }
        msg
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
        self.c.send(&request.to_string()).await;
        loop {
            let msg = self.read().await;
            if msg["id"] == id {
                return msg;
            }
        }
    }

    /// Reads until `n` deliveries are kept.
    async fn until(&mut self, n: usize) {
        while self.deliveries.len() < n {
            self.read().await;
        }
    }

    async fn ack(&mut self, seq: u64) {
        let params = json!({"subscription_id": ID, "sequence_id": seq});
        let reply = self.call("rpc.acknowledge.persistent", params).await;
        assert_eq!(reply["result"], json!({"acknowledged": true}), "{reply}");
    }
}

fn seq(d: &Value) -> u64 {
    d["sequence_id"].as_u64().expect("sequence_id")
}

/// Publishes `events.tick` `{"n": n}` through the daemon's `push`.
async fn push(c: &mut Client, n: u64) {
    let params = json!({"method": "tick", "params": {"n": n}});
    let reply = c.call("push", params).await;
    assert_eq!(reply["result"], json!({"pushed": true}), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_on_another_instance_after_a_sigkill_and_loses_nothing() {
    const BEFORE: u64 = 40;
    const TOTAL: u64 = 80;
    let nats = NatsServer::start();
    let daemon = WsDaemon::start("127.0.0.1:0".parse().unwrap(), WsDialect::JsonRpc)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut a = Instance::start(dir.path(), "a", &nats.url, &daemon.url());
    let b = Instance::start(dir.path(), "b", &nats.url, &daemon.url());

    let mut sub = Client::connect(&a.url).await;
    let reply = sub
        .call(
            "rpc.subscribe.persistent",
            json!({"subscription_id": ID, "topic": TOPIC}),
        )
        .await;
    assert_eq!(reply["result"]["resumed_from_sequence"], 0, "{reply}");

    let mut publisher = Client::connect(&b.url).await;
    for n in 1..=BEFORE {
        push(&mut publisher, n).await;
    }
    sub.until(BEFORE as usize).await;
    // Acknowledged: 1..=20 but 7 and 13. Not: 7, 13, 21..=40.
    for s in (1..=20).filter(|s| *s != 7 && *s != 13) {
        sub.ack(s).await;
    }

    // Mid-stream: events keep coming while A dies.
    let publishing = tokio::spawn(async move {
        for n in BEFORE + 1..=TOTAL {
            push(&mut publisher, n).await;
        }
        publisher
    });
    sub.until(BEFORE as usize + 5).await;
    a.kill();
    let on_a: Vec<Value> = std::mem::take(&mut sub.deliveries);
    drop(sub);

    let mut sub = Client::connect(&b.url).await;
    let reply = sub
        .call(
            "rpc.subscribe.persistent",
            json!({"subscription_id": ID, "topic": TOPIC}),
        )
        .await;
    assert_eq!(
        reply["result"]["resumed_from_sequence"], 6,
        "every message ≤ 6 was acknowledged, 7 was not: {reply}"
    );
    let _publisher = publishing.await.unwrap();
    // From 7 on, every message not acknowledged on A, in order (those
    // acknowledged out of order above the floor are not sent again).
    let expected: Vec<u64> = [7, 13].into_iter().chain(21..=TOTAL).collect();
    sub.until(expected.len()).await;
    let on_b: Vec<u64> = sub.deliveries.iter().map(seq).collect();
    assert_eq!(on_b[..expected.len()], expected[..], "in order, no gap");

    let mut all = BTreeSet::new();
    for d in on_a.iter().chain(&sub.deliveries) {
        assert_eq!(d["subscription_id"], ID);
        assert_eq!(d["topic"], TOPIC);
        // Published one at a time through B: sequence n holds event n.
        assert_eq!(d["data"]["n"].as_u64(), Some(seq(d)), "{d}");
        let ts = d["timestamp"].as_str().unwrap();
        assert!(
            ts.ends_with('Z') && humantime::parse_rfc3339(ts).is_ok(),
            "{ts}"
        );
        all.insert(seq(d));
    }
    assert_eq!(all, (1..=TOTAL).collect::<BTreeSet<u64>>(), "zero loss");

    // B holds it now: acknowledgements work there.
    for s in 7..=TOTAL {
        sub.ack(s).await;
    }
    drop(b);
    drop(nats);
}

/// The `error.code` of a reply.
fn error_code(reply: &Value) -> i64 {
    reply["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("{reply}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgements_stay_per_message_when_a_client_resumes_on_another_gateway() {
    let nats = NatsServer::start();
    let daemon = WsDaemon::start("127.0.0.1:0".parse().unwrap(), WsDialect::JsonRpc)
        .await
        .unwrap();
    let (gw_a, url_a) = gateway(&nats.url, &daemon.url()).await.unwrap();
    let (gw_b, url_b) = gateway(&nats.url, &daemon.url()).await.unwrap();
    common::wait_connected(&gw_a, "events").await;
    common::wait_connected(&gw_b, "events").await;
    let subscribe = json!({"subscription_id": ID, "topic": TOPIC});
    let floor = |reply: Value| reply["result"]["resumed_from_sequence"].clone();

    let mut sub = Client::connect(&url_a).await;
    let reply = sub
        .call("rpc.subscribe.persistent", subscribe.clone())
        .await;
    assert_eq!(floor(reply), 0);
    let mut publisher = Client::connect(&url_a).await;
    for n in 1..=10 {
        push(&mut publisher, n).await;
    }
    sub.until(10).await;
    for s in [1, 2, 3, 5, 7] {
        sub.ack(s).await;
    }
    let again = sub
        .call("rpc.subscribe.persistent", subscribe.clone())
        .await;
    assert_eq!(floor(again), 3, "repeated on the holder: its floor");
    drop(sub); // detach from A

    let mut sub = Client::connect(&url_b).await;
    let reply = sub
        .call("rpc.subscribe.persistent", subscribe.clone())
        .await;
    assert_eq!(floor(reply), 3, "every message ≤ 3 acknowledged");
    sub.until(5).await;
    let on_b: Vec<u64> = sub.deliveries.iter().map(seq).collect();
    assert_eq!(on_b, [4, 6, 8, 9, 10], "only what was not acknowledged");
    push(&mut publisher, 11).await;
    sub.until(6).await;
    assert_eq!(seq(&sub.deliveries[5]), 11, "then live ones");

    sub.ack(5).await; // acknowledged on A: a no-op, still true
    sub.ack(4).await;
    sub.ack(6).await;
    let again = sub
        .call("rpc.subscribe.persistent", subscribe.clone())
        .await;
    assert_eq!(floor(again), 7, "every message ≤ 7 acknowledged, 8 not");

    // Never delivered to it: above what it got, and, for a subscription
    // that started at 12, below its start.
    let never = json!({"subscription_id": ID, "sequence_id": 12});
    let reply = sub.call("rpc.acknowledge.persistent", never).await;
    assert_eq!(error_code(&reply), -32602, "{reply}");
    let late = json!({"subscription_id": "late-1", "topic": TOPIC});
    let reply = sub.call("rpc.subscribe.persistent", late).await;
    assert_eq!(floor(reply), 11);
    let early = json!({"subscription_id": "late-1", "sequence_id": 2});
    let reply = sub.call("rpc.acknowledge.persistent", early).await;
    assert_eq!(error_code(&reply), -32602, "{reply}");
}

/// An in-process gateway with backend `nats` and an admin listener.
async fn gateway(
    nats_url: &str,
    upstream: &str,
) -> Result<(switchyard::app::Running, String), String> {
    let toml = config("[admin]\naddress = \"127.0.0.1:0\"", nats_url, upstream);
    let cfg = switchyard::config::Config::from_toml(&toml).unwrap();
    let bound = switchyard::app::bind(cfg)
        .await
        .map_err(|e| e.to_string())?;
    let url = bound.ws_url("public").unwrap();
    Ok((bound.spawn(), url))
}

/// The configuration both kinds of gateway use: `head` (a table of its
/// own), one JSON-RPC WebSocket listener in front of `upstream`, and
/// [`TOPIC`] persistent on the NATS server at `nats`.
fn config(head: &str, nats: &str, upstream: &str) -> String {
    format!(
        r#"
{head}

[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"

[upstreams.events]
dialect = "jsonrpc-ws"
url = "{upstream}"
pool_size = 1

[[routes]]
listener = "public"
upstream = "events"

[persistence]
backend = "nats"
nats_url = "{nats}"

[[persistent_topics]]
topic = "{TOPIC}"
"#
    )
}

/// `/readyz`: status and body.
async fn readyz(admin: std::net::SocketAddr) -> (u16, String) {
    let url = format!("http://{admin}/readyz");
    tokio::task::spawn_blocking(move || {
        let (status, _, body) = common::demo::http_get(&url, &[]);
        (status, String::from_utf8_lossy(&body).into_owned())
    })
    .await
    .unwrap()
}

/// Polls `/readyz` until it answers `status` (a failure guard of 60 s).
async fn wait_ready(admin: std::net::SocketAddr, status: u16) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = readyz(admin).await;
        if got.0 == status || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_nats_connection_and_metrics_carry_backend_nats() {
    let mut nats = NatsServer::start();
    let daemon = WsDaemon::start("127.0.0.1:0".parse().unwrap(), WsDialect::JsonRpc)
        .await
        .unwrap();
    let (gw, url) = gateway(&nats.url, &daemon.url()).await.unwrap();
    common::wait_connected(&gw, "events").await;
    let admin = gw.admin_addr().unwrap();
    assert_eq!(wait_ready(admin, 200).await.0, 200);

    let mut c = Client::connect(&url).await;
    let reply = c
        .call(
            "rpc.subscribe.persistent",
            json!({"subscription_id": "ready-1", "topic": TOPIC}),
        )
        .await;
    assert_eq!(reply["result"]["resumed_from_sequence"], 0, "{reply}");
    push(&mut c, 1).await;
    c.until(1).await;
    let nats_label = [("backend", "nats")];
    assert_eq!(
        common::metric_value(&gw, "switchyard_persistent_published_total", &nats_label),
        1.0
    );
    assert_eq!(
        common::metric_value(
            &gw,
            "switchyard_persistent_subscriptions_attached",
            &nats_label
        ),
        1.0
    );

    nats.stop();
    let (status, body) = wait_ready(admin, 503).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("nats") && body.contains("NATS"), "{body}");
    nats.restart();
    let (status, body) = wait_ready(admin, 200).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn an_unreachable_nats_url_fails_the_start() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let daemon = WsDaemon::start("127.0.0.1:0".parse().unwrap(), WsDialect::JsonRpc)
        .await
        .unwrap();
    let url = format!("nats://127.0.0.1:{port}");
    let Err(err) = gateway(&url, &daemon.url()).await else {
        panic!("no NATS, no gateway");
    };
    assert!(
        err.contains("persistence (nats)") && err.contains("NATS"),
        "{err}"
    );
}
