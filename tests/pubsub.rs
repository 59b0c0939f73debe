//! Topic pub/sub (jsonrpc-ws.md §7.1–7.2) through an independent client:
//! Node.js with the npm `json-rpc-2.0` package over `ws`
//! (`tests/node/pubsub_client.mjs`), one case of the script per test.
//!
//! The gateway (in process) has a JSON-RPC WebSocket listener `public`
//! routed to the reference JSON-RPC WebSocket daemon as upstream `events`
//! (shared mode, one pooled connection). The script publishes by calling
//! the daemon's `push {"method":M,"params":P}` through the gateway: the
//! daemon sends the notification M on switchyard's shared connection, which
//! switchyard publishes as topic `events.M`. Subscription counts are read
//! from the admin listener's `/metrics` (`switchyard_subscriptions{listener}`)
//! with the Prometheus text parser.
//!
//! The script only records what it saw; every expected value is asserted
//! here. Missing `node`/`npm` is a failure, not a skip.

mod common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use common::node::{ensure_node_modules, node_dir, require_tool};
use common::scrape::{scrape, value, wait_value};
use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::daemon::ws::{WsDaemon, WsDialect};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// How long one case may run (the script's own deadline is 100 s).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a gauge may take to settle after a connection goes.
const SETTLE: Duration = Duration::from_secs(20);

const SUBSCRIPTIONS: &str = "switchyard_subscriptions";
const PUBLIC: (&str, &str) = ("listener", "public");

/// A gateway in front of the reference JSON-RPC WebSocket daemon.
struct PubSub {
    upstream: WsDaemon,
    gateway: Running,
    url: String,
    admin: SocketAddr,
}

impl PubSub {
    async fn start() -> PubSub {
        let upstream = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::JsonRpc)
            .await
            .expect("json-rpc upstream");
        let toml = format!(
            r#"
[admin]
address = "127.0.0.1:0"

[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"

[upstreams.events]
dialect = "jsonrpc-ws"
url = "{}"
pool_size = 1

[[routes]]
listener = "public"
upstream = "events"
"#,
            upstream.url()
        );
        let cfg = switchyard::config::Config::from_toml(&toml)
            .unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let bound = switchyard::app::bind(cfg).await.expect("bind");
        let url = bound.ws_url("public").expect("listener url");
        let admin = bound.admin_addr().expect("admin listener");
        let gateway = bound.spawn();
        common::wait_connected(&gateway, "events").await;
        PubSub {
            upstream,
            gateway,
            url,
            admin,
        }
    }

    async fn stop(self) {
        self.gateway.shutdown().await;
        self.upstream.stop().await;
    }

    async fn subscriptions(&self) -> f64 {
        value(&scrape(self.admin).await, SUBSCRIPTIONS, &[PUBLIC])
    }

    /// Waits until the gauge reads `want`; returns what it read last.
    async fn settle(&self, want: f64) -> f64 {
        wait_value(self.admin, SUBSCRIPTIONS, &[PUBLIC], want, SETTLE).await
    }
}

/// One running case of the Node script.
struct Script {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl Script {
    async fn start(url: &str, case: &str) -> Script {
        require_tool("node");
        let dir = node_dir();
        tokio::task::spawn_blocking(move || ensure_node_modules(&dir))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let script = node_dir().join("pubsub_client.mjs");
        let mut child = tokio::process::Command::new("node")
            .arg(&script)
            .arg(url)
            .arg(case)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `node {}`: {e}", script.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        Script {
            child,
            stdin,
            stdout,
            seen: Vec::new(),
        }
    }

    async fn line(&mut self) -> Value {
        let line = tokio::time::timeout(SCRIPT_TIMEOUT, self.stdout.next_line())
            .await
            .unwrap_or_else(|_| panic!("the script was silent for {SCRIPT_TIMEOUT:?}"))
            .expect("read stdout")
            .unwrap_or_else(|| panic!("the script ended early; it printed {:?}", self.seen));
        self.seen.push(line.clone());
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Waits for checkpoint `name`. A summary instead fails the test with it.
    async fn checkpoint(&mut self, name: &str) {
        let line = self.line().await;
        assert_eq!(line, json!({ "checkpoint": name }), "{line:#}");
    }

    /// Lets the script go on after a checkpoint.
    async fn resume(&mut self) {
        self.stdin.write_all(b"go\n").await.expect("write stdin");
        self.stdin.flush().await.expect("flush stdin");
    }

    /// The summary; asserts the case ran to its end with a clean record.
    async fn summary(mut self) -> Value {
        let line = self.line().await;
        let summary = line
            .get("summary")
            .cloned()
            .unwrap_or_else(|| panic!("expected the summary, got {line:#}"));
        let status = tokio::time::timeout(SCRIPT_TIMEOUT, self.child.wait())
            .await
            .expect("the script exits")
            .expect("wait");
        println!("pubsub_client.mjs summary: {summary:#}");
        assert_eq!(summary["failures"], json!([]), "{summary:#}");
        assert_eq!(summary["unexpected"], json!([]), "{summary:#}");
        assert_eq!(summary["ok"], true, "{summary:#}");
        assert_eq!(status.code(), Some(0), "{summary:#}");
        // json-rpc-2.0 accepted every notification it was handed.
        for (peer, notes) in summary["notes"].as_object().expect("notes") {
            let n = notes.as_array().map_or(0, Vec::len);
            assert_eq!(summary["handled"][peer], n, "{peer}: {summary:#}");
        }
        summary
    }
}

/// Runs a case without checkpoints.
async fn run_case(case: &str) -> (PubSub, Value) {
    let stack = PubSub::start().await;
    let script = Script::start(&stack.url, case).await;
    let summary = script.summary().await;
    (stack, summary)
}

/// The topics a peer received, in order.
fn topics(summary: &Value, peer: &str) -> Vec<String> {
    summary["notes"][peer]
        .as_array()
        .unwrap_or_else(|| panic!("no notes for {peer}: {summary:#}"))
        .iter()
        .map(|n| n["topic"].as_str().expect("a string topic").to_owned())
        .collect()
}

fn ok_subscribed() -> Value {
    json!({"result": {"subscribed": true}})
}

fn ok_unsubscribed() -> Value {
    json!({"result": {"unsubscribed": true}})
}

/// Asserts a -32602 answer with a detail string in `data`.
fn assert_invalid_params(summary: &Value, label: &str) {
    let reply = &summary["calls"][label];
    assert_eq!(reply["error"]["code"], -32602, "{label}: {reply}");
    assert_eq!(
        reply["error"]["message"], "Invalid params",
        "{label}: {reply}"
    );
    assert!(
        reply["error"]["data"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "{label}: the detail goes in error.data as a string: {reply}"
    );
    assert!(reply.get("result").is_none(), "{label}: {reply}");
}

fn assert_resource_exhausted(summary: &Value, label: &str) {
    let reply = &summary["calls"][label];
    assert_eq!(reply["error"]["code"], -32007, "{label}: {reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{label}: {reply}"
    );
}

const MARKER: &str = "events.marker";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards_match_whole_tokens_and_gt_needs_a_token() {
    let (stack, s) = run_case("wildcards").await;
    for peer in ["star", "gt", "mid", "exact", "deep", "all"] {
        assert_eq!(
            s["calls"][format!("subscribe {peer}")],
            ok_subscribed(),
            "{peer}"
        );
    }
    let (created, eu, orders, users, ordersx) = (
        "events.orders.created",
        "events.orders.eu.created",
        "events.orders",
        "events.users.created",
        "events.ordersx.created",
    );
    // `*` is exactly one token.
    assert_eq!(topics(&s, "star"), [created, MARKER]);
    // `>` is one or more trailing tokens: `events.orders.>` does not match
    // `events.orders`.
    assert_eq!(topics(&s, "gt"), [created, eu, MARKER]);
    // `*` in the middle; `ordersx` is another token, not a prefix match.
    assert_eq!(topics(&s, "mid"), [created, users, ordersx, MARKER]);
    assert_eq!(topics(&s, "exact"), [orders, MARKER]);
    // `a.*.>`: at least two tokens after `events`.
    assert_eq!(topics(&s, "deep"), [created, eu, users, ordersx, MARKER]);
    assert_eq!(
        topics(&s, "all"),
        [created, eu, orders, users, ordersx, MARKER]
    );
    // The exact delivery shape, with the concrete topic and the data as
    // published, for a wildcard subscriber.
    let frame: Value =
        serde_json::from_str(s["frames"]["gt"][0].as_str().expect("a frame")).expect("JSON frame");
    assert_eq!(
        frame,
        json!({"jsonrpc": "2.0", "method": "rpc.notification", "params": {
            "topic": created,
            "data": {"i": 1, "text": "héllo ☃", "list": [1, 2.5, null, true]},
        }}),
    );
    let data: Vec<&Value> = s["notes"]["all"]
        .as_array()
        .expect("notes")
        .iter()
        .map(|n| &n["data"]["i"])
        .collect();
    assert_eq!(
        data[..5],
        [&json!(1), &json!(2), &json!(3), &json!(4), &json!(5)]
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_topics_and_params_get_invalid_params_with_a_detail() {
    let (stack, s) = run_case("invalid").await;
    for label in [
        "empty",
        "empty token",
        "leading dot",
        "trailing dot",
        "partial star",
        "partial star after",
        "partial gt",
        "gt not last",
        "gt first",
        "257 bytes",
        "258 UTF-8 bytes",
    ] {
        assert_invalid_params(&s, &format!("invalid {label}"));
    }
    for label in [
        "params number",
        "params missing topic",
        "params absent",
        "params array",
        "unsubscribe invalid",
        "batch topics string",
        "batch topic number",
        "batch missing topics",
        "unsubscribe batch invalid",
    ] {
        assert_invalid_params(&s, label);
    }
    for label in [
        "star then gt",
        "star",
        "gt",
        "plain",
        "256 bytes",
        "256 UTF-8 bytes",
    ] {
        assert_eq!(
            s["calls"][format!("valid {label}")],
            ok_subscribed(),
            "{label}"
        );
    }
    assert_eq!(s["calls"]["unsubscribe valid"], ok_unsubscribed());
    // Nothing was published, so nothing arrived.
    assert_eq!(topics(&s, "p"), Vec::<String>::new());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_twice_is_a_no_op_and_unsubscribe_is_idempotent() {
    let (stack, s) = run_case("idempotence").await;
    assert_eq!(s["calls"]["subscribe 1"], ok_subscribed());
    assert_eq!(s["calls"]["subscribe 2"], ok_subscribed());
    for label in [
        "unsubscribe 1",
        "unsubscribe 2",
        "unsubscribe never",
        "unsubscribe concrete",
        "unsubscribe wildcard",
    ] {
        assert_eq!(s["calls"][label], ok_unsubscribed(), "{label}");
    }
    assert_eq!(s["calls"]["subscribe wildcard"], ok_subscribed());
    // Subscribed twice: delivered once, and one unsubscribe ends it.
    // Unsubscribing `events.y.z` leaves the pattern `events.y.*` in place.
    assert_eq!(
        topics(&s, "a"),
        ["events.x", MARKER, MARKER, "events.y.z", MARKER, MARKER]
    );
    let notes = s["notes"]["a"].as_array().expect("notes");
    assert_eq!(notes[0]["data"], json!({"i": 1}));
    assert_eq!(notes[3]["data"], json!({"i": 3}));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_results_keep_request_order_and_batches_are_atomic() {
    let (stack, s) = run_case("batch").await;
    assert_eq!(
        s["calls"]["subscribe batch"],
        json!({"result": {"subscribed": ["events.b3", "events.b1", "events.b2.*", MARKER]}})
    );
    assert_eq!(
        s["calls"]["unsubscribe batch"],
        json!({"result": {"unsubscribed": ["events.b3", "events.b1"]}})
    );
    assert_invalid_params(&s, "subscribe batch invalid");
    assert_invalid_params(&s, "unsubscribe batch invalid");
    assert_eq!(
        topics(&s, "a"),
        [
            // Subscribed by the batch.
            "events.b1",
            "events.b2.x",
            "events.b3",
            MARKER,
            // b1 and b3 unsubscribed by the batch; b2.* kept.
            "events.b2.y",
            MARKER,
            // The failed subscribe batch added neither c1 nor c2; the failed
            // unsubscribe batch left b2.* in place.
            "events.b2.z",
            MARKER,
        ]
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reaches_a_connection_once_however_many_patterns_match() {
    let (stack, s) = run_case("once").await;
    for label in [
        "a events.o.created",
        "a events.o.*",
        "a events.*.created",
        "a events.>",
        "b events.o.created",
        "b events.>",
    ] {
        assert_eq!(s["calls"][label], ok_subscribed(), "{label}");
    }
    assert_eq!(topics(&s, "a"), ["events.o.created", MARKER]);
    assert_eq!(topics(&s, "b"), ["events.o.created", MARKER]);
    assert_eq!(s["notes"]["a"][0]["data"], json!({"once": true}));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_go_with_their_connection() {
    let stack = PubSub::start().await;
    assert_eq!(stack.subscriptions().await, 0.0);
    let mut script = Script::start(&stack.url, "cleanup").await;
    // a: k1 (twice: one subscription) and k2.*; b: k3, k4, k5.
    script.checkpoint("subscribed").await;
    assert_eq!(stack.subscriptions().await, 5.0);
    script.resume().await;
    // a closed with a close frame: its two go.
    script.checkpoint("a closed").await;
    assert_eq!(stack.settle(3.0).await, 3.0);
    script.resume().await;
    script.checkpoint("b unsubscribed").await;
    assert_eq!(stack.subscriptions().await, 2.0);
    script.resume().await;
    // b dropped without a close frame: the rest go.
    script.checkpoint("b gone").await;
    assert_eq!(stack.settle(0.0).await, 0.0);
    script.resume().await;
    let s = script.summary().await;
    assert_eq!(s["calls"]["a k1"], ok_subscribed());
    assert_eq!(s["calls"]["a k1 again"], ok_subscribed());
    assert_eq!(s["calls"]["a k2"], ok_subscribed());
    assert_eq!(
        s["calls"]["b batch"],
        json!({"result": {"subscribed": ["events.k3", "events.k4", "events.k5"]}})
    );
    assert_eq!(s["calls"]["b unsubscribe"], ok_unsubscribed());
    assert_eq!(s["closes"]["a"]["code"], 1000, "{s:#}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_holds_at_most_1000_subscriptions() {
    let stack = PubSub::start().await;
    let mut script = Script::start(&stack.url, "cap").await;
    script.checkpoint("full").await;
    assert_eq!(stack.subscriptions().await, 1000.0);
    script.resume().await;
    let s = script.summary().await;
    assert_eq!(
        s["calls"]["batch 998"],
        json!({"count": 998, "in_order": true, "error": null})
    );
    // 998 + 3 > 1,000: refused whole, nothing subscribed.
    assert_resource_exhausted(&s, "batch over cap");
    assert_eq!(
        s["calls"]["batch to cap"],
        json!({"result": {"subscribed": ["events.cap.998", MARKER]}})
    );
    assert_resource_exhausted(&s, "one past cap");
    // An existing pattern is still a no-op at the cap.
    assert_eq!(s["calls"]["existing at cap"], ok_subscribed());
    assert_eq!(s["calls"]["unsubscribe one"], ok_unsubscribed());
    assert_eq!(s["calls"]["room again"], ok_subscribed());
    // cap.999 (only in the refused batch) and cap.1001 (refused at the
    // cap) were not delivered; cap.998 was; cap.1001 after making room was.
    assert_eq!(
        topics(&s, "a"),
        ["events.cap.998", MARKER, "events.cap.1001", MARKER]
    );
    // The script's connections are gone: so are their subscriptions.
    assert_eq!(stack.settle(0.0).await, 0.0);
    stack.stop().await;
}
