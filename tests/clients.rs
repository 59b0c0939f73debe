//! Named clients (`[[listeners.<name>.clients]]`): several credentials on
//! one listener, each naming an identity with its own method and topic
//! policy and rate, in every dialect that carries a credential (the
//! WebSocket ones and `jsonrpc-http`, its `POST`s and its event streams;
//! an NDJSON listener has no clients: its socket's file mode is the
//! boundary); the listener's `auth_token` stays its unnamed client.
//! Configuration problems (duplicate credentials, no token source) and
//! secrets kept out of `switchyard check`.
//!
//! The reference daemon records every line it reads (its tap): a refused
//! call never reaches it.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;

use common::clients::{Speak, TestClient};
use common::curl::curl;
use common::{json, STEP};
use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::config::Config;
use switchyard::daemon::tap::Tap;
use switchyard::daemon::{Daemon, DaemonOptions};

/// Every dialect with clients: the WebSocket ones and `jsonrpc-http`.
const DIALECTS: [Speak; 5] = [
    Speak::JsonRpc,
    Speak::Holon,
    Speak::SidebandJson,
    Speak::SidebandCbor,
    Speak::Http,
];

/// The burst of client `metered` (1 message a second): what all of its
/// connections together may send at once.
const METERED_BURST: usize = 5;

/// The listener's own token (its unnamed client, under the listener's
/// policy: `sum` denied), a reader (echo and get_* only, topic
/// `daemon.events` only) and an operator (everything but echo), its token
/// read from a file. Topics default to those of the routed upstream
/// (`daemon.>`).
fn clients(token_file: &str) -> String {
    format!(
        r#"auth_token = "listener-token"
deny_methods = ["sum"]

[[listeners.{{name}}.clients]]
name = "reader"
token = "reader-token"
allow_methods = ["echo", "get_*", "rpc.subscribe", "rpc.subscribe.batch"]
allow_topics = ["daemon.events"]

[[listeners.{{name}}.clients]]
name = "operator"
token_file = "{token_file}"
deny_methods = ["echo"]

[[listeners.{{name}}.clients]]
name = "single"
token = "single-token"
max_connections = 1

[[listeners.{{name}}.clients]]
name = "metered"
token = "metered-token"
rate_per_second = 1
rate_burst = {METERED_BURST}
"#
    )
}

struct Gateway {
    _dir: tempfile::TempDir,
    daemon: Option<Daemon>,
    tap: Arc<Tap>,
    gateway: Running,
    urls: HashMap<&'static str, String>,
}

impl Gateway {
    async fn start() -> Gateway {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("daemon.sock");
        let token_file = dir.path().join("operator.token");
        // A trailing newline, as editors write it: trimmed.
        std::fs::write(&token_file, "operator-token\n").expect("token file");
        let tap = Arc::new(Tap::new());
        let daemon = Daemon::start_tapped(&socket, DaemonOptions::default(), tap.clone())
            .await
            .expect("daemon");
        let mut toml = String::new();
        for (name, dialect) in [
            ("ws", "jsonrpc-ws"),
            ("holon", "holon-rpc"),
            ("sb", "sideband"),
            ("web", "jsonrpc-http"),
        ] {
            let extra = clients(&token_file.display().to_string())
                .replace("{name}", name)
                .replace("{METERED_BURST}", &METERED_BURST.to_string());
            toml.push_str(&format!(
                "[listeners.{name}]\ndialect = \"{dialect}\"\naddress = \"127.0.0.1:0\"\npath = \"/{name}\"\n{extra}\n\n"
            ));
        }
        toml.push_str(&format!(
            "[upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\naccepts_batches = true\n\n",
            socket.display()
        ));
        for name in ["ws", "holon", "sb", "web"] {
            toml.push_str(&format!(
                "[[routes]]\nlistener = \"{name}\"\nupstream = \"daemon\"\n\n"
            ));
        }
        let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let bound = switchyard::app::bind(cfg).await.expect("bind");
        let mut urls = HashMap::new();
        for name in ["ws", "holon", "sb", "web"] {
            urls.insert(name, bound.ws_url(name).expect("url"));
        }
        let gateway = bound.spawn();
        common::wait_connected(&gateway, "daemon").await;
        Gateway {
            _dir: dir,
            daemon: Some(daemon),
            tap,
            gateway,
            urls,
        }
    }

    fn url(&self, speak: Speak, token: &str) -> String {
        let name = match speak {
            Speak::JsonRpc => "ws",
            Speak::Holon => "holon",
            Speak::Http => "web",
            _ => "sb",
        };
        format!("{}?token={token}", self.urls[name])
    }

    async fn client(&self, speak: Speak, token: &str) -> TestClient {
        TestClient::connect(speak, &self.url(speak, token)).await
    }

    /// Opens `GET /web/events` for `topics` with `token`: the status, and
    /// the body of a refusal (a `200` stream is closed at once).
    async fn event_stream(&self, topics: &[&str], token: &str) -> (u16, String) {
        use http_body_util::BodyExt;
        let base = self.urls["web"].replacen("ws://", "http://", 1);
        let mut url = format!("{base}/events?token={token}");
        for t in topics {
            url.push_str(&format!("&topic={}", t.replace('>', "%3E")));
        }
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Empty<bytes::Bytes>>();
        let uri: hyper::Uri = url.parse().expect("uri");
        let response = tokio::time::timeout(STEP, client.get(uri))
            .await
            .expect("an answer in time")
            .expect("an answer");
        let status = response.status().as_u16();
        if status == 200 {
            return (status, String::new());
        }
        let body = tokio::time::timeout(STEP, response.into_body().collect())
            .await
            .expect("the body in time")
            .expect("the body")
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn upstream_saw(&self, method: &str, marker: &str) -> bool {
        self.tap.since(0).iter().any(|l| {
            l.dir == "in"
                && l.text.contains(&format!("\"method\":\"{method}\""))
                && l.text.contains(marker)
        })
    }

    async fn stop(mut self) {
        self.gateway.shutdown().await;
        if let Some(d) = self.daemon.take() {
            d.stop().await;
        }
    }
}

async fn call(c: &mut TestClient, id: &str, method: &str, params: &str) -> Value {
    c.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"{method}","params":{params},"id":"{id}"}}"#
    ))
    .await;
    let reply = json(&c.recv().await);
    assert_eq!(reply["id"], json!(id), "{reply}");
    reply
}

fn forbidden(speak: Speak, reply: &Value) -> bool {
    dialect_error(
        speak,
        reply,
        (-32001, 16, "unauthorized"),
        "forbidden by policy",
    )
}

/// Whether `reply` is the error of `kind` with `detail` as `speak` writes
/// it: the JSON-RPC code, the holon-rpc code, the Sideband kind
/// (error-codes.md).
fn dialect_error(speak: Speak, reply: &Value, codes: (i64, i64, &str), detail: &str) -> bool {
    let (jsonrpc, holon, kind) = codes;
    let e = &reply["error"];
    match speak {
        Speak::JsonRpc | Speak::Ndjson | Speak::Http => e["code"] == jsonrpc && e["data"] == detail,
        Speak::Holon => e["code"] == holon && e["data"] == detail,
        Speak::SidebandJson | Speak::SidebandCbor => {
            e["code"] == 2000 && e["data"] == json!({"kind": kind, "detail": detail})
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_credential_gets_its_own_method_policy_in_every_dialect() {
    let gw = Gateway::start().await;
    for speak in DIALECTS {
        // (token, may echo, may sum)
        for (token, echo, sum) in [
            ("reader-token", true, false),
            ("operator-token", false, true),
            ("listener-token", true, false),
        ] {
            let mut c = gw.client(speak, token).await;
            let marker = format!("{speak:?}-{token}");
            let r = call(&mut c, "1", "echo", &format!(r#"{{"m":"{marker}"}}"#)).await;
            assert_eq!(!forbidden(speak, &r), echo, "{speak:?} {token} echo: {r}");
            if echo {
                assert_eq!(r["result"], json!({"m": marker}), "{speak:?} {token}: {r}");
            }
            let r = call(&mut c, "2", "sum", &format!(r#"{{"a":1,"m":"{marker}"}}"#)).await;
            assert_eq!(!forbidden(speak, &r), sum, "{speak:?} {token} sum: {r}");
            assert_eq!(gw.upstream_saw("sum", &marker), sum, "{speak:?} {token}");
            assert_eq!(gw.upstream_saw("echo", &marker), echo, "{speak:?} {token}");
        }
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_credential_gets_its_own_topic_policy_in_every_dialect() {
    let gw = Gateway::start().await;
    // (token, pattern, admitted)
    let cases = [
        ("reader-token", "daemon.events", true),
        ("reader-token", "daemon.>", false),
        ("reader-token", "daemon.*", false),
        ("reader-token", ">", false),
        ("operator-token", "daemon.>", true),
        ("operator-token", "daemon.events", true),
        ("operator-token", ">", false),
        ("operator-token", "priv.secret", false),
        ("operator-token", "*.secret", false),
        ("listener-token", "daemon.*", true),
        ("listener-token", ">", false),
    ];
    for speak in DIALECTS {
        for (i, (token, pattern, admitted)) in cases.iter().enumerate() {
            let mut c = gw.client(speak, token).await;
            let params = format!(r#"{{"topic":"{pattern}"}}"#);
            let r = call(&mut c, &format!("{i}"), "rpc.subscribe", &params).await;
            if *admitted {
                assert_eq!(
                    r["result"],
                    json!({"subscribed": true}),
                    "{speak:?} {token} {pattern}: {r}"
                );
            } else {
                assert!(forbidden(speak, &r), "{speak:?} {token} {pattern}: {r}");
            }
        }
        // A batch with one refused pattern subscribes none of them.
        let mut c = gw.client(speak, "reader-token").await;
        let r = call(
            &mut c,
            "b",
            "rpc.subscribe.batch",
            r#"{"topics":["daemon.events","daemon.other"]}"#,
        )
        .await;
        assert!(forbidden(speak, &r), "{speak:?} batch: {r}");
    }
    // The same policies on the HTTP listener's event streams: a refused
    // pattern is the subscribe's error in a `400`.
    for (token, pattern, admitted) in cases {
        let (status, body) = gw.event_stream(&[pattern], token).await;
        if admitted {
            assert_eq!(status, 200, "events {token} {pattern}: {body}");
        } else {
            assert_eq!(status, 400, "events {token} {pattern}: {body}");
            assert!(
                forbidden(Speak::Http, &json(&body)),
                "events {token} {pattern}: {body}"
            );
        }
    }
    let (status, body) = gw
        .event_stream(&["daemon.events", "daemon.other"], "reader-token")
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(forbidden(Speak::Http, &json(&body)), "{body}");
    gw.stop().await;
}

/// Whether `reply` is the dialect's `rate_limited` error for a named
/// client's own rate.
fn rate_limited(speak: Speak, reply: &Value) -> bool {
    dialect_error(speak, reply, (-32006, 8, "rate_limited"), "rate_client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_rate_is_one_bucket_for_all_its_connections_in_every_dialect() {
    let gw = Gateway::start().await;
    // One listener per dialect, so one bucket each (both Sideband
    // encodings share the `sb` listener: JSON stands for both).
    for speak in [Speak::JsonRpc, Speak::Holon, Speak::SidebandJson] {
        // The first connection takes the whole burst.
        let mut first = gw.client(speak, "metered-token").await;
        for i in 0..METERED_BURST {
            let r = call(&mut first, &format!("a{i}"), "get_data", "{}").await;
            assert_eq!(r["result"], json!(["hello", 5]), "{speak:?} {i}: {r}");
        }
        // A second connection of the same client has no bucket of its
        // own: it is refused within what would be its own burst (1 message
        // a second comes back: only a machine taking seconds per call
        // could see all of them pass).
        let mut second = gw.client(speak, "metered-token").await;
        let mut refused = None;
        for i in 0..METERED_BURST {
            let r = call(&mut second, &format!("b{i}"), "get_data", "{}").await;
            if rate_limited(speak, &r) {
                refused = Some(i);
                break;
            }
            assert_eq!(r["result"], json!(["hello", 5]), "{speak:?} {i}: {r}");
        }
        assert!(
            refused.is_some(),
            "{speak:?}: the second connection got a burst of its own"
        );
        // Other clients are not charged to it (the listener has no rate).
        let mut reader = gw.client(speak, "reader-token").await;
        for i in 0..2 * METERED_BURST {
            let r = call(&mut reader, &format!("r{i}"), "get_data", "{}").await;
            assert_eq!(
                r["result"],
                json!(["hello", 5]),
                "{speak:?} reader {i}: {r}"
            );
        }
    }
    assert!(
        common::metric_value(
            &gw.gateway,
            "switchyard_limit_rejections_total",
            &[("listener", "ws"), ("limit", "clients.rate_per_second")],
        ) >= 1.0
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_rate_counts_its_http_requests_together_429_with_retry_after() {
    let gw = Gateway::start().await;
    let url = gw
        .url(Speak::Http, "metered-token")
        .replacen("ws://", "http://", 1);
    let post = |id: usize| {
        let url = url.clone();
        async move {
            let body = format!(r#"{{"jsonrpc":"2.0","method":"get_data","id":{id}}}"#);
            curl(&[
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &body,
                &url,
            ])
            .await
        }
    };
    // Each POST is a session of its own: the client's bucket is what
    // they share.
    for i in 0..METERED_BURST {
        let a = post(i).await;
        assert_eq!(a.status, 200, "{i}: {a:?}");
    }
    let mut limited = None;
    for i in 0..METERED_BURST {
        let a = post(100 + i).await;
        if a.status == 429 {
            limited = Some(a);
            break;
        }
        assert_eq!(a.status, 200, "{i}: {a:?}");
    }
    let a = limited.expect("a 429 within what would be a burst of its own");
    assert_eq!(a.header("retry-after"), Some("1"), "{a:?}");
    assert!(rate_limited(Speak::Http, &json(&a.body)), "{a:?}");
    // The reader is not charged to the metered client's bucket.
    let reader = gw
        .url(Speak::Http, "reader-token")
        .replacen("ws://", "http://", 1);
    let body = r#"{"jsonrpc":"2.0","method":"get_data","id":1}"#;
    let a = curl(&[
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        body,
        &reader,
    ])
    .await;
    assert_eq!(a.status, 200, "{a:?}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_item_follows_its_clients_policy() {
    let gw = Gateway::start().await;
    let mut c = gw.client(Speak::JsonRpc, "operator-token").await;
    c.send(
        r#"[{"jsonrpc":"2.0","method":"echo","params":{"m":"batched-echo"},"id":1},
            {"jsonrpc":"2.0","method":"get_data","params":{},"id":2}]"#,
    )
    .await;
    let replies = json(&c.recv().await);
    let by_id = |id: i64| {
        replies
            .as_array()
            .and_then(|a| a.iter().find(|r| r["id"] == json!(id)))
            .cloned()
            .unwrap_or_else(|| panic!("no reply {id}: {replies}"))
    };
    assert!(forbidden(Speak::JsonRpc, &by_id(1)), "{replies}");
    assert_eq!(by_id(2)["result"], json!(["hello", 5]), "{replies}");
    assert!(!gw.upstream_saw("echo", "batched-echo"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_or_missing_token_is_refused_before_the_upgrade() {
    let gw = Gateway::start().await;
    for url in [
        gw.urls["ws"].clone(),
        gw.url(Speak::JsonRpc, "reader-toke"),
        gw.url(Speak::JsonRpc, "operator-token%0A"),
    ] {
        let refused = tokio::time::timeout(STEP, tokio_tungstenite::connect_async(&url))
            .await
            .expect("an answer");
        match refused {
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 401, "{url}");
            }
            other => panic!("{url}: expected 401, got {other:?}"),
        }
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_its_own_cap_gets_that_many_connections() {
    let gw = Gateway::start().await;
    let mut first = gw.client(Speak::JsonRpc, "single-token").await;
    let r = call(&mut first, "1", "get_data", "{}").await;
    assert_eq!(r["result"], json!(["hello", 5]), "{r}");
    // Upgraded, then closed with the reason a browser can read.
    let mut second = common::connect(&gw.url(Speak::JsonRpc, "single-token")).await;
    let (code, reason) = common::expect_close(&mut second).await;
    assert_eq!((code, reason.as_str()), (1008, "max connections exceeded"));
    // Other clients are not affected.
    let mut reader = gw.client(Speak::JsonRpc, "reader-token").await;
    let r = call(&mut reader, "1", "get_data", "{}").await;
    assert_eq!(r["result"], json!(["hello", 5]), "{r}");
    // Its place is free once the gateway has seen the first go.
    drop(first);
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let mut ws = common::connect(&gw.url(Speak::JsonRpc, "single-token")).await;
        common::send(&mut ws, r#"{"jsonrpc":"2.0","method":"get_data","id":1}"#).await;
        match tokio::time::timeout(STEP, futures_util::StreamExt::next(&mut ws)).await {
            Ok(Some(Ok(tokio_tungstenite::tungstenite::Message::Text(t)))) => {
                assert_eq!(json(&t)["result"], json!(["hello", 5]), "{t}");
                break;
            }
            // Still counted: refused again; try once more.
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "the first connection's place was never freed: {other:?}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    gw.stop().await;
}

const BASE: &str = r#"
[listeners.ws]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
auth_token = "same"

[upstreams.daemon]
dialect = "ndjson"
socket = "/tmp/none.sock"

[[routes]]
listener = "ws"
upstream = "daemon"
"#;

fn problems(extra: &str) -> String {
    let toml = BASE.replace(
        "auth_token = \"same\"\n",
        &format!("auth_token = \"same\"\n{extra}\n"),
    );
    match Config::from_toml(&toml) {
        Ok(_) => panic!("accepted:\n{toml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn duplicate_credentials_and_bad_clients_are_configuration_problems() {
    let dup_listener = problems("[[listeners.ws.clients]]\nname = \"a\"\ntoken = \"same\"");
    assert!(
        dup_listener.contains("listeners.ws.clients[0].token"),
        "{dup_listener}"
    );
    assert!(
        !dup_listener.contains("\"same\""),
        "the token is not shown: {dup_listener}"
    );
    let dup_clients = problems(
        "[[listeners.ws.clients]]\nname = \"a\"\ntoken = \"t1\"\n\
         [[listeners.ws.clients]]\nname = \"b\"\ntoken = \"t1\"",
    );
    assert!(dup_clients.contains("clients[1].token"), "{dup_clients}");
    assert!(!dup_clients.contains("t1"), "{dup_clients}");
    let twice = problems(
        "[[listeners.ws.clients]]\nname = \"a\"\ntoken = \"t1\"\n\
         [[listeners.ws.clients]]\nname = \"a\"\ntoken = \"t2\"",
    );
    assert!(twice.contains("listed twice"), "{twice}");
    let no_source = problems("[[listeners.ws.clients]]\nname = \"a\"");
    assert!(no_source.contains("exactly one of token"), "{no_source}");
    let two_sources =
        problems("[[listeners.ws.clients]]\nname = \"a\"\ntoken = \"x\"\ntoken_env = \"HOME\"");
    assert!(
        two_sources.contains("exactly one of token"),
        "{two_sources}"
    );
    let bad_name = problems("[[listeners.ws.clients]]\nname = \"a b\"\ntoken = \"x\"");
    assert!(bad_name.contains("clients[0].name"), "{bad_name}");
    let missing_file =
        problems("[[listeners.ws.clients]]\nname = \"a\"\ntoken_file = \"/nonexistent/t\"");
    assert!(missing_file.contains("token_file"), "{missing_file}");
    // An NDJSON listener carries no credential: no clients.
    let ndjson = "[listeners.local]\ndialect = \"ndjson\"\nsocket = \"/tmp/never.sock\"\n\
         [[listeners.local.clients]]\nname = \"a\"\ntoken = \"t\"\n\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"/tmp/none.sock\"\n\n\
         [[routes]]\nlistener = \"local\"\nupstream = \"daemon\"\n";
    match Config::from_toml(ndjson) {
        Ok(_) => panic!("clients accepted on an NDJSON listener"),
        Err(e) => assert!(e.to_string().contains("listeners.local.clients"), "{e}"),
    }
}

#[test]
fn check_never_shows_a_clients_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.toml");
    let toml = BASE.replace(
        "auth_token = \"same\"\n",
        "auth_token = \"same\"\n[[listeners.ws.clients]]\nname = \"reader\"\ntoken = \"very-secret-reader\"\n",
    );
    std::fs::write(&file, toml).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("reader"), "{stdout}");
    assert!(!stdout.contains("very-secret-reader"), "{stdout}");
    assert!(!stderr.contains("very-secret-reader"), "{stderr}");
}

/// A gateway started from a file with `clients`, so that it can reload it.
async fn from_file(
    dir: &std::path::Path,
    socket: &std::path::Path,
    clients: &str,
) -> (Running, String, std::path::PathBuf) {
    from_file_as(dir, socket, "jsonrpc-ws", clients).await
}

/// [`from_file`] with listener `ws` of `dialect`.
async fn from_file_as(
    dir: &std::path::Path,
    socket: &std::path::Path,
    dialect: &str,
    clients: &str,
) -> (Running, String, std::path::PathBuf) {
    let file = dir.join("switchyard.toml");
    let text = |clients: &str| {
        format!(
            "[listeners.ws]\ndialect = \"{dialect}\"\naddress = \"127.0.0.1:0\"\npath = \"/ws\"\n{clients}\n\
             [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
             [[routes]]\nlistener = \"ws\"\nupstream = \"daemon\"\n",
            socket.display()
        )
    };
    std::fs::write(&file, text(clients)).expect("write");
    let cfg = Config::load(Some(&file)).expect("config");
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("ws").expect("url");
    let gateway = bound.reload_from(Some(file.clone())).spawn();
    common::wait_connected(&gateway, "daemon").await;
    (gateway, url, file)
}

/// The reference daemon on a socket in a fresh temp dir: the dir (kept
/// for the test's files), the socket, the daemon.
async fn daemon_in_dir() -> (tempfile::TempDir, std::path::PathBuf, Daemon) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let daemon = Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    (dir, socket, daemon)
}

fn client_table(name: &str, token: &str, extra: &str) -> String {
    format!("[[listeners.ws.clients]]\nname = \"{name}\"\ntoken = \"{token}\"\n{extra}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_closes_only_the_connections_whose_credential_went() {
    let (dir, socket, daemon) = daemon_in_dir().await;
    let before = format!(
        "{}{}",
        client_table("keeper", "keeper-token", ""),
        client_table("leaver", "leaver-token", "")
    );
    let (gateway, url, file) = from_file(dir.path(), &socket, &before).await;
    let mut keeper =
        TestClient::connect(Speak::JsonRpc, &format!("{url}?token=keeper-token")).await;
    let mut leaver = common::connect(&format!("{url}?token=leaver-token")).await;
    common::send(
        &mut leaver,
        r#"{"jsonrpc":"2.0","method":"get_data","id":1}"#,
    )
    .await;
    assert_eq!(
        json(&common::recv(&mut leaver).await)["result"],
        json!(["hello", 5])
    );
    // Traffic on the keeper's connection while the reload lands.
    let traffic = tokio::spawn(async move {
        for i in 0..50 {
            let r = call(&mut keeper, &format!("t{i}"), "get_data", "{}").await;
            assert_eq!(r["result"], json!(["hello", 5]), "{r}");
        }
        keeper
    });
    // The leaver is removed, the keeper may no longer echo, a newcomer
    // is added.
    let after = format!(
        "{}{}",
        client_table("keeper", "keeper-token", "deny_methods = [\"echo\"]"),
        client_table("newcomer", "newcomer-token", "")
    );
    std::fs::write(
        &file,
        std::fs::read_to_string(&file)
            .expect("read")
            .replace(&before, &after),
    )
    .expect("rewrite");
    gateway.reload().await.expect("reload");
    let (code, reason) = common::expect_close(&mut leaver).await;
    assert_eq!((code, reason.as_str()), (1008, "credential revoked"));
    // The keeper's connection stayed open, under its new policy.
    let mut keeper = traffic.await.expect("traffic");
    let r = call(&mut keeper, "after", "echo", "{}").await;
    assert!(forbidden(Speak::JsonRpc, &r), "{r}");
    let r = call(&mut keeper, "data", "get_data", "{}").await;
    assert_eq!(r["result"], json!(["hello", 5]), "{r}");
    // The newcomer gets in; the leaver's token no longer does.
    let mut newcomer =
        TestClient::connect(Speak::JsonRpc, &format!("{url}?token=newcomer-token")).await;
    let r = call(&mut newcomer, "1", "get_data", "{}").await;
    assert_eq!(r["result"], json!(["hello", 5]), "{r}");
    match tokio_tungstenite::connect_async(format!("{url}?token=leaver-token")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 401),
        other => panic!("expected 401, got {other:?}"),
    }
    gateway.shutdown().await;
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_and_their_connections_show_on_the_status_page_and_in_metrics() {
    let (dir, socket, daemon) = daemon_in_dir().await;
    let clients = format!(
        "{}{}[admin]\naddress = \"127.0.0.1:0\"\n",
        client_table("watcher", "watcher-secret-token", "max_connections = 5"),
        client_table("idle", "idle-secret-token", ""),
    );
    let (gateway, url, _file) = from_file(dir.path(), &socket, &clients).await;
    let admin = gateway.admin_addr().expect("admin");
    let mut a =
        TestClient::connect(Speak::JsonRpc, &format!("{url}?token=watcher-secret-token")).await;
    let mut b =
        TestClient::connect(Speak::JsonRpc, &format!("{url}?token=watcher-secret-token")).await;
    for c in [&mut a, &mut b] {
        let r = call(c, "1", "get_data", "{}").await;
        assert_eq!(r["result"], json!(["hello", 5]), "{r}");
    }
    let open = |client: &str| {
        common::metric_value(
            &gateway,
            "switchyard_client_connections_open",
            &[("listener", "ws"), ("client", client)],
        )
    };
    assert_eq!(open("watcher"), 2.0);
    let page = common::http::get(admin, "/", &[]).await;
    let text = page.text();
    assert!(text.contains("<section id=\"clients\">"), "{text}");
    assert!(
        text.contains("<b>watcher</b></td><td class=\"num\">2</td><td class=\"num\">5</td>"),
        "{text}"
    );
    assert!(text.contains("<b>idle</b>"), "{text}");
    assert!(!text.contains("secret-token"), "{text}");
    drop(a);
    assert!(
        common::eventually(STEP, || open("watcher") == 1.0).await,
        "the closed connection is no longer counted"
    );
    gateway.shutdown().await;
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_a_clients_rate_for_its_open_connections() {
    let (dir, socket, daemon) = daemon_in_dir().await;
    let before = client_table(
        "metered",
        "metered-token",
        "rate_per_second = 1\nrate_burst = 2",
    );
    let (gateway, url, file) = from_file(dir.path(), &socket, &before).await;
    let mut c = TestClient::connect(Speak::JsonRpc, &format!("{url}?token=metered-token")).await;
    let mut limited = false;
    for i in 0..10 {
        let r = call(&mut c, &format!("a{i}"), "get_data", "{}").await;
        if rate_limited(Speak::JsonRpc, &r) {
            limited = true;
            break;
        }
    }
    assert!(limited, "a burst of 2 at 1 a second never refused 10 calls");
    // A thousand a second: the open connection is charged to the new rate
    // from its next message.
    let after = client_table(
        "metered",
        "metered-token",
        "rate_per_second = 1000\nrate_burst = 1000",
    );
    std::fs::write(
        &file,
        std::fs::read_to_string(&file)
            .expect("read")
            .replace(&before, &after),
    )
    .expect("rewrite");
    gateway.reload().await.expect("reload");
    for i in 0..20 {
        let r = call(&mut c, &format!("b{i}"), "get_data", "{}").await;
        assert_eq!(r["result"], json!(["hello", 5]), "{i}: {r}");
    }
    gateway.shutdown().await;
    daemon.stop().await;
}

/// An event stream's status and body, as the gateway sends it.
async fn open_stream(url: &str) -> (u16, hyper::body::Incoming) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let uri: hyper::Uri = url.parse().expect("uri");
    let response = tokio::time::timeout(STEP, client.get(uri))
        .await
        .expect("an answer in time")
        .expect("an answer");
    (response.status().as_u16(), response.into_body())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_is_a_connection_of_its_client_and_ends_when_revoked() {
    let (dir, socket, daemon) = daemon_in_dir().await;
    let before = format!(
        "{}{}",
        client_table("keeper", "keeper-token", ""),
        client_table("leaver", "leaver-token", "max_connections = 1")
    );
    let (gateway, url, file) = from_file_as(dir.path(), &socket, "jsonrpc-http", &before).await;
    let events = |token: &str| {
        format!(
            "{}/events?topic=daemon.events&token={token}",
            url.replacen("ws://", "http://", 1)
        )
    };
    let (status, mut leaver) = open_stream(&events("leaver-token")).await;
    assert_eq!(status, 200);
    let (status, mut keeper) = open_stream(&events("keeper-token")).await;
    assert_eq!(status, 200);
    // The stream holds the leaver's one place.
    let open = || {
        common::metric_value(
            &gateway,
            "switchyard_client_connections_open",
            &[("listener", "ws"), ("client", "leaver")],
        )
    };
    assert_eq!(open(), 1.0);
    let (status, mut refused) = open_stream(&events("leaver-token")).await;
    let text = common::http::read_to_end(&mut refused).await;
    assert_eq!((status, text.as_str()), (429, "max connections exceeded"));
    // The leaver is removed: its stream ends with the error event; the
    // keeper's stays open.
    let after = client_table("keeper", "keeper-token", "");
    std::fs::write(
        &file,
        std::fs::read_to_string(&file)
            .expect("read")
            .replace(&before, &after),
    )
    .expect("rewrite");
    gateway.reload().await.expect("reload");
    let text = common::http::read_to_end(&mut leaver).await;
    let last = text
        .rsplit_once("event: error\ndata: ")
        .and_then(|(_, last)| last.strip_suffix("\n\n"))
        .unwrap_or_else(|| panic!("no error event at the end: {text}"));
    assert_eq!(
        json(last),
        json!({"code": -32001, "message": "Unauthorized", "data": "credential revoked"}),
        "{text}"
    );
    assert!(
        common::eventually(STEP, || open() == 0.0).await,
        "the ended stream is no longer counted"
    );
    let still_open = tokio::time::timeout(
        std::time::Duration::from_millis(200),
        http_body_util::BodyExt::frame(&mut keeper),
    )
    .await;
    match still_open {
        Err(_) => {}
        Ok(Some(Ok(f))) if f.data_ref().is_some_and(|d| d.starts_with(b":")) => {}
        Ok(other) => panic!("the keeper's stream changed: {other:?}"),
    }
    gateway.shutdown().await;
    daemon.stop().await;
}
