//! The harness of tests/pubsub.rs: a gateway in front of the reference
//! JSON-RPC WebSocket daemon (upstream `events`, the publisher), and one
//! case of the independent Node client `tests/node/pubsub_client.mjs`.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::daemon::ws::{WsDaemon, WsDialect};
use tokio::io::{AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::node::spawn_script;
use super::scrape::{scrape, value, wait_value};

/// How long one case may run (the script's own deadline is 100 s).
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a gauge may take to settle after a connection goes.
pub const SETTLE: Duration = Duration::from_secs(20);

pub const SUBSCRIPTIONS: &str = "switchyard_subscriptions";
pub const PUBLIC: (&str, &str) = ("listener", "public");

/// A gateway in front of the reference JSON-RPC WebSocket daemon.
pub struct PubSub {
    pub upstream: WsDaemon,
    pub gateway: Running,
    pub url: String,
    pub admin: SocketAddr,
}

impl PubSub {
    pub async fn start() -> PubSub {
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
# The wildcard cases reach past the upstream's own topics.
allow_topics = [">"]

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
        super::wait_connected(&gateway, "events").await;
        PubSub {
            upstream,
            gateway,
            url,
            admin,
        }
    }

    pub async fn stop(self) {
        self.gateway.shutdown().await;
        self.upstream.stop().await;
    }

    pub async fn subscriptions(&self) -> f64 {
        value(&scrape(self.admin).await, SUBSCRIPTIONS, &[PUBLIC])
    }

    /// Waits until the gauge reads `want`; returns what it read last.
    pub async fn settle(&self, want: f64) -> f64 {
        wait_value(self.admin, SUBSCRIPTIONS, &[PUBLIC], want, SETTLE).await
    }
}

/// One running case of the Node script.
pub struct Script {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl Script {
    pub async fn start(url: &str, case: &str) -> Script {
        let (child, stdin, stdout) = spawn_script("pubsub_client.mjs", &[url, case]).await;
        Script {
            child,
            stdin,
            stdout,
            seen: Vec::new(),
        }
    }

    pub async fn line(&mut self) -> Value {
        let line = tokio::time::timeout(SCRIPT_TIMEOUT, self.stdout.next_line())
            .await
            .unwrap_or_else(|_| panic!("the script was silent for {SCRIPT_TIMEOUT:?}"))
            .expect("read stdout")
            .unwrap_or_else(|| panic!("the script ended early; it printed {:?}", self.seen));
        self.seen.push(line.clone());
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Waits for checkpoint `name`. A summary instead fails the test with it.
    pub async fn checkpoint(&mut self, name: &str) {
        let line = self.line().await;
        assert_eq!(line, json!({ "checkpoint": name }), "{line:#}");
    }

    /// Lets the script go on after a checkpoint.
    pub async fn resume(&mut self) {
        self.stdin.write_all(b"go\n").await.expect("write stdin");
        self.stdin.flush().await.expect("flush stdin");
    }

    /// The summary; asserts the case ran to its end with a clean record.
    pub async fn summary(mut self) -> Value {
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
pub async fn run_case(case: &str) -> (PubSub, Value) {
    let stack = PubSub::start().await;
    let script = Script::start(&stack.url, case).await;
    let summary = script.summary().await;
    (stack, summary)
}

/// The topics a peer received, in order.
pub fn topics(summary: &Value, peer: &str) -> Vec<String> {
    summary["notes"][peer]
        .as_array()
        .unwrap_or_else(|| panic!("no notes for {peer}: {summary:#}"))
        .iter()
        .map(|n| n["topic"].as_str().expect("a string topic").to_owned())
        .collect()
}

pub fn ok_subscribed() -> Value {
    json!({"result": {"subscribed": true}})
}

pub fn ok_unsubscribed() -> Value {
    json!({"result": {"unsubscribed": true}})
}

/// Asserts a -32602 answer with a detail string in `data`.
pub fn assert_invalid_params(summary: &Value, label: &str) {
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

pub fn assert_resource_exhausted(summary: &Value, label: &str) {
    let reply = &summary["calls"][label];
    assert_eq!(reply["error"]["code"], -32007, "{label}: {reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{label}: {reply}"
    );
}

pub const MARKER: &str = "events.marker";
