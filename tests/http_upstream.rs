//! `jsonrpc-http` upstreams against real HTTP servers started here: a
//! small hyper JSON-RPC server (over TCP and over a Unix socket) whose
//! path picks its behaviour (`/ok` answers, `/500` fails, `/hang` never
//! answers, `/notjson` answers HTML), and a raw socket that closes in
//! the middle of its reply body. Calls come from every listener dialect.

mod common;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use common::clients::{Speak, TestClient};
use common::json;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// What the test server saw of one request: path, headers, body.
type Seen = (String, http::HeaderMap, Value);

/// The JSON-RPC server: `/ok` (and `/`) echo the method and params as
/// the result, with `204` for a notification.
async fn serve(
    req: Request<Incoming>,
    seen: mpsc::UnboundedSender<Seen>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let mut headers = req.headers().clone();
    let version = format!("{:?}", req.version());
    headers.insert("x-seen-version", version.parse().expect("version"));
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let _ = seen.send((path.clone(), headers, v.clone()));
    let reply = |status: u16, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = http::StatusCode::from_u16(status).expect("status");
        r.headers_mut()
            .insert("content-type", "application/json".parse().expect("ct"));
        Ok(r)
    };
    match path.as_str() {
        "/500" => reply(500, String::from("oops")),
        // Never answers (the server task ends with the test).
        "/hang" => std::future::pending().await,
        "/notjson" => reply(200, String::from("<html>hello</html>")),
        // A batch: one reply per request, in reverse order.
        _ if v.is_array() => {
            let replies: Vec<Value> = v
                .as_array()
                .into_iter()
                .flatten()
                .rev()
                .filter(|item| item.get("id").is_some())
                .map(|item| {
                    let result = json!({"method": item["method"], "params": item["params"]});
                    json!({"jsonrpc": "2.0", "result": result, "id": item["id"]})
                })
                .collect();
            match replies.is_empty() {
                true => reply(204, String::new()),
                false => reply(200, Value::from(replies).to_string()),
            }
        }
        _ if v.get("id").is_none() => reply(204, String::new()),
        _ => {
            let result = json!({"method": v["method"], "params": v["params"]});
            let out = json!({"jsonrpc": "2.0", "result": result, "id": v["id"]});
            reply(200, out.to_string())
        }
    }
}

/// Serves HTTP/1.1 connections from `accept` with [`serve`].
fn spawn_server<S, F>(mut accept: F, seen: mpsc::UnboundedSender<Seen>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: FnMut() -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<S>> + Send>>
        + Send
        + 'static,
{
    tokio::spawn(async move {
        while let Some(stream) = accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |r| serve(r, seen.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
}

/// A server that reads a request, starts a 200 reply promising 1000
/// bytes, sends a few, and closes.
async fn cutting_server() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                // The request is small: one read holds its head (and
                // whatever comes, the reply starts now).
                let _ = s.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"jsonrpc\":\"2.0\",\"res";
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    format!("http://{addr}/")
}

struct Setup {
    gateway: switchyard::app::Running,
    endpoints: Vec<(Speak, String)>,
    /// The listener with a short request timeout (JSON-RPC WebSocket).
    short: String,
    seen: mpsc::UnboundedReceiver<Seen>,
    _dir: tempfile::TempDir,
}

const LISTENERS: [(Speak, &str); 5] = [
    (Speak::JsonRpc, "jsonrpc-ws"),
    (Speak::Holon, "holon-rpc"),
    (Speak::Ndjson, "ndjson"),
    (Speak::SidebandJson, "sideband"),
    (Speak::Http, "jsonrpc-http"),
];

async fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tx, seen) = mpsc::unbounded_channel();
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = tcp.local_addr().expect("addr");
    let tcp = std::sync::Arc::new(tcp);
    spawn_server(
        move || {
            let tcp = tcp.clone();
            Box::pin(async move { tcp.accept().await.ok().map(|(s, _)| s) })
        },
        tx.clone(),
    );
    let sock = dir.path().join("up.sock");
    let unix = std::sync::Arc::new(tokio::net::UnixListener::bind(&sock).expect("bind unix"));
    spawn_server(
        move || {
            let unix = unix.clone();
            Box::pin(async move { unix.accept().await.ok().map(|(s, _)| s) })
        },
        tx,
    );
    let cut = cutting_server().await;
    let mut toml = String::new();
    for (speak, dialect) in LISTENERS {
        let name = format!("{speak:?}").to_lowercase();
        let at = match speak {
            Speak::Ndjson => format!(
                "socket = \"{}\"",
                dir.path().join(format!("{name}.sock")).display()
            ),
            _ => format!("address = \"127.0.0.1:0\"\npath = \"/{name}\""),
        };
        toml += &format!(
            "[listeners.{name}]\ndialect = \"{dialect}\"\n{at}\nrequest_timeout_ms = 120000\n\n"
        );
    }
    toml += "[listeners.short]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/short\"\nrequest_timeout_ms = 300\n\n";
    let ups = [
        ("ok", format!("http://{addr}/ok")),
        ("e500", format!("http://{addr}/500")),
        ("hang", format!("http://{addr}/hang")),
        ("notjson", format!("http://{addr}/notjson")),
        ("cut", cut),
        ("unix", format!("http+unix://{}", sock.display())),
    ];
    for (name, url) in &ups {
        toml += &format!("[upstreams.{name}]\ndialect = \"jsonrpc-http\"\nurl = \"{url}\"\n");
        if *name == "ok" {
            toml += "headers = { Authorization = \"Bearer up-s3cret\", X-Extra = \"yes\" }\n";
            toml += "accepts_batches = true\n";
        }
        toml += "\n";
    }
    let listeners = LISTENERS
        .iter()
        .map(|(s, _)| format!("{s:?}").to_lowercase())
        .chain([String::from("short")]);
    for l in listeners {
        toml += &format!("[[routes]]\nlistener = \"{l}\"\nupstream = \"ok\"\n\n");
        for (name, _) in &ups {
            toml += &format!(
                "[[routes]]\nlistener = \"{l}\"\nupstream = \"{name}\"\nmethod_prefix = \"{name}.\"\n\n"
            );
        }
    }
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let endpoints = LISTENERS
        .iter()
        .map(|(speak, _)| {
            let name = format!("{speak:?}").to_lowercase();
            let at = match speak {
                Speak::Ndjson => bound
                    .unix_path(&name)
                    .expect("socket")
                    .display()
                    .to_string(),
                _ => bound.ws_url(&name).expect("url"),
            };
            (*speak, at)
        })
        .collect();
    let short = bound.ws_url("short").expect("url");
    Setup {
        gateway: bound.spawn(),
        endpoints,
        short,
        seen,
        _dir: dir,
    }
}

fn request(id: &str, method: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"a":1}},"id":{id}}}"#)
}

/// The next request the test servers saw, with a generous bound.
async fn next_seen(seen: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(Duration::from_secs(60), seen.recv())
        .await
        .expect("the upstream saw no request")
        .expect("server gone")
}

#[tokio::test]
async fn every_listener_dialect_calls_an_http_upstream() {
    let mut s = setup().await;
    for (speak, at) in s.endpoints.clone() {
        let mut c = TestClient::connect(speak, &at).await;
        for method in ["hello", "unix.hello"] {
            c.send(&request(r#""x""#, method)).await;
            let v = json(&c.recv().await);
            assert_eq!(
                v["result"],
                json!({"method": method, "params": {"a": 1}}),
                "{speak:?} {method}: {v}"
            );
            assert_eq!(v["id"], "x", "{speak:?}: {v}");
            let (path, headers, body) = next_seen(&mut s.seen).await;
            // Client ids are rewritten: the upstream sees its own integer.
            assert!(body["id"].is_u64(), "{speak:?}: {body}");
            if method == "hello" {
                assert_eq!(path, "/ok");
                assert_eq!(headers["authorization"], "Bearer up-s3cret");
                assert_eq!(headers["x-extra"], "yes");
                assert!(headers["content-type"]
                    .to_str()
                    .is_ok_and(|t| t.starts_with("application/json")));
            } else {
                assert_eq!(path, "/", "the Unix-socket upstream");
                assert!(headers.get("authorization").is_none());
            }
        }
        if speak != Speak::Holon {
            // A notification: POSTed, the 204 returns nothing.
            c.send(r#"{"jsonrpc":"2.0","method":"note","params":{"n":1}}"#)
                .await;
            let (path, _, body) = next_seen(&mut s.seen).await;
            assert_eq!(path, "/ok");
            assert_eq!(body["method"], "note", "{speak:?}");
            assert!(body.get("id").is_none(), "{speak:?}: {body}");
        }
    }
    s.gateway.shutdown().await;
}

#[tokio::test]
async fn http_failures_become_json_rpc_errors() {
    let mut s = setup().await;
    let at = &s.endpoints[0].1;
    let mut c = TestClient::connect(Speak::JsonRpc, at).await;
    // 500: unavailable, the status named.
    c.send(&request("1", "e500.call")).await;
    let v = json(&c.recv().await);
    assert_eq!(v["error"]["code"], -32009, "{v}");
    assert!(v.to_string().contains("HTTP 500"), "{v}");
    assert_eq!(v["id"], 1);
    // Closed mid-body: unavailable, no hang.
    c.send(&request("2", "cut.call")).await;
    let v = json(&c.recv().await);
    assert_eq!(v["error"]["code"], -32009, "{v}");
    assert_eq!(v["id"], 2);
    // A 200 that is not JSON-RPC: internal error, the status named.
    c.send(&request("3", "notjson.call")).await;
    let v = json(&c.recv().await);
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert!(v.to_string().contains("HTTP 200"), "{v}");
    // A hanging upstream: the listener's request timeout.
    let mut short = TestClient::connect(Speak::JsonRpc, &s.short).await;
    short.send(&request("4", "hang.call")).await;
    let v = json(&short.recv().await);
    assert_eq!(v["error"]["code"], -32008, "{v}");
    assert_eq!(v["id"], 4);
    // The upstream is still usable after all that.
    c.send(&request("5", "hello")).await;
    let v = json(&c.recv().await);
    assert_eq!(v["result"]["method"], "hello", "{v}");
    drop(s.seen.try_recv());
    s.gateway.shutdown().await;
}

#[test]
fn check_masks_http_upstream_headers() {
    let toml = "[listeners.l]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\n\n\
                [upstreams.u]\ndialect = \"jsonrpc-http\"\nurl = \"https://user:pw@example.com/rpc\"\n\
                headers = { Authorization = \"Bearer top-s3cret\" }\n\n\
                [[routes]]\nlistener = \"l\"\nupstream = \"u\"\n";
    let cfg = switchyard::config::Config::from_toml(toml).unwrap_or_else(|e| panic!("{e}"));
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("top-s3cret"), "{shown}");
    assert!(!shown.contains(":pw@"), "{shown}");
    assert!(shown.contains("Authorization"), "{shown}");
}

#[test]
fn what_an_http_upstream_cannot_do_is_refused() {
    let base = "[listeners.l]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\n\n\
                [[routes]]\nlistener = \"l\"\nupstream = \"u\"\n\n\
                [upstreams.u]\ndialect = \"jsonrpc-http\"\n";
    for (extra, key) in [
        ("url = \"ws://h/rpc\"\n", "url"),
        ("url = \"http+unix://relative.sock\"\n", "url"),
        ("", "url"),
        ("url = \"http://h/\"\nmode = \"per-client\"\n", "mode"),
        ("url = \"http://h/\"\nrequired = true\n", "required"),
        (
            "url = \"http://h/\"\nstreaming_methods = [\"s\"]\n",
            "streaming_methods",
        ),
        (
            "url = \"http://h/\"\nheaders = { \"bad name\" = \"v\" }\n",
            "headers",
        ),
        ("url = \"http://h/\"\nca_file = \"/x.pem\"\n", "ca_file"),
        ("url = \"http://h/\"\nhttp2 = \"always\"\n", "http2"),
    ] {
        let toml = format!("{base}{extra}");
        let err = switchyard::config::Config::from_toml(&toml)
            .err()
            .unwrap_or_else(|| panic!("accepted:\n{toml}"))
            .to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
    let socket =
        "[upstreams.n]\ndialect = \"ndjson\"\nsocket = \"/tmp/x.sock\"\nheaders = { A = \"b\" }\n";
    let toml = format!("{base}url = \"http://h/\"\n\n{socket}");
    let err = switchyard::config::Config::from_toml(&toml)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("headers"), "{err}");
    let socket =
        "[upstreams.n]\ndialect = \"ndjson\"\nsocket = \"/tmp/x.sock\"\nhttp2 = \"alpn\"\n";
    let toml = format!("{base}url = \"http://h/\"\n\n{socket}");
    let err = switchyard::config::Config::from_toml(&toml)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("http2"), "{err}");
}

/// `https://`: rustls with the upstream's `ca_file`, HTTP/2 chosen by
/// ALPN, and calls after the first sharing its one connection.
#[tokio::test]
async fn https_upstream_speaks_http2_on_one_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let names = vec!["127.0.0.1".to_owned()];
    let certified = rcgen::generate_simple_self_signed(names).expect("rcgen");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, certified.cert.pem()).expect("write cert");
    let key = rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .expect("key");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .expect("server config");
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(server));
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = tcp.local_addr().expect("addr");
    let (tx, mut seen) = mpsc::unbounded_channel();
    let (conns_tx, mut conns) = mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        while let Ok((s, _)) = tcp.accept().await {
            let _ = conns_tx.send(());
            let (acceptor, seen) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |r| serve(r, seen.clone()));
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(TokioIo::new(tls), svc)
                .await;
            });
        }
    });
    let toml = format!(
        "[listeners.l]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/l\"\nrequest_timeout_ms = 120000\n\n\
         [upstreams.u]\ndialect = \"jsonrpc-http\"\nurl = \"https://{addr}/ok\"\nca_file = \"{}\"\n\n\
         [[routes]]\nlistener = \"l\"\nupstream = \"u\"\n",
        ca.display()
    );
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("l").expect("url");
    let gateway = bound.spawn();
    let mut c = TestClient::connect(Speak::JsonRpc, &url).await;
    c.send(&request("0", "first")).await;
    assert_eq!(json(&c.recv().await)["result"]["method"], "first");
    let (_, headers, _) = next_seen(&mut seen).await;
    assert_eq!(headers["x-seen-version"], "HTTP/2.0");
    // Many calls in flight at once: multiplexed on the one connection.
    for i in 1..=50 {
        c.send(&request(&i.to_string(), "many")).await;
    }
    for _ in 1..=50 {
        assert_eq!(json(&c.recv().await)["result"]["method"], "many");
    }
    gateway.shutdown().await;
    let mut accepted = 0;
    while conns.try_recv().is_ok() {
        accepted += 1;
    }
    assert_eq!(accepted, 1, "HTTP/2 calls share one connection");
}

/// `http2 = "prior-knowledge"`: h2c to a cleartext server that speaks
/// only HTTP/2 (hyper's HTTP/2 server, holding each call until all 100
/// are in), and the 100 calls of ten clients at once share one connection.
#[tokio::test]
async fn h2c_by_prior_knowledge_carries_100_calls_on_one_connection() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    const CLIENTS: usize = 10;
    const EACH: usize = 10;
    const CALLS: usize = CLIENTS * EACH;
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = tcp.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    // Calls in the server at once, and the most seen.
    let open = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let all_in = Arc::new(tokio::sync::Notify::new());
    let (versions_tx, mut versions) = mpsc::unbounded_channel::<http::Version>();
    {
        let (accepted, open, most, all_in) =
            (accepted.clone(), open.clone(), most.clone(), all_in.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = tcp.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let (open, most, all_in) = (open.clone(), most.clone(), all_in.clone());
                let versions = versions_tx.clone();
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (open, most, all_in) = (open.clone(), most.clone(), all_in.clone());
                    let _ = versions.send(req.version());
                    async move {
                        let body = req.into_body().collect().await.map(|b| b.to_bytes());
                        let v: Value =
                            serde_json::from_slice(&body.unwrap_or_default()).unwrap_or_default();
                        // Created first: it sees a notify that comes
                        // after this call is counted.
                        let waiting = all_in.notified();
                        let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        if now >= CALLS {
                            all_in.notify_waiters();
                        } else {
                            // Bounded: calls that never come together
                            // fail the count below rather than hang.
                            let _ = tokio::time::timeout(Duration::from_secs(60), waiting).await;
                        }
                        open.fetch_sub(1, Ordering::SeqCst);
                        let out = json!({"jsonrpc": "2.0", "result": v["params"], "id": v["id"]});
                        let mut r = Response::new(Full::new(Bytes::from(out.to_string())));
                        r.headers_mut()
                            .insert("content-type", "application/json".parse().expect("ct"));
                        Ok::<_, Infallible>(r)
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
                });
            }
        });
    }
    let toml = format!(
        "[listeners.l]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/l\"\nrequest_timeout_ms = 120000\n\n\
         [upstreams.u]\ndialect = \"jsonrpc-http\"\nurl = \"http://{addr}/rpc\"\nhttp2 = \"prior-knowledge\"\n\n\
         [[routes]]\nlistener = \"l\"\nupstream = \"u\"\n"
    );
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("l").expect("url");
    let gateway = bound.spawn();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(TestClient::connect(Speak::JsonRpc, &url).await);
    }
    // Every call is sent before any is answered (the server holds them).
    for (c, client) in clients.iter_mut().enumerate() {
        for i in 0..EACH {
            let n = c * EACH + i;
            client
                .send(&format!(
                    r#"{{"jsonrpc":"2.0","method":"m","params":[{n}],"id":{n}}}"#
                ))
                .await;
        }
    }
    for (c, client) in clients.iter_mut().enumerate() {
        let mut got = Vec::new();
        for _ in 0..EACH {
            let v = json(&client.recv().await);
            assert_eq!(v["result"], json!([v["id"]]), "{v}");
            got.push(v["id"].as_u64().expect("id") as usize);
        }
        got.sort_unstable();
        let want: Vec<usize> = (c * EACH..(c + 1) * EACH).collect();
        assert_eq!(got, want);
    }
    gateway.shutdown().await;
    assert_eq!(most.load(Ordering::SeqCst), CALLS, "all calls at once");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection");
    while let Ok(version) = versions.try_recv() {
        assert_eq!(version, http::Version::HTTP_2);
    }
}

/// A client batch to an upstream that accepts batches is one POST of a
/// JSON array; each reply goes back to its own request.
#[tokio::test]
async fn a_batch_is_one_post() {
    let mut s = setup().await;
    let mut c = TestClient::connect(Speak::JsonRpc, &s.endpoints[0].1).await;
    c.send(
        r#"[{"jsonrpc":"2.0","method":"b1","params":[1],"id":"one"},
            {"jsonrpc":"2.0","method":"bn","params":[0]},
            {"jsonrpc":"2.0","method":"b2","params":[2],"id":2}]"#,
    )
    .await;
    let v = json(&c.recv().await);
    let items = v
        .as_array()
        .unwrap_or_else(|| panic!("not a batch reply: {v}"));
    assert_eq!(items.len(), 2, "{v}");
    for item in items {
        let expected = match &item["id"] {
            Value::String(id) if id == "one" => "b1",
            Value::Number(n) if n.as_u64() == Some(2) => "b2",
            other => panic!("unexpected id {other}: {v}"),
        };
        assert_eq!(item["result"]["method"], expected, "{v}");
    }
    let (path, _, body) = next_seen(&mut s.seen).await;
    assert_eq!(path, "/ok");
    assert_eq!(body.as_array().map(Vec::len), Some(3), "one POST: {body}");
    assert!(s.seen.try_recv().is_err(), "more than one POST");
    s.gateway.shutdown().await;
}
