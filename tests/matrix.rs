//! The translation matrix: one scenario suite for every pairing of listener
//! dialect × upstream dialect. Adding a dialect is one entry in `LISTENERS`
//! or `UPSTREAMS` (plus its client in `common::clients`).
//!
//! Per pair: request/response with every id form the listener allows, an
//! upstream error, a notification, a batch (where the listener has them),
//! a timeout, server-initiated requests and notifications in per-client mode
//! (where the upstream can originate them), a per-client upstream link that
//! drops, and a shared upstream that dies mid-flight.
//!
//! The `jsonrpc-http` listener runs every scenario but those that need a
//! connection the upstream can reach back through (server-initiated
//! calls, per-client links): each message is one `POST`
//! (`common::clients::HttpClient`), so a notification and a batch of
//! notifications get `204` and nothing is received for them.
//!
//! Sideband appears on both sides:
//! - As a listener, once per envelope encoding (`SidebandJson`,
//!   `SidebandCbor`), through `common::clients::SbClient`, which speaks SBP
//!   but takes and gives JSON-RPC text, so the scenarios run unchanged where
//!   they can. Sideband has no batches and no ids but cids: its ids scenario
//!   pipelines every request and checks that each reply's cid maps back to
//!   the request it answers. Its error codes are Sideband's
//!   (error-codes.md §2, §3.3): -32000 → 2000, -32601 → 1101, timeout 1103,
//!   `unavailable` 2000 with `data.kind == "unavailable"`. Both encodings
//!   must give the client the same results (`sideband_json_and_cbor_agree`).
//! - As an upstream (`Up::Sideband`): there is no separate reference
//!   Sideband server, so the upstream is a second switchyard with a
//!   `sideband` listener in front of the reference NDJSON daemon. It cannot
//!   originate requests or notifications, so the per-client scenarios
//!   (server-initiated, per-client link loss) are skipped for it, as for
//!   NDJSON. Its death is the inner gateway's graceful shutdown (grace 0):
//!   it answers what is in flight with its own `unavailable`, Sideband 2000
//!   with `data.kind == "unavailable"`, before it closes the link, so JSON
//!   and holon clients get that error's declared equivalent -32000 with the
//!   same data (error-codes.md §3.2), Sideband clients 2000 unchanged.
//!
//! The HTTP upstream (`Up::Http`) is built the same way: a second
//! switchyard whose `jsonrpc-http` listener fronts the NDJSON daemon,
//! called over h2c (`http2 = "prior-knowledge"`). It has no per-client
//! mode (each call is one `POST`), so `pc` routes to the shared upstream
//! and the per-client scenarios are skipped. Its death is the inner
//! gateway's graceful shutdown: the `POST` in flight is answered with the
//! inner gateway's `unavailable` (-32009), which reaches the client as any
//! upstream error does (`assert_relayed_over_http`).

mod common;

use std::collections::HashMap;
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
    /// A second switchyard's Sideband listener in front of the NDJSON daemon.
    Sideband,
    /// A second switchyard's `jsonrpc-http` listener in front of the NDJSON
    /// daemon, called over h2c (`http2 = "prior-knowledge"`).
    Http,
}

const UPSTREAMS: &[Up] = &[Up::Ndjson, Up::JsonRpc, Up::Holon, Up::Sideband, Up::Http];

/// A running reference upstream of either transport.
enum RefServer {
    Unix(Daemon),
    Ws(WsDaemon),
    /// The inner gateway (Sideband listener `sb`) and its daemon.
    Sideband(Box<InnerGateway>),
    /// The inner gateway (`jsonrpc-http` listener `sb`) and its daemon.
    Http(Box<InnerGateway>),
}

/// A second switchyard (listener `sb`: Sideband, or `jsonrpc-http`) and
/// its daemon.
struct InnerGateway {
    daemon: Daemon,
    gateway: switchyard::app::Running,
    url: String,
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
            Up::Sideband | Up::Http => {
                let daemon = Daemon::start(&dir.join("up.sock"), DaemonOptions::default())
                    .await
                    .expect("daemon");
                let dialect = match up {
                    Up::Http => "jsonrpc-http",
                    _ => "sideband",
                };
                // Grace 0: on shutdown, what is in flight is answered
                // `unavailable` at once, then the link is closed.
                let toml = format!(
                    "[gateway]\nshutdown_grace_ms = 0\n\n\
                     [listeners.sb]\ndialect = \"{dialect}\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\nrequest_timeout_ms = 120000\n\n\
                     [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
                     [[routes]]\nlistener = \"sb\"\nupstream = \"daemon\"\n",
                    daemon.path().display()
                );
                let cfg = switchyard::config::Config::from_toml(&toml)
                    .unwrap_or_else(|e| panic!("{e}\n{toml}"));
                let bound = switchyard::app::bind(cfg).await.expect("bind inner");
                let url = bound.ws_url("sb").expect("url");
                let gateway = bound.spawn();
                common::wait_connected(&gateway, "daemon").await;
                let inner = Box::new(InnerGateway {
                    daemon,
                    gateway,
                    url,
                });
                match up {
                    Up::Http => RefServer::Http(inner),
                    _ => RefServer::Sideband(inner),
                }
            }
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
            (RefServer::Sideband(inner), _) => {
                format!("dialect = \"sideband\"\nurl = \"{}\"", inner.url)
            }
            (RefServer::Http(inner), _) => format!(
                "dialect = \"jsonrpc-http\"\nurl = \"{}\"\nhttp2 = \"prior-knowledge\"",
                inner.url.replacen("ws://", "http://", 1)
            ),
        }
    }

    /// The inner gateway, for an upstream that is one.
    fn inner(&self) -> Option<&InnerGateway> {
        match self {
            RefServer::Sideband(inner) | RefServer::Http(inner) => Some(inner),
            RefServer::Unix(_) | RefServer::Ws(_) => None,
        }
    }

    async fn stop(self) {
        match self {
            RefServer::Unix(d) => d.stop().await,
            RefServer::Ws(d) => d.stop().await,
            RefServer::Sideband(inner) | RefServer::Http(inner) => {
                inner.gateway.shutdown().await;
                inner.daemon.stop().await;
            }
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
    /// Routed to the shared upstream like `main`, with a 400 ms request
    /// timeout, for the timeout scenario alone: `main`'s timeout is long,
    /// so that no other call times out on a busy machine.
    short: String,
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
            Speak::SidebandJson | Speak::SidebandCbor => {
                format!("dialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/{name}\"")
            }
            Speak::Http => {
                format!("dialect = \"jsonrpc-http\"\naddress = \"127.0.0.1:0\"\npath = \"/{name}\"")
            }
        };
        // An HTTP client holds no connection a per-client upstream could
        // follow, and an HTTP upstream has no per-client mode (both
        // configuration problems): then `pc` goes to the shared one.
        let private = if speak == Speak::Http || up == Up::Http {
            "shared"
        } else {
            "private"
        };
        let target = server.target(up);
        let private_table = match up {
            Up::Http => String::new(),
            _ => format!("[upstreams.private]\n{target}\nmode = \"per-client\"\n\n"),
        };
        let toml = format!(
            "[listeners.main]\n{}\nrequest_timeout_ms = 120000\n\n[listeners.pc]\n{}\nrequest_timeout_ms = 120000\n\n\
             [listeners.short]\n{}\nrequest_timeout_ms = 400\n\n\
             [upstreams.shared]\n{target}\nbackoff_initial_ms = 50\nbackoff_max_ms = 100\n\n\
             {private_table}\
             [[routes]]\nlistener = \"main\"\nupstream = \"shared\"\n\n[[routes]]\nlistener = \"pc\"\nupstream = \"{private}\"\n\n\
             [[routes]]\nlistener = \"short\"\nupstream = \"shared\"\n",
            listener("main"),
            listener("pc"),
            listener("short"),
        );
        let cfg =
            switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
        let bound = switchyard::app::bind(cfg).await.expect("bind");
        let endpoint = |name: &str| match speak {
            Speak::Ndjson => bound.unix_path(name).expect("socket").display().to_string(),
            _ => bound.ws_url(name).expect("url"),
        };
        let (main, pc, short) = (endpoint("main"), endpoint("pc"), endpoint("short"));
        let gateway = bound.spawn();
        // An HTTP upstream keeps no standing connection to wait for.
        if up != Up::Http {
            common::wait_connected(&gateway, "shared").await;
        }
        Pair {
            speak,
            up,
            _dir: dir,
            server: Some(server),
            main,
            pc,
            short,
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
    let _ = speak; // every client takes the same request shape (Sideband translates it)
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params},"id":{id}}}"#)
}

fn ids(speak: Speak) -> &'static [&'static str] {
    match speak {
        Speak::Holon => &[r#""1""#, r#""h-2""#, r#""\u0031""#, r#""a b""#],
        // Sideband: the client's own tokens, each standing for a fresh cid.
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

/// The code of switchyard's `timeout` in the listener's dialect.
fn timeout_code(speak: Speak) -> i64 {
    match speak {
        Speak::Holon => 4,
        s if s.is_sideband() => 1103,
        _ => -32008,
    }
}

/// The upstream's -32000 and -32601 as the listener's dialect carries them
/// (error-codes.md §3.1–§3.3: unchanged between JSON dialects, 2000 and
/// 1101 for Sideband clients).
fn upstream_codes(speak: Speak) -> (i64, i64) {
    if speak.is_sideband() {
        (2000, 1101)
    } else {
        (-32000, -32601)
    }
}

/// Asserts that `v` is switchyard's `unavailable` in the listener's
/// dialect. `relayed`: the error comes from an inner gateway behind a
/// Sideband upstream, as its Sideband 2000, which JSON dialects carry as
/// the declared equivalent -32000 with the data unchanged.
fn assert_unavailable(speak: Speak, relayed: bool, v: &serde_json::Value, name: &str) {
    let code = &v["error"]["code"];
    match speak {
        s if s.is_sideband() => {
            assert_eq!(*code, 2000, "{name}: {v}");
            assert_eq!(v["error"]["data"]["kind"], "unavailable", "{name}: {v}");
        }
        _ if relayed => {
            assert_eq!(*code, -32000, "{name}: {v}");
            assert_eq!(v["error"]["data"]["kind"], "unavailable", "{name}: {v}");
        }
        Speak::Holon => assert_eq!(*code, 14, "{name}: {v}"),
        _ => assert_eq!(*code, -32009, "{name}: {v}"),
    }
}

/// True when the upstream can originate requests and notifications.
fn originates(up: Up) -> bool {
    matches!(up, Up::JsonRpc | Up::Holon)
}

async fn run_pair(speak: Speak, up: Up) {
    let mut pair = Pair::start(speak, up).await;
    let name = pair.name();
    ids_round_trip(&pair, &name).await;
    large_round_trip(&pair, &name).await;
    errors_notifications_batches(&pair, &name).await;
    timeout(&pair, &name).await;
    // An HTTP client cannot be sent requests or notifications.
    if originates(up) && speak != Speak::Http {
        server_initiated(&pair, &name).await;
        per_client_link_loss(&pair, &name).await;
    }
    upstream_death(&mut pair, &name).await;
    pair.gateway.shutdown().await;
}

async fn ids_round_trip(pair: &Pair, name: &str) {
    let mut c = pair.client(&pair.main).await;
    let ids = ids(pair.speak);
    if pair.speak.is_sideband() {
        // Only cids: every request is in flight at once, and each reply must
        // come back with the cid of the request it answers (the client
        // refuses a cid it did not send or that was already answered).
        for (i, id) in ids.iter().enumerate() {
            c.send(&request(pair.speak, id, "echo", &format!(r#"{{"n":{i}}}"#)))
                .await;
        }
        let mut answered = HashMap::new();
        for _ in ids {
            let reply = c.recv().await;
            let v = json(&reply);
            let n = v["result"]["n"]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: {reply}")) as usize;
            let id = ids[n];
            assert!(
                reply.ends_with(&format!(r#""id":{id}}}"#)),
                "{name}: the reply to request {n} (id {id}) came back as {reply}"
            );
            assert!(answered.insert(n, reply).is_none(), "{name}: twice {n}");
        }
        assert_eq!(answered.len(), ids.len(), "{name}");
        return;
    }
    for (i, id) in ids.iter().enumerate() {
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

/// A request and reply many times larger than what any socket read takes
/// at once (8 KiB on WebSocket listeners; 15 KiB on upstream WebSocket
/// links, 1 KiB per read of the WebSocket library above them) cross
/// whole, several in a row on one connection.
async fn large_round_trip(pair: &Pair, name: &str) {
    let mut c = pair.client(&pair.main).await;
    for (i, len) in [40_000, 200_000, 70_001].into_iter().enumerate() {
        let text: String = (0..len)
            .map(|k| char::from(b'a' + (k % 26) as u8))
            .collect();
        let params = format!(r#"{{"n":{i},"text":"{text}"}}"#);
        // A string id: the one form every listener dialect takes.
        c.send(&request(pair.speak, &format!(r#""{i}""#), "echo", &params))
            .await;
        let reply = json(&c.recv().await);
        assert_eq!(reply["result"]["n"], i, "{name}");
        assert_eq!(
            reply["result"]["text"].as_str().map(str::len),
            Some(len),
            "{name}: reply {i}"
        );
        assert_eq!(reply["result"]["text"], text.as_str(), "{name}: reply {i}");
    }
}

async fn errors_notifications_batches(pair: &Pair, name: &str) {
    let mut c = pair.client(&pair.main).await;
    let (app_error, not_found) = upstream_codes(pair.speak);
    // An upstream error passes through unchanged between JSON dialects; to
    // Sideband clients -32000 is 2000 with message and data unchanged.
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
        json!({"code": app_error, "message": "boom", "data": {"k": 1}}),
        "{name}: {v}"
    );
    assert_eq!(v["id"], "e", "{name}: {v}");
    // An unknown method: the upstream's own error.
    c.send(&request(pair.speak, r#""u""#, "no.such", "{}"))
        .await;
    assert_eq!(json(&c.recv().await)["error"]["code"], not_found, "{name}");
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
    if pair.speak.is_sideband() {
        // Sideband has no batches.
        return;
    }
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
    let mut c = pair.client(&pair.short).await;
    c.send(&request(pair.speak, r#""t""#, "sleep", r#"{"ms":1500}"#))
        .await;
    let v = json(&c.recv().await);
    assert_eq!(v["error"]["code"], timeout_code(pair.speak), "{name}: {v}");
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

/// The id of a request switchyard pushed: `s<N>` for JSON clients; for
/// Sideband clients the request's cid, which the client renders in hex.
fn is_push_id(speak: Speak, id: &serde_json::Value) -> bool {
    let Some(id) = id.as_str() else {
        return false;
    };
    if speak.is_sideband() {
        id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    } else {
        id.starts_with('s')
    }
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
        assert!(is_push_id(pair.speak, &ask["id"]), "{name}: {ask}");
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
    c.send(&request(
        pair.speak,
        r#""slow""#,
        "sleep",
        r#"{"ms":60000}"#,
    ))
    .await;
    c.send(&request(pair.speak, r#""bye""#, "close_me", "{}"))
        .await;
    let mut unavailable = false;
    let ended = loop {
        match c.next().await {
            Ok(text) => {
                let v = json(&text);
                if v["id"] == "slow" {
                    assert_unavailable(pair.speak, false, &v, name);
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
    // A call the upstream holds for a minute, under `main`'s two minutes:
    // only the upstream's death can end it while the test runs. The
    // upstream is killed once the call is pending there (the late reply
    // of the timeout scenario settled first).
    // Behind an inner gateway, pending there means held by the inner
    // gateway for its daemon: a call still unread in the inner
    // gateway's socket when it shuts down is never answered by it (the
    // outer link then fails it itself, "upstream connection lost"), so
    // waiting only for the outer link's entry would race the shutdown.
    // An HTTP upstream correlates nothing (each POST is its own answer):
    // only the inner gateway's count applies.
    let outer = || {
        common::metric_value(
            &pair.gateway,
            "switchyard_correlator_entries",
            &[("upstream", "shared")],
        )
    };
    let inner = || {
        pair.server
            .as_ref()
            .and_then(RefServer::inner)
            .map(|inner| {
                common::metric_value(
                    &inner.gateway,
                    "switchyard_correlator_entries",
                    &[("upstream", "daemon")],
                )
            })
    };
    let pending = || match (pair.up, inner()) {
        (Up::Http, Some(inner)) => vec![inner],
        (_, Some(inner)) => vec![outer(), inner],
        (_, None) => vec![outer()],
    };
    assert!(
        common::eventually(Duration::from_secs(30), || pending()
            .iter()
            .all(|n| *n == 0.0))
        .await,
        "{name}: calls still pending before the death scenario"
    );
    let mut c = pair.client(&pair.main).await;
    c.send(&request(pair.speak, r#""d""#, "sleep", r#"{"ms":60000}"#))
        .await;
    assert!(
        common::eventually(Duration::from_secs(30), || pending()
            .iter()
            .all(|n| *n >= 1.0))
        .await,
        "{name}: the call never reached the upstream"
    );
    if let Some(server) = pair.server.take() {
        server.stop().await;
    }
    let v = json(&c.recv().await);
    assert_eq!(v["id"], "d", "{name}: {v}");
    if pair.up == Up::Http {
        assert_relayed_over_http(pair.speak, &v, name);
    } else {
        assert_unavailable(pair.speak, pair.up == Up::Sideband, &v, name);
    }
}

/// The inner gateway's `unavailable` behind an HTTP upstream: a JSON-RPC
/// error (-32009) in the answer to the `POST`, so an upstream error like
/// any other (error-codes.md §3.1, §3.3): unchanged for JSON dialects,
/// holon included; Sideband 2000 with the original under `data.origin`.
fn assert_relayed_over_http(speak: Speak, v: &serde_json::Value, name: &str) {
    if speak.is_sideband() {
        assert_eq!(v["error"]["code"], 2000, "{name}: {v}");
        let origin = &v["error"]["data"]["origin"];
        assert_eq!(origin["code"], -32009, "{name}: {v}");
        assert_eq!(origin["dialect"], "jsonrpc-http", "{name}: {v}");
    } else {
        assert_eq!(v["error"]["code"], -32009, "{name}: {v}");
    }
}

async fn run_listener(speak: Speak) {
    let pairs = UPSTREAMS.iter().map(|up| run_pair(speak, *up));
    futures_util::future::join_all(pairs).await;
}

/// Every listener dialect, each with its own test: `LISTENERS` and the test
/// functions come from one list.
macro_rules! listeners {
    ($($test:ident => $speak:expr,)*) => {
        const LISTENERS: &[Speak] = &[$($speak),*];
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                run_listener($speak).await;
            }
        )*
    };
}

listeners! {
    jsonrpc_ws_listener_to_every_upstream => Speak::JsonRpc,
    holon_listener_to_every_upstream => Speak::Holon,
    ndjson_listener_to_every_upstream => Speak::Ndjson,
    sideband_json_listener_to_every_upstream => Speak::SidebandJson,
    sideband_cbor_listener_to_every_upstream => Speak::SidebandCbor,
    jsonrpc_http_listener_to_every_upstream => Speak::Http,
}

/// Requests whose replies must not depend on the Sideband encoding.
const AGREE_CALLS: &[(&str, &str)] = &[
    (
        "echo",
        r#"{"f":[2.5,-0.0,1e300,1.0,1e3],"big":12345678901234567890,"neg":-9223372036854775808,"nested":{"a":{"b":[{"c":null}]}},"s":"héllo ☃ \u0000 \ud83d\ude00","t":true,"null":null,"empty":{},"list":[]}"#,
    ),
    ("echo", "null"),
    ("echo", r#"[1,"two",[3]]"#),
    ("subtract", "[42.5,23]"),
    (
        "subtract",
        r#"{"minuend":12345678901234567890,"subtrahend":1}"#,
    ),
    ("get_data", "[]"),
    (
        "fail",
        r#"{"code":-32000,"message":"boom ☃","data":{"k":[1,2.5,null]}}"#,
    ),
    ("fail", r#"{"code":-32602,"message":"bad","data":"why"}"#),
    ("no.such", "{}"),
];

/// The same requests through a Sideband-JSON and a Sideband-CBOR client of
/// one Sideband listener give the same results (as JSON values), through
/// every upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sideband_json_and_cbor_agree() {
    let speaks: Vec<Speak> = LISTENERS
        .iter()
        .copied()
        .filter(|s| s.is_sideband())
        .collect();
    assert_eq!(speaks, [Speak::SidebandJson, Speak::SidebandCbor]);
    let runs = UPSTREAMS.iter().map(|&up| {
        let speaks = speaks.clone();
        async move {
            let mut pair = Pair::start(Speak::SidebandJson, up).await;
            let name = format!("Sideband JSON vs CBOR × {up:?} upstream");
            let mut clients = Vec::new();
            for speak in &speaks {
                clients.push(TestClient::connect(*speak, &pair.main).await);
            }
            for (i, (method, params)) in AGREE_CALLS.iter().enumerate() {
                let mut replies = Vec::new();
                for c in &mut clients {
                    c.send(&request(c.speaks(), &i.to_string(), method, params))
                        .await;
                    replies.push(json(&c.recv().await));
                }
                assert_eq!(replies[0]["id"], i, "{name}: {replies:?}");
                assert_eq!(
                    replies[0], replies[1],
                    "{name}: {method} {params} differs between JSON and CBOR"
                );
                // Echoed params come back as sent (holon upstreams take
                // object params only: the others are invalid_params there).
                if *method == "echo" && (i == 0 || up != Up::Holon) {
                    let sent: serde_json::Value = json(params);
                    assert_eq!(replies[0]["result"], sent, "{name}: {replies:?}");
                }
            }
            pair.gateway.shutdown().await;
            if let Some(server) = pair.server.take() {
                server.stop().await;
            }
        }
    });
    futures_util::future::join_all(runs).await;
}
