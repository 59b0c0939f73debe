//! The harness of tests/persist.rs: a gateway with persistent topics in
//! front of the reference JSON-RPC WebSocket daemon (upstream `events`,
//! the publisher: `push {"method":M,"params":P}` makes it send the
//! notification M, which switchyard publishes as topic `events.M`), and
//! the independent Node client `tests/node/persist_client.mjs`, driven one
//! command at a time.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::daemon::ws::{WsDaemon, WsDialect};
use tokio::io::{AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::node::spawn_script;

/// How long one command may take (the script's own timeouts are 20 s).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The persistent topics every test gets (besides `extra`).
pub const TOPICS: &str = r#"
[[persistent_topics]]
topic = "events.orders"

[[persistent_topics]]
topic = "events.p.*"

[[persistent_topics]]
topic = "events.short"
ack_timeout_ms = 300

[[persistent_topics]]
topic = "events.count"
max_count = 3

[[persistent_topics]]
topic = "events.bytes"
max_bytes = 40

[[persistent_topics]]
topic = "events.age"
max_age_seconds = 1
"#;

/// A gateway with persistent topics in front of the JSON-RPC daemon.
pub struct Persist {
    pub upstream: WsDaemon,
    pub gateway: Running,
    pub url: String,
    pub admin: SocketAddr,
    /// Other listeners' addresses by name (`listeners` argument).
    pub urls: std::collections::BTreeMap<String, String>,
    pub dir: tempfile::TempDir,
}

impl Persist {
    pub async fn start() -> Persist {
        Persist::start_with("", "").await
    }

    /// `listeners` are more `[listeners.*]` tables (each routed to
    /// `events`), `extra` more top-level TOML.
    pub async fn start_with(listeners: &str, extra: &str) -> Persist {
        let upstream = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::JsonRpc)
            .await
            .expect("json-rpc upstream");
        let dir = tempfile::tempdir().expect("tempdir");
        let listeners = listeners.replace("{dir}", &dir.path().display().to_string());
        let mut routes = String::new();
        for name in listener_names(&listeners) {
            routes.push_str(&format!(
                "[[routes]]\nlistener = \"{name}\"\nupstream = \"events\"\n\n"
            ));
        }
        let toml = format!(
            r#"
[admin]
address = "127.0.0.1:0"

[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"

{listeners}

[upstreams.events]
dialect = "jsonrpc-ws"
url = "{}"
pool_size = 1

[[routes]]
listener = "public"
upstream = "events"

{routes}
{TOPICS}
{extra}
"#,
            upstream.url()
        );
        let cfg = switchyard::config::Config::from_toml(&toml)
            .unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let bound = switchyard::app::bind(cfg).await.expect("bind");
        let url = bound.ws_url("public").expect("listener url");
        let admin = bound.admin_addr().expect("admin listener");
        let mut urls = std::collections::BTreeMap::new();
        for name in listener_names(&listeners) {
            let u = bound
                .ws_url(&name)
                .or_else(|| bound.unix_path(&name).map(|p| p.display().to_string()))
                .expect("listener address");
            urls.insert(name, u);
        }
        let gateway = bound.spawn();
        super::wait_connected(&gateway, "events").await;
        Persist {
            upstream,
            gateway,
            url,
            admin,
            urls,
            dir,
        }
    }

    pub async fn stop(self) {
        self.gateway.shutdown().await;
        self.upstream.stop().await;
    }

    /// Waits until `n` persistent subscriptions are attached (a closed
    /// connection's are detached once the gateway has seen it go; until
    /// then its ids are still held: -32005 for another connection).
    pub async fn attached(&self, n: u64) {
        let got = super::scrape::wait_value(
            self.admin,
            "switchyard_persistent_subscriptions_attached",
            &[("backend", "memory")],
            n as f64,
            SETTLE,
        )
        .await;
        assert_eq!(got, n as f64, "attached persistent subscriptions");
    }
}

/// A failure guard for gauges to settle.
pub const SETTLE: Duration = Duration::from_secs(20);

fn listener_names(toml: &str) -> Vec<String> {
    toml.lines()
        .filter_map(|l| l.trim().strip_prefix("[listeners."))
        .filter_map(|l| l.strip_suffix(']'))
        .map(str::to_owned)
        .collect()
}

/// The Node client, one command at a time.
pub struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Client {
    pub async fn start(url: &str) -> Client {
        let (child, stdin, stdout) = spawn_script("persist_client.mjs", &[url]).await;
        Client {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one command; returns its answer (an `error` answer fails).
    pub async fn command(&mut self, cmd: Value) -> Value {
        let line = format!("{cmd}\n");
        self.stdin.write_all(line.as_bytes()).await.expect("write");
        self.stdin.flush().await.expect("flush");
        let answer = tokio::time::timeout(COMMAND_TIMEOUT, self.stdout.next_line())
            .await
            .unwrap_or_else(|_| panic!("no answer to {cmd} within {COMMAND_TIMEOUT:?}"))
            .expect("read stdout")
            .unwrap_or_else(|| panic!("the script ended (command {cmd})"));
        let answer: Value =
            serde_json::from_str(&answer).unwrap_or_else(|e| panic!("not JSON ({e}): {answer}"));
        assert!(answer.get("error").is_none(), "{cmd}: {answer:#}");
        answer
    }

    pub async fn open(&mut self, peer: &str) {
        self.command(json!({"op": "open", "peer": peer})).await;
    }

    /// The whole response minus `jsonrpc` and `id`.
    pub async fn call(&mut self, peer: &str, method: &str, params: Value) -> Value {
        let answer = self
            .command(json!({"op": "call", "peer": peer, "method": method, "params": params}))
            .await;
        answer["reply"].clone()
    }

    /// The `result` of a call that must succeed.
    pub async fn ok(&mut self, peer: &str, method: &str, params: Value) -> Value {
        let reply = self.call(peer, method, params.clone()).await;
        assert!(reply.get("error").is_none(), "{method} {params}: {reply:#}");
        reply["result"].clone()
    }

    /// Publishes `data` under `events.<method>` through the daemon.
    pub async fn publish(&mut self, peer: &str, method: &str, data: Value) {
        let reply = self
            .call(peer, "push", json!({"method": method, "params": data}))
            .await;
        assert_eq!(reply, json!({"result": {"pushed": true}}), "push {method}");
    }

    /// Every persistent notification `peer` received, once it has `count`.
    pub async fn notes(&mut self, peer: &str, count: usize) -> Vec<Value> {
        let answer = self
            .command(json!({"op": "notes", "peer": peer, "count": count}))
            .await;
        answer["notes"].as_array().expect("notes").clone()
    }

    /// The raw notification frames `peer` received, once it has `count`.
    pub async fn frames(&mut self, peer: &str, count: usize) -> Vec<String> {
        let answer = self
            .command(json!({"op": "notes", "peer": peer, "count": count}))
            .await;
        answer["frames"]
            .as_array()
            .expect("frames")
            .iter()
            .map(|f| f.as_str().expect("text").to_owned())
            .collect()
    }

    pub async fn close(&mut self, peer: &str) {
        self.command(json!({"op": "close", "peer": peer})).await;
    }

    pub async fn exit(mut self) {
        let _ = self.stdin.write_all(b"{\"op\":\"exit\"}\n").await;
        let _ = tokio::time::timeout(COMMAND_TIMEOUT, self.child.wait()).await;
    }
}

pub fn subscribe(id: &str, topic: &str) -> Value {
    json!({"subscription_id": id, "topic": topic})
}

pub fn ack(id: &str, seq: u64) -> Value {
    json!({"subscription_id": id, "sequence_id": seq})
}

/// The `sequence_id`s of `notes`.
pub fn seqs(notes: &[Value]) -> Vec<u64> {
    notes
        .iter()
        .map(|n| n["sequence_id"].as_u64().expect("sequence_id"))
        .collect()
}

/// Asserts an error reply with `code` and a detail string.
pub fn assert_error(reply: &Value, code: i64, what: &str) {
    assert_eq!(reply["error"]["code"], code, "{what}: {reply}");
    assert!(
        reply["error"]["data"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "{what}: the detail goes in error.data: {reply}"
    );
    assert!(reply.get("result").is_none(), "{what}: {reply}");
}
