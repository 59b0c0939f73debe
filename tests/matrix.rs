//! The translation matrix: one scenario suite for every pairing of listener
//! dialect × upstream dialect. Adding a dialect is one entry in `LISTENERS`
//! or `UPSTREAMS` (plus its client in `common::clients`).
//!
//! Per pair: request/response with every id form the listener allows, an
//! upstream error, a notification, a batch (where the listener has them),
//! a timeout, server-initiated requests and notifications in per-client mode
//! (where the upstream can originate them), a per-client upstream link that
//! drops, and a shared upstream that dies mid-flight.

mod common;

use std::time::Duration;

use common::clients::{Ended, Speak, TestClient};
use common::json;
use serde_json::json;
use switchyard::daemon::ws::{WsDaemon, WsDialect};
use switchyard::daemon::{Daemon, DaemonOptions};

/// Upstream dialects under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Up {
    Ndjson,
    JsonRpc,
    Holon,
}

const UPSTREAMS: &[Up] = &[Up::Ndjson, Up::JsonRpc, Up::Holon];

/// A running reference upstream of either transport.
enum RefServer {
    Unix(Daemon),
    Ws(WsDaemon),
}

impl RefServer {
    async fn start(up: Up, dir: &std::path::Path) -> RefServer {
        let addr = "127.0.0.1:0".parse().expect("addr");
        match up {
            Up::Ndjson => RefServer::Unix(
                Daemon::start(&dir.join("up.sock"), DaemonOptions::default())
                    .await
                    .expect("daemon"),
            ),
            Up::JsonRpc => RefServer::Ws(
                WsDaemon::start(addr, WsDialect::JsonRpc)
                    .await
                    .expect("ws daemon"),
            ),
            Up::Holon => RefServer::Ws(
                WsDaemon::start(addr, WsDialect::Holon)
                    .await
                    .expect("holon daemon"),
            ),
        }
    }

    /// The TOML lines that point an upstream at this server.
    fn target(&self, up: Up) -> String {
        match (self, up) {
            (RefServer::Unix(d), _) => {
                format!("dialect = \"ndjson\"\nsocket = \"{}\"", d.path().display())
            }
            (RefServer::Ws(d), Up::Holon) => {
                format!("dialect = \"holon-rpc\"\nurl = \"{}\"", d.url())
            }
            (RefServer::Ws(d), _) => format!("dialect = \"jsonrpc-ws\"\nurl = \"{}\"", d.url()),
        }
    }

    async fn stop(self) {
        match self {
            RefServer::Unix(d) => d.stop().await,
            RefServer::Ws(d) => d.stop().await,
        }
    }
}

/// A gateway with two listeners of one dialect: `main` → a shared upstream,
/// `pc` → the same upstream in per-client mode.
struct Pair {
    speak: Speak,
    up: Up,
    _dir: tempfile::TempDir,
    server: Option<RefServer>,
    main: String,
    pc: String,
    gateway: switchyard::app::Running,
}

impl Pair {
    async fn start(speak: Speak, up: Up) -> Pair {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = RefServer::start(up, dir.path()).await;
        let listener = |name: &str| match speak {
            Speak::Ndjson => format!(
                "dialect = \"ndjson\"\nsocket = \"{}\"",
                dir.path().join(format!("{name}.sock")).display()
            ),
            Speak::JsonRpc => {
                format!("dialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/{name}\"")
            }
            Speak::Holon => {
                format!("dialect = \"holon-rpc\"\naddress = \"127.0.0.1:0\"\npath = \"/{name}\"")
            }
        };
        let target = server.target(up);
        let toml = format!(
            "[listeners.main]\n{}\nrequest_timeout_ms = 400\n\n[listeners.pc]\n{}\nrequest_timeout_ms = 3000\n\n\
             [upstreams.shared]\n{target}\nbackoff_initial_ms = 50\nbackoff_max_ms = 100\n\n\
             [upstreams.private]\n{target}\nmode = \"per-client\"\n\n\
             [[routes]]\nlistener = \"main\"\nupstream = \"shared\"\n\n[[routes]]\nlistener = \"pc\"\nupstream = \"private\"\n",
            listener("main"),
            listener("pc"),
        );
        let cfg =
            switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
        let bound = switchyard::app::bind(cfg).await.expect("bind");
        let endpoint = |name: &str| match speak {
            Speak::Ndjson => bound.unix_path(name).expect("socket").display().to_string(),
            _ => bound.ws_url(name).expect("url"),
        };
        let (main, pc) = (endpoint("main"), endpoint("pc"));
        let gateway = bound.spawn();
        common::wait_connected(&gateway, "shared").await;
        Pair {
            speak,
            up,
            _dir: dir,
            server: Some(server),
            main,
            pc,
            gateway,
        }
    }

    async fn client(&self, endpoint: &str) -> TestClient {
        TestClient::connect(self.speak, endpoint).await
    }

    fn name(&self) -> String {
        format!("{:?} listener × {:?} upstream", self.speak, self.up)
    }
}

/// A request text in the listener's dialect.
fn request(speak: Speak, id: &str, method: &str, params: &str) -> String {
    let _ = speak; // every JSON dialect uses the same request shape
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params},"id":{id}}}"#)
}

fn ids(speak: Speak) -> &'static [&'static str] {
    match speak {
        Speak::Holon => &[r#""1""#, r#""h-2""#, r#""\u0031""#, r#""a b""#],
        _ => &[
            "1",
            "1.0",
            "-0",
            "1e3",
            r#""a""#,
            r#""\u0031""#,
            "12345678901234567890",
            "null",
        ],
    }
}

fn codes(speak: Speak) -> (i64, i64) {
    // (timeout, unavailable)
    match speak {
        Speak::Holon => (4, 14),
        _ => (-32008, -32009),
    }
}

async fn run_pair(speak: Speak, up: Up) {
    let mut pair = Pair::start(speak, up).await;
    let name = pair.name();
    ids_round_trip(&pair, &name).await;
    errors_notifications_batches(&pair, &name).await;
    timeout(&pair, &name).await;
    if up != Up::Ndjson {
        server_initiated(&pair, &name).await;
        per_client_link_loss(&pair, &name).await;
    }
    upstream_death(&mut pair, &name).await;
    pair.gateway.shutdown().await;
}

async fn ids_round_trip(pair: &Pair, name: &str) {
    let mut c = pair.client(&pair.main).await;
    for (i, id) in ids(pair.speak).iter().enumerate() {
        c.send(&request(pair.speak, id, "echo", &format!(r#"{{"n":{i}}}"#)))
            .await;
        let reply = c.recv().await;
        assert!(
            reply.ends_with(&format!(r#""id":{id}}}"#)),
            "{name}: id {id} came back as {reply}"
        );
        assert_eq!(json(&reply)["result"], json!({"n": i}), "{name}: {reply}");
    }
}

async fn errors_notifications_batches(pair: &Pair, name: &str) {
    let mut c = pair.client(&pair.main).await;
    // An upstream error passes through unchanged between JSON dialects.
    c.send(&request(
        pair.speak,
        r#""e""#,
        "fail",
        r#"{"code":-32000,"message":"boom","data":{"k":1}}"#,
    ))
    .await;
    let v = json(&c.recv().await);
    assert_eq!(
        v["error"],
        json!({"code": -32000, "message": "boom", "data": {"k": 1}}),
        "{name}: {v}"
    );
    // An unknown method: the upstream's own error.
    c.send(&request(pair.speak, r#""u""#, "no.such", "{}"))
        .await;
    assert_eq!(json(&c.recv().await)["error"]["code"], -32601, "{name}");
    if pair.speak == Speak::Holon {
        // holon clients cannot send notifications or batches.
        return;
    }
    c.send(r#"{"jsonrpc":"2.0","method":"notify_hello","params":{"x":7}}"#)
        .await;
    c.send(&request(
        pair.speak,
        r#""after""#,
        "echo",
        r#"{"after":true}"#,
    ))
    .await;
    assert_eq!(
        json(&c.recv().await)["id"],
        "after",
        "{name}: the notification was answered"
    );
    c.send(r#"[{"jsonrpc":"2.0","method":"echo","params":{"a":1},"id":1},{"jsonrpc":"2.0","method":"notify_hello","params":{}},{"jsonrpc":"2.0","method":"echo","params":{"b":2},"id":2}]"#).await;
    let batch = json(&c.recv().await);
    let items = batch
        .as_array()
        .unwrap_or_else(|| panic!("{name}: not a batch: {batch}"));
    assert_eq!(items.len(), 2, "{name}: {batch}");
    assert!(
        items
            .iter()
            .any(|i| i["id"] == 1 && i["result"] == json!({"a": 1})),
        "{name}: {batch}"
    );
    assert!(
        items
            .iter()
            .any(|i| i["id"] == 2 && i["result"] == json!({"b": 2})),
        "{name}: {batch}"
    );
}

async fn timeout(pair: &Pair, name: &str) {
    let mut c = pair.client(&pair.main).await;
    c.send(&request(pair.speak, r#""t""#, "sleep", r#"{"ms":1500}"#))
        .await;
    let v = json(&c.recv().await);
    assert_eq!(v["error"]["code"], codes(pair.speak).0, "{name}: {v}");
    assert_eq!(v["id"], "t");
}

/// Reads the next message; if it is a request from switchyard, answers it
/// with `result` and returns it, else returns the message.
async fn answer_push(c: &mut TestClient, result: &str) -> serde_json::Value {
    let text = c.recv().await;
    let v = json(&text);
    if v.get("method").is_some() && v.get("id").is_some() {
        let id = v["id"].to_string();
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#
        ))
        .await;
    }
    v
}

async fn server_initiated(pair: &Pair, name: &str) {
    let mut c = pair.client(&pair.pc).await;
    c.send(&request(
        pair.speak,
        r#""cb""#,
        "callback",
        r#"{"method":"client.ask","params":{"q":1}}"#,
    ))
    .await;
    if pair.speak == Speak::Ndjson {
        // switchyard sends no requests to NDJSON clients: the upstream gets -32601.
        let v = json(&c.recv().await);
        assert_eq!(v["result"]["reply"]["error"]["code"], -32601, "{name}: {v}");
    } else {
        let ask = answer_push(&mut c, r#"{"a":2}"#).await;
        assert_eq!(ask["method"], "client.ask", "{name}: {ask}");
        assert_eq!(ask["params"], json!({"q": 1}), "{name}: {ask}");
        assert!(
            ask["id"].as_str().is_some_and(|id| id.starts_with('s')),
            "{name}: {ask}"
        );
        let v = json(&c.recv().await);
        assert_eq!(v["id"], "cb", "{name}: {v}");
        assert_eq!(v["result"], json!({"reply": {"a": 2}}), "{name}: {v}");
    }
    // A push: a notification for JSON clients of a JSON-RPC upstream; a
    // request for holon clients and from holon upstreams.
    c.send(&request(
        pair.speak,
        r#""p""#,
        "push",
        r#"{"method":"client.note","params":{"n":1}}"#,
    ))
    .await;
    let holon_involved = pair.speak == Speak::Holon || pair.up == Up::Holon;
    if !(pair.speak == Speak::Ndjson && pair.up == Up::Holon) {
        let note = answer_push(&mut c, "{}").await;
        assert_eq!(note["method"], "client.note", "{name}: {note}");
        assert_eq!(note["params"], json!({"n": 1}), "{name}: {note}");
        assert_eq!(note.get("id").is_some(), holon_involved, "{name}: {note}");
    }
    let v = json(&c.recv().await);
    assert_eq!(v["result"], json!({"pushed": true}), "{name}: {v}");
    // Each client has its own upstream connection.
    c.send(&request(pair.speak, r#""w""#, "whoami", "{}")).await;
    let first = json(&c.recv().await)["result"]["connection"].clone();
    let mut other = pair.client(&pair.pc).await;
    other
        .send(&request(pair.speak, r#""w""#, "whoami", "{}"))
        .await;
    let second = json(&other.recv().await)["result"]["connection"].clone();
    assert_ne!(first, second, "{name}: per-client mode shared a connection");
}

async fn per_client_link_loss(pair: &Pair, name: &str) {
    let mut c = pair.client(&pair.pc).await;
    c.send(&request(pair.speak, r#""slow""#, "sleep", r#"{"ms":5000}"#))
        .await;
    c.send(&request(pair.speak, r#""bye""#, "close_me", "{}"))
        .await;
    let mut unavailable = false;
    let ended = loop {
        match c.next().await {
            Ok(text) => {
                let v = json(&text);
                if v["id"] == "slow" {
                    assert_eq!(v["error"]["code"], codes(pair.speak).1, "{name}: {v}");
                    unavailable = true;
                }
            }
            Err(end) => break end,
        }
    };
    assert!(unavailable, "{name}: the in-flight call was not failed");
    let want = if pair.speak == Speak::Ndjson {
        Ended::Eof
    } else {
        Ended::Close(1001)
    };
    assert_eq!(ended, want, "{name}");
}

async fn upstream_death(pair: &mut Pair, name: &str) {
    let mut c = pair.client(&pair.main).await;
    c.send(&request(pair.speak, r#""d""#, "sleep", r#"{"ms":300}"#))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    if let Some(server) = pair.server.take() {
        server.stop().await;
    }
    let v = json(&c.recv().await);
    assert_eq!(v["error"]["code"], codes(pair.speak).1, "{name}: {v}");
}

async fn run_listener(speak: Speak) {
    let pairs = UPSTREAMS.iter().map(|up| run_pair(speak, *up));
    futures_util::future::join_all(pairs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonrpc_ws_listener_to_every_upstream() {
    run_listener(Speak::JsonRpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holon_listener_to_every_upstream() {
    run_listener(Speak::Holon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ndjson_listener_to_every_upstream() {
    run_listener(Speak::Ndjson).await;
}
