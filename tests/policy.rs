//! Per-listener method policy (`allow_methods` / `deny_methods`): checked
//! before routing for every request, notification and batch item, in every
//! client dialect. A refused call is answered with switchyard's
//! `unauthorized` (error-codes.md §2: JSON-RPC -32001, holon-rpc 16,
//! Sideband 2000 with `data.kind`), with the detail "forbidden by policy",
//! and counted; a refused notification is dropped and counted. The
//! reference daemon records every line it reads (its tap): a refused call
//! never appears there.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;

use common::clients::{Speak, TestClient};
use common::{json, metric_value, STEP};
use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::config::Config;
use switchyard::daemon::tap::Tap;
use switchyard::daemon::{Daemon, DaemonOptions};

/// Allows four families, and denies two members of them (deny wins).
const POLICY: &str = r#"allow_methods = ["echo", "get_*", "sub*", "notify_*"]
deny_methods = ["subtract", "notify_sum"]"#;

const DIALECTS: [Speak; 6] = [
    Speak::JsonRpc,
    Speak::Holon,
    Speak::SidebandJson,
    Speak::SidebandCbor,
    Speak::Ndjson,
    Speak::Http,
];

/// A gateway with one listener per client dialect, all under the same
/// policy, in front of a tapped reference daemon.
struct Policed {
    _dir: tempfile::TempDir,
    daemon: Option<Daemon>,
    tap: Arc<Tap>,
    gateway: Running,
    endpoints: HashMap<&'static str, String>,
}

impl Policed {
    async fn start(policy: &str, upstream_extra: &str) -> Policed {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("daemon.sock");
        let tap = Arc::new(Tap::new());
        let daemon = Daemon::start_tapped(&socket, DaemonOptions::default(), tap.clone())
            .await
            .expect("daemon");
        let ws = |dialect: &str, path: &str| {
            format!(
                "dialect = \"{dialect}\"\naddress = \"127.0.0.1:0\"\npath = \"/{path}\"\n{policy}"
            )
        };
        let toml = format!(
            "[listeners.ws]\n{}\n\n[listeners.holon]\n{}\n\n[listeners.sb]\n{}\n\n\
             [listeners.http]\n{}\n\n[[routes]]\nlistener = \"http\"\nupstream = \"daemon\"\n\n\
             [listeners.nd]\ndialect = \"ndjson\"\nsocket = \"{}\"\n{policy}\n\n\
             [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n{upstream_extra}\n\n\
             [[routes]]\nlistener = \"ws\"\nupstream = \"daemon\"\n\n\
             [[routes]]\nlistener = \"holon\"\nupstream = \"daemon\"\n\n\
             [[routes]]\nlistener = \"sb\"\nupstream = \"daemon\"\n\n\
             [[routes]]\nlistener = \"nd\"\nupstream = \"daemon\"\n",
            ws("jsonrpc-ws", "ws"),
            ws("holon-rpc", "holon"),
            ws("sideband", "sb"),
            ws("jsonrpc-http", "http"),
            dir.path().join("nd.sock").display(),
            socket.display(),
        );
        let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let bound = switchyard::app::bind(cfg).await.expect("bind");
        let mut endpoints = HashMap::new();
        for name in ["ws", "holon", "sb", "http"] {
            endpoints.insert(name, bound.ws_url(name).expect("url"));
        }
        let nd = bound.unix_path("nd").expect("socket");
        endpoints.insert("nd", nd.display().to_string());
        let gateway = bound.spawn();
        common::wait_connected(&gateway, "daemon").await;
        Policed {
            _dir: dir,
            daemon: Some(daemon),
            tap,
            gateway,
            endpoints,
        }
    }

    async fn client(&self, speak: Speak) -> TestClient {
        TestClient::connect(speak, &self.endpoints[listener(speak)]).await
    }

    /// How many lines the daemon read that call `method`.
    fn upstream_saw(&self, method: &str) -> usize {
        let needle = format!("\"method\":\"{method}\"");
        self.tap
            .since(0)
            .iter()
            .filter(|l| l.dir == "in" && l.text.contains(&needle))
            .count()
    }

    fn forbidden(&self, listener: &str) -> f64 {
        metric_value(
            &self.gateway,
            "switchyard_requests_total",
            &[("listener", listener), ("outcome", "forbidden")],
        )
    }

    async fn stop(mut self) {
        self.gateway.shutdown().await;
        if let Some(d) = self.daemon.take() {
            d.stop().await;
        }
    }
}

fn listener(speak: Speak) -> &'static str {
    match speak {
        Speak::JsonRpc => "ws",
        Speak::Holon => "holon",
        Speak::Ndjson => "nd",
        Speak::SidebandJson | Speak::SidebandCbor => "sb",
        Speak::Http => "http",
    }
}

/// Sends one request and returns its reply, parsed.
async fn call(c: &mut TestClient, id: &str, method: &str, params: &str) -> Value {
    c.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"{method}","params":{params},"id":"{id}"}}"#
    ))
    .await;
    let reply = json(&c.recv().await);
    assert_eq!(reply["id"], json!(id), "{reply}");
    reply
}

/// Asserts that `reply` is switchyard's `unauthorized` as `speak` renders
/// it, with the policy detail.
fn assert_forbidden(speak: Speak, reply: &Value) {
    let e = &reply["error"];
    assert_eq!(e["message"], "Unauthorized", "{reply}");
    match speak {
        Speak::JsonRpc | Speak::Ndjson | Speak::Http => {
            assert_eq!(e["code"], -32001, "{reply}");
            assert_eq!(e["data"], "forbidden by policy", "{reply}");
        }
        Speak::Holon => {
            assert_eq!(e["code"], 16, "{reply}");
            assert_eq!(e["data"], "forbidden by policy", "{reply}");
        }
        Speak::SidebandJson | Speak::SidebandCbor => {
            assert_eq!(e["code"], 2000, "{reply}");
            assert_eq!(
                e["data"],
                json!({"kind": "unauthorized", "detail": "forbidden by policy"}),
                "{reply}"
            );
        }
    }
}

#[tokio::test]
async fn allow_list_and_deny_over_allow_in_every_client_dialect() {
    let gw = Policed::start(POLICY, "").await;
    for speak in DIALECTS {
        let mut c = gw.client(speak).await;
        // Allowed by name and by glob.
        let r = call(&mut c, "1", "echo", r#"{"x":1}"#).await;
        assert_eq!(r["result"], json!({"x": 1}), "{speak:?}: {r}");
        let r = call(&mut c, "2", "get_data", "{}").await;
        assert_eq!(r["result"], json!(["hello", 5]), "{speak:?}: {r}");
        // Not on the allow list.
        let r = call(&mut c, "3", "sum", r#"{"a":1}"#).await;
        assert_forbidden(speak, &r);
        // On the allow list (`sub*`) and on the deny list: deny wins.
        let r = call(&mut c, "4", "subtract", r#"{"minuend":5,"subtrahend":2}"#).await;
        assert_forbidden(speak, &r);
        // switchyard's own `rpc.*` namespace is not subject to the policy.
        let r = call(&mut c, "5", "rpc.nothing", "{}").await;
        let not_found = if speak.is_sideband() { 1101 } else { -32601 };
        assert_eq!(r["error"]["code"], not_found, "{speak:?}: {r}");
        if speak == Speak::Holon {
            let r = call(&mut c, "6", "rpc.heartbeat", "{}").await;
            assert_eq!(r["result"], json!({}), "{r}");
        }
        // Except the pub/sub methods: they expose the upstreams' events,
        // and this allow list does not name them.
        let r = call(&mut c, "7", "rpc.subscribe", r#"{"topic":"daemon.>"}"#).await;
        assert_forbidden(speak, &r);
        // And the persistent ones, for the same reason.
        let params = r#"{"subscription_id":"p","topic":"daemon.x"}"#;
        let r = call(&mut c, "8", "rpc.subscribe.persistent", params).await;
        assert_forbidden(speak, &r);
        let params = r#"{"subscription_id":"p","sequence_id":1}"#;
        let r = call(&mut c, "9", "rpc.acknowledge.persistent", params).await;
        assert_forbidden(speak, &r);
    }
    assert_eq!(gw.upstream_saw("echo"), DIALECTS.len());
    assert_eq!(gw.upstream_saw("get_data"), DIALECTS.len());
    assert_eq!(
        gw.upstream_saw("sum"),
        0,
        "a refused call reached the upstream"
    );
    assert_eq!(
        gw.upstream_saw("subtract"),
        0,
        "a refused call reached the upstream"
    );
    for (name, expected) in [
        ("ws", 5.0),
        ("holon", 5.0),
        ("sb", 10.0),
        ("nd", 5.0),
        ("http", 5.0),
    ] {
        assert_eq!(gw.forbidden(name), expected, "forbidden requests on {name}");
    }
    gw.stop().await;
}

#[tokio::test]
async fn refused_notifications_are_dropped_and_counted() {
    let gw = Policed::start(POLICY, "").await;
    // holon-rpc clients cannot send notifications.
    let speaks = [
        Speak::JsonRpc,
        Speak::SidebandJson,
        Speak::SidebandCbor,
        Speak::Ndjson,
        Speak::Http,
    ];
    for speak in speaks {
        let mut c = gw.client(speak).await;
        c.send(r#"{"jsonrpc":"2.0","method":"notify_sum","params":[1]}"#)
            .await;
        c.send(r#"{"jsonrpc":"2.0","method":"notify_hello","params":[1]}"#)
            .await;
        // A request after them: the notifications were handled first.
        let r = call(&mut c, "1", "echo", "[1]").await;
        assert_eq!(r["result"], json!([1]), "{speak:?}: {r}");
    }
    let all_forwarded =
        common::eventually(STEP, || gw.upstream_saw("notify_hello") == speaks.len()).await;
    assert!(all_forwarded, "allowed notifications reach the upstream");
    assert_eq!(
        gw.upstream_saw("notify_sum"),
        0,
        "a refused notification reached the upstream"
    );
    let dropped = metric_value(
        &gw.gateway,
        "switchyard_dropped_messages_total",
        &[("side", "client"), ("reason", "forbidden")],
    );
    assert_eq!(dropped, speaks.len() as f64);
    gw.stop().await;
}

/// One batch with allowed and refused requests and notifications: every
/// request answered in order, each refused one `unauthorized`; with and
/// without an upstream that takes the allowed items as one batch.
#[tokio::test]
async fn batch_items_are_checked_one_by_one() {
    let batch = concat!(
        r#"[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1},"#,
        r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":2},"#,
        r#"{"jsonrpc":"2.0","method":"notify_sum","params":[1]},"#,
        r#"{"jsonrpc":"2.0","method":"get_data","id":3},"#,
        r#"{"jsonrpc":"2.0","method":"subtract","params":[5,2],"id":4},"#,
        r#"{"jsonrpc":"2.0","method":"notify_hello","params":[1]}]"#
    );
    for upstream in [
        "accepts_batches = false",
        "accepts_batches = true\npool_size = 1",
    ] {
        let gw = Policed::start(POLICY, upstream).await;
        for speak in [Speak::JsonRpc, Speak::Ndjson, Speak::Http] {
            let mut c = gw.client(speak).await;
            c.send(batch).await;
            let replies = json(&c.recv().await);
            let replies = replies.as_array().expect("a batch reply");
            let ids: Vec<&Value> = replies.iter().map(|r| &r["id"]).collect();
            assert_eq!(
                ids,
                [&json!(1), &json!(2), &json!(3), &json!(4)],
                "{upstream}: {replies:?}"
            );
            assert_eq!(replies[0]["result"], json!([1]), "{upstream}");
            assert_forbidden(speak, &replies[1]);
            assert_eq!(replies[2]["result"], json!(["hello", 5]), "{upstream}");
            assert_forbidden(speak, &replies[3]);
        }
        let both = common::eventually(STEP, || gw.upstream_saw("notify_hello") == 3).await;
        assert!(
            both,
            "{upstream}: allowed batch notifications reach the upstream"
        );
        for method in ["sum", "subtract", "notify_sum"] {
            assert_eq!(
                gw.upstream_saw(method),
                0,
                "{upstream}: {method} reached the upstream"
            );
        }
        assert_eq!(gw.forbidden("ws") + gw.forbidden("nd"), 4.0, "{upstream}");
        gw.stop().await;
    }
}

/// With no allow list everything not denied is allowed; `*` matches any
/// run of characters, dots included.
#[tokio::test]
async fn deny_list_alone_refuses_only_what_it_matches() {
    let gw = Policed::start(r#"deny_methods = ["su*", "*.delete*"]"#, "").await;
    let mut c = gw.client(Speak::JsonRpc).await;
    let r = call(&mut c, "1", "echo", "[1]").await;
    assert_eq!(r["result"], json!([1]), "{r}");
    // An upstream error: the call reached the daemon.
    let r = call(&mut c, "2", "fail", "{}").await;
    assert!(r["error"]["code"] != -32001, "{r}");
    assert_forbidden(Speak::JsonRpc, &call(&mut c, "3", "sum", "[1]").await);
    assert_forbidden(
        Speak::JsonRpc,
        &call(&mut c, "4", "subtract", "[5,2]").await,
    );
    assert_forbidden(
        Speak::JsonRpc,
        &call(&mut c, "5", "thoughts.v2.delete_all", "{}").await,
    );
    // Not denied: the daemon answers that it does not know the method.
    let r = call(&mut c, "6", "thoughts.v2.list", "{}").await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert_eq!(gw.upstream_saw("fail"), 1);
    assert_eq!(gw.upstream_saw("thoughts.v2.list"), 1);
    for method in ["sum", "subtract", "thoughts.v2.delete_all"] {
        assert_eq!(gw.upstream_saw(method), 0, "{method} reached the upstream");
    }
    assert_eq!(gw.forbidden("ws"), 3.0);
    gw.stop().await;
}

const MINIMAL: &str = r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
max_in_flight = 0
allow_methods = ["health", "", "get?"]
deny_methods = ["x[0]", "ok*"]

[upstreams.daemon]
dialect = "ndjson"
socket = "/tmp/d.sock"

[[routes]]
listener = "public"
upstream = "daemon"
"#;

#[test]
fn invalid_patterns_are_listed_with_the_other_problems() {
    let problems = match Config::from_toml(MINIMAL) {
        Ok(_) => panic!("invalid patterns must be refused"),
        Err(e) => e.problems().to_vec(),
    };
    for needle in [
        "listeners.public.allow_methods[1]",
        "listeners.public.allow_methods[2]",
        "listeners.public.deny_methods[0]",
        "listeners.public.max_in_flight",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(needle)),
            "no problem mentions {needle}:\n{}",
            problems.join("\n")
        );
    }
    assert_eq!(problems.len(), 4, "{}", problems.join("\n"));

    // And the binary refuses it with exit code 64.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, MINIMAL).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("allow_methods[2]"), "{stderr}");
}

#[test]
fn example_browser_listener_allows_only_read_methods() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/switchyard.example.toml"
    );
    let text = std::fs::read_to_string(path).expect("example file");
    let config = Config::from_toml(&text).expect("example config is valid");
    let browser = config
        .listeners
        .iter()
        .find(|l| l.name == "web")
        .expect("a browser listener in the example");
    let policy = &browser.protection.methods;
    for read in [
        "health",
        "getConversation",
        "getSessionState",
        "fetchApprovals",
        "Subscribe",
    ] {
        assert!(policy.permits(read), "{read} must be allowed");
    }
    for other in [
        "launchSession",
        "sendDecision",
        "archiveSession",
        "listSessions",
        "getSessionLeaves",
    ] {
        assert!(!policy.permits(other), "{other} must be refused");
    }
    // Reading events, yes; creating or deleting durable subscriptions, no.
    for read in [
        "rpc.subscribe",
        "rpc.subscribe.batch",
        "rpc.unsubscribe",
        "rpc.unsubscribe.batch",
    ] {
        assert!(policy.permits(read), "{read} must be allowed");
    }
    for durable in switchyard::persist::methods::METHODS {
        assert!(!policy.permits(durable), "{durable} must be refused");
    }
}
