//! The `jsonrpc-http` listener with real clients: `curl` for every status
//! and the JSON-RPC 2.0 specification's examples, and hyper's HTTP/2
//! client multiplexing calls on one connection.

mod common;

use std::path::Path;

use serde_json::Value;
use switchyard::app::{self, Running};
use switchyard::config::Config;
use switchyard::daemon::{Daemon, DaemonOptions};

use common::curl::{curl, Answer};

/// A gateway with a `jsonrpc-http` listener `web` (`listener_extra` added
/// to its table) in front of the reference daemon.
struct HttpStack {
    _dir: tempfile::TempDir,
    _daemon: Daemon,
    /// `http://127.0.0.1:PORT/rpc`.
    url: String,
    gateway: Running,
}

fn toml(socket: &Path, listener_extra: &str) -> String {
    format!(
        r#"
[listeners.web]
dialect = "jsonrpc-http"
address = "127.0.0.1:0"
path = "/rpc"
{listener_extra}

[upstreams.daemon]
dialect = "ndjson"
socket = "{socket}"
backoff_initial_ms = 50
backoff_max_ms = 200

[[routes]]
listener = "web"
upstream = "daemon"
"#,
        socket = socket.display()
    )
}

impl HttpStack {
    async fn start(listener_extra: &str) -> HttpStack {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("daemon.sock");
        let daemon = Daemon::start(&socket, DaemonOptions::default())
            .await
            .expect("daemon");
        let toml = toml(&socket, listener_extra);
        let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let bound = app::bind(cfg).await.expect("bind");
        let url = bound
            .ws_url("web")
            .expect("url")
            .replacen("wss://", "https://", 1)
            .replacen("ws://", "http://", 1);
        let gateway = bound.spawn();
        common::wait_connected(&gateway, "daemon").await;
        HttpStack {
            _dir: dir,
            _daemon: daemon,
            url,
            gateway,
        }
    }

    /// `curl -d body` with `Content-Type: application/json` and `extra`.
    async fn post(&self, body: &str, extra: &[&str]) -> Answer {
        let mut args = vec![
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ];
        args.extend_from_slice(extra);
        args.push(&self.url);
        curl(&args).await
    }
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

/// Batch replies may come in any order: compare them as multisets.
fn normalize(v: Value) -> Value {
    match v {
        Value::Array(mut items) => {
            items.sort_by_key(|i| i.to_string());
            Value::Array(items)
        }
        other => other,
    }
}

#[tokio::test]
async fn jsonrpc_spec_examples_over_http_with_curl() {
    let stack = HttpStack::start("").await;
    for (request, expected) in common::spec::SPEC_EXAMPLES {
        let answer = stack.post(request, &[]).await;
        match expected {
            Some(want) => {
                assert_eq!(answer.status, 200, "example {request}: {answer:?}");
                assert_eq!(answer.header("content-type"), Some("application/json"));
                assert_eq!(
                    normalize(json(&answer.body)),
                    normalize(json(want)),
                    "example {request}"
                );
            }
            None => {
                assert_eq!(answer.status, 204, "example {request}: {answer:?}");
                assert_eq!(answer.body, "", "example {request}");
            }
        }
    }
    // charset and case of the media type are accepted.
    let one = r#"{"jsonrpc":"2.0","method":"echo","params":["x"],"id":7}"#;
    let answer = curl(&[
        "-H",
        "Content-Type: Application/JSON; charset=utf-8",
        "--data-binary",
        one,
        &stack.url,
    ])
    .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(json(&answer.body)["id"], 7);
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn what_is_not_json_rpc_gets_an_http_status() {
    let stack = HttpStack::start("max_message_bytes = 1024").await;
    // 405 with Allow, for GET and any other method.
    for method in ["GET", "PUT", "DELETE"] {
        let answer = curl(&["-X", method, &stack.url]).await;
        assert_eq!(answer.status, 405, "{method}: {answer:?}");
        assert_eq!(answer.header("allow"), Some("POST, OPTIONS"), "{method}");
    }
    // 415 for another content type.
    let one = r#"{"jsonrpc":"2.0","method":"echo","params":["x"],"id":1}"#;
    let answer = curl(&[
        "-H",
        "Content-Type: text/plain",
        "--data-binary",
        one,
        &stack.url,
    ])
    .await;
    assert_eq!(answer.status, 415, "{answer:?}");
    // 413 over max_message_bytes, declared (Content-Length) or chunked.
    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":["{}"],"id":1}}"#,
        "x".repeat(2000)
    );
    let answer = stack.post(&big, &[]).await;
    assert_eq!(answer.status, 413, "{answer:?}");
    let answer = stack
        .post(&big, &["-H", "Transfer-Encoding: chunked"])
        .await;
    assert_eq!(answer.status, 413, "chunked: {answer:?}");
    // Just under the limit is served.
    let fits = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":["{}"],"id":1}}"#,
        "x".repeat(900)
    );
    assert_eq!(stack.post(&fits, &[]).await.status, 200);
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_401_with_a_bearer_challenge() {
    let stack = HttpStack::start("auth_token = \"s3cret\"").await;
    let one = r#"{"jsonrpc":"2.0","method":"echo","params":["x"],"id":1}"#;
    for extra in [&[][..], &["-H", "Authorization: Bearer wrong"][..]] {
        let answer = stack.post(one, extra).await;
        assert_eq!(answer.status, 401, "{extra:?}: {answer:?}");
        assert_eq!(answer.header("www-authenticate"), Some("Bearer"));
    }
    let answer = stack
        .post(one, &["-H", "Authorization: Bearer s3cret"])
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(json(&answer.body)["result"], serde_json::json!(["x"]));
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn cors_from_allowed_origins_and_403_for_others() {
    let stack = HttpStack::start("allowed_origins = [\"http://app.example\"]").await;
    let one = r#"{"jsonrpc":"2.0","method":"echo","params":["x"],"id":1}"#;
    // Preflight from an allowed origin.
    let answer = curl(&[
        "-X",
        "OPTIONS",
        "-H",
        "Origin: http://app.example",
        "-H",
        "Access-Control-Request-Method: POST",
        "-H",
        "Access-Control-Request-Headers: content-type, authorization",
        &stack.url,
    ])
    .await;
    assert_eq!(answer.status, 204, "{answer:?}");
    assert_eq!(
        answer.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    assert_eq!(answer.header("vary"), Some("Origin"));
    let methods = answer.header("access-control-allow-methods").unwrap_or("");
    assert!(methods.contains("POST"), "{methods}");
    let headers = answer.header("access-control-allow-headers").unwrap_or("");
    for h in ["content-type", "authorization", "traceparent"] {
        assert!(headers.contains(h), "{headers}");
    }
    // The request itself from that origin: the origin echoed.
    let answer = stack.post(one, &["-H", "Origin: http://app.example"]).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(
        answer.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    // A refused origin: 403, no CORS headers, preflight and request alike.
    let answer = curl(&[
        "-X",
        "OPTIONS",
        "-H",
        "Origin: http://evil.example",
        "-H",
        "Access-Control-Request-Method: POST",
        &stack.url,
    ])
    .await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.header("access-control-allow-origin"), None);
    let answer = stack
        .post(one, &["-H", "Origin: http://evil.example"])
        .await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.header("access-control-allow-origin"), None);
    // A refused Host is 403 too (DNS-rebinding defence).
    let answer = stack.post(one, &["-H", "Host: evil.example"]).await;
    assert_eq!(answer.status, 403, "{answer:?}");
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn the_rate_limit_is_429_with_retry_after() {
    // One request per second per client address, no burst: the second of
    // two quick requests is over the limit whatever the machine's speed
    // (a refill takes a full second).
    let stack = HttpStack::start("ip_rate_per_second = 1\nip_rate_burst = 1").await;
    let one = r#"{"jsonrpc":"2.0","method":"echo","params":["x"],"id":1}"#;
    let mut statuses = Vec::new();
    let mut limited = None;
    for _ in 0..5 {
        let answer = stack.post(one, &[]).await;
        statuses.push(answer.status);
        if answer.status == 429 {
            limited = Some(answer);
            break;
        }
    }
    let limited = limited.unwrap_or_else(|| panic!("never limited: {statuses:?}"));
    assert_eq!(limited.header("retry-after"), Some("1"));
    assert_eq!(json(&limited.body)["error"]["code"], -32006);
    assert_eq!(statuses[0], 200, "{statuses:?}");
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn keep_alive_and_h2c_with_curl() {
    let stack = HttpStack::start("").await;
    let one = r#"{"jsonrpc":"2.0","method":"echo","params":["x"],"id":1}"#;
    // Two requests in one curl run: the second reuses the connection.
    let out = tokio::process::Command::new(common::curl::require_curl())
        .args(["-sS", "-o", "/dev/null", "-o", "/dev/null"])
        .args(["-w", "%{http_code} %{num_connects}\n"])
        .args(["-H", "Content-Type: application/json", "--data-binary", one])
        .args([&stack.url, &stack.url])
        .output()
        .await
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text, "200 1\n200 0\n", "{out:?}");
    // HTTP/2 by prior knowledge (h2c).
    let answer = stack.post(one, &["--http2-prior-knowledge"]).await;
    assert_eq!(answer.version, "HTTP/2", "{answer:?}");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(json(&answer.body)["result"], serde_json::json!(["x"]));
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn an_http2_client_multiplexes_100_calls_on_one_connection() {
    use http_body_util::{BodyExt, Full};

    let stack = HttpStack::start("").await;
    let (uri, sender) = h2c(&stack.url).await;
    // Every call is sent before any answer is read: all 100 are open at
    // once on the one connection.
    let calls: Vec<_> = (0..100)
        .map(|i| {
            let mut sender = sender.clone();
            let body = format!(r#"{{"jsonrpc":"2.0","method":"echo","params":[{i}],"id":{i}}}"#);
            let req = hyper::Request::post(uri.clone())
                .header("content-type", "application/json")
                .body(Full::new(bytes::Bytes::from(body)))
                .expect("request");
            tokio::spawn(async move { sender.send_request(req).await })
        })
        .collect();
    for (i, call) in calls.into_iter().enumerate() {
        let response = tokio::time::timeout(common::STEP * 3, call)
            .await
            .expect("answer in time")
            .expect("task")
            .expect("response");
        assert_eq!(response.status(), 200);
        assert_eq!(response.version(), hyper::Version::HTTP_2);
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let reply = json(std::str::from_utf8(&body).expect("UTF-8"));
        assert_eq!(reply["id"], i);
        assert_eq!(reply["result"], serde_json::json!([i]));
    }
    stack.gateway.shutdown().await;
}

/// A `HEAD` gets the head of what a `GET` would get (here `405` with
/// `Allow` and the length of its text) and no body, over HTTP/2 too,
/// where hyper sends whatever body the answer has.
#[tokio::test]
async fn head_gets_no_body_over_http2() {
    use http_body_util::{BodyExt, Empty};

    let stack = HttpStack::start("").await;
    let (uri, mut sender) = h2c(&stack.url).await;
    let req = hyper::Request::head(uri.clone())
        .body(Empty::<bytes::Bytes>::new())
        .expect("request");
    let response = tokio::time::timeout(common::STEP * 3, sender.send_request(req))
        .await
        .expect("answer in time")
        .expect("response");
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST, OPTIONS");
    assert_eq!(response.headers()["content-length"], "18");
    let body = tokio::time::timeout(common::STEP * 3, response.into_body().collect())
        .await
        .expect("body in time")
        .expect("body")
        .to_bytes();
    assert!(body.is_empty(), "a HEAD answer has no body: {body:?}");
    stack.gateway.shutdown().await;
}

/// An HTTP/2 connection carries at most `max_in_flight` streams at once:
/// the server announces it in its SETTINGS (read by the `h2` crate's
/// client), and calls beyond it wait for a free stream, then complete.
#[tokio::test]
async fn http2_streams_are_capped_at_max_in_flight_and_more_calls_wait() {
    const CAP: usize = 4;
    const CALLS: usize = 12;
    let stack = HttpStack::start(&format!("max_in_flight = {CAP}")).await;
    let uri: http::Uri = stack.url.parse().expect("uri");
    let authority = uri.authority().expect("authority").to_string();
    let tcp = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    let (sender, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let call = |sender: h2::client::SendRequest<bytes::Bytes>, id: usize, method: &'static str| {
        let uri = uri.clone();
        async move {
            let mut sender = sender.ready().await?;
            let req = http::Request::post(uri)
                .header("content-type", "application/json")
                .body(())
                .expect("request");
            let (response, mut body) = sender.send_request(req, false)?;
            let params = if method == "sleep" {
                r#"{"ms":200}"#.to_owned()
            } else {
                format!("[{id}]")
            };
            let text =
                format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params},"id":{id}}}"#);
            body.send_data(bytes::Bytes::from(text), true)?;
            let response = response.await?;
            let status = response.status();
            let mut data = response.into_body();
            let mut out = Vec::new();
            while let Some(chunk) = data.data().await {
                let chunk = chunk?;
                let _ = data.flow_control().release_capacity(chunk.len());
                out.extend_from_slice(&chunk);
            }
            Ok::<_, h2::Error>((status, out))
        }
    };
    // The first answer comes after the server's SETTINGS: the cap is known.
    let first = tokio::time::timeout(common::STEP, call(sender.clone(), 0, "echo"))
        .await
        .expect("answer in time")
        .expect("first call");
    assert_eq!(first.0, 200);
    assert_eq!(
        sender.current_max_send_streams(),
        CAP,
        "SETTINGS_MAX_CONCURRENT_STREAMS is the listener's max_in_flight"
    );
    // Three times the cap at once: the client holds the extra streams
    // until earlier ones end; none is refused.
    let calls: Vec<_> = (1..=CALLS)
        .map(|i| tokio::spawn(call(sender.clone(), i, "sleep")))
        .collect();
    for (i, task) in calls.into_iter().enumerate() {
        let (status, body) = tokio::time::timeout(common::STEP * 3, task)
            .await
            .expect("answer in time")
            .expect("task")
            .unwrap_or_else(|e| panic!("call {}: {e}", i + 1));
        assert_eq!(status, 200);
        let reply = json(std::str::from_utf8(&body).expect("UTF-8"));
        assert_eq!(reply["id"], i + 1, "{reply}");
        assert!(reply.get("result").is_some(), "{reply}");
    }
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn a_route_to_a_per_client_upstream_is_a_config_problem() {
    let toml = r#"
[listeners.web]
dialect = "jsonrpc-http"
address = "127.0.0.1:0"
path = "/rpc"

[upstreams.mine]
dialect = "ndjson"
socket = "/tmp/never.sock"
mode = "per-client"

[[routes]]
listener = "web"
upstream = "mine"
"#;
    let err = Config::from_toml(toml).expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("listeners.web"), "{text}");
    assert!(text.contains("per-client"), "{text}");
}

#[tokio::test]
async fn a_request_that_arrives_while_shutting_down_is_503() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let stack = HttpStack::start("").await;
    let authority = stack
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("authority")
        .to_owned();
    let one = r#"{"jsonrpc":"2.0","method":"echo","params":["x"],"id":1}"#;
    let mut tcp = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    let head = format!(
        "POST /rpc HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        one.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("head");
    // `100 Continue` comes once the request is being served and its body
    // asked for: then shutdown begins, then the body arrives.
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
        let n = tokio::time::timeout(common::STEP, tcp.read(&mut buf))
            .await
            .expect("100 Continue in time")
            .expect("read");
        assert!(n > 0, "closed before 100 Continue");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 100"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    stack.gateway.shutdown_token().cancel();
    tcp.write_all(one.as_bytes()).await.expect("body");
    let mut rest = Vec::new();
    // The answer, then the connection closes (shutdown).
    let read = tokio::time::timeout(common::STEP, tcp.read_to_end(&mut rest)).await;
    let text = String::from_utf8_lossy(&rest);
    assert!(read.is_ok(), "no answer in time: {text}");
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn tls_offers_h2_by_alpn_on_an_http_address_only() {
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let certified = rcgen::generate_simple_self_signed(names).expect("rcgen");
    let pems = tempfile::tempdir().expect("tempdir");
    let (cert, key) = (pems.path().join("cert.pem"), pems.path().join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).expect("write cert");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("write key");
    let tls = format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"",
        cert.display(),
        key.display()
    );
    let stack = HttpStack::start(&tls).await;
    let https = stack.url.clone();
    let one = r#"{"jsonrpc":"2.0","method":"echo","params":["x"],"id":1}"#;
    let answer = curl(&[
        "-k",
        "--http2",
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        one,
        &https,
    ])
    .await;
    assert_eq!(answer.version, "HTTP/2", "{answer:?}");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(json(&answer.body)["result"], serde_json::json!(["x"]));
    stack.gateway.shutdown().await;

    // A WebSocket-only TLS address keeps offering HTTP/1.1 alone.
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let _daemon = Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    let toml = common::stack_toml(&socket, &tls, "");
    let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = app::bind(cfg).await.expect("bind");
    let url = bound
        .ws_url("public")
        .expect("url")
        .replacen("wss://", "https://", 1);
    let gateway = bound.spawn();
    let answer = curl(&["-k", "--http2", &url]).await;
    assert_eq!(answer.version, "HTTP/1.1", "{answer:?}");
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_read_timeout() {
    use tokio::io::AsyncReadExt;

    let stack = HttpStack::start("header_read_timeout_ms = 300").await;
    let authority = stack
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("authority")
        .to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(common::STEP, tcp.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "still open: {read:?}"
    );
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn switchyard_call_speaks_http() {
    let stack = HttpStack::start("auth_token = \"s3cret\"").await;
    let timeout = std::time::Duration::from_secs(30);
    let reply = switchyard::client::call(
        &stack.url,
        "subtract",
        Some("[42,23]"),
        Some("s3cret"),
        None,
        timeout,
    )
    .await
    .expect("reply");
    assert_eq!(
        json(&reply),
        serde_json::json!({"jsonrpc":"2.0","result":19,"id":1})
    );
    // A refusal is an error naming the status.
    let refused =
        switchyard::client::call(&stack.url, "subtract", Some("[1,1]"), None, None, timeout)
            .await
            .expect_err("no token");
    assert!(refused.to_string().contains("HTTP 401"), "{refused}");
    stack.gateway.shutdown().await;
}

/// An HTTP/2 connection by prior knowledge (h2c) to `url`'s address, its
/// driver spawned: the URL as a URI, and the connection's sender.
async fn h2c<B>(url: &str) -> (hyper::Uri, hyper::client::conn::http2::SendRequest<B>)
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let uri: hyper::Uri = url.parse().expect("uri");
    let authority = uri.authority().expect("authority").to_string();
    let tcp = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    (uri, sender)
}
