//! Server-Sent Events for topics on the `jsonrpc-http` listener, with the
//! real `curl` as the client: `GET <path>/events?topic=…` streams each
//! event of the reference JSON-RPC WebSocket daemon (upstream `events`,
//! which publishes its notification M as topic `events.M`), with the
//! listener's checks and the subscribe's errors as HTTP statuses.

mod common;

use std::process::Stdio;

use serde_json::{json, Value};
use switchyard::app::{self, Running};
use switchyard::config::Config;
use switchyard::daemon::ws::{WsDaemon, WsDialect};
use tokio::io::{AsyncBufReadExt, BufReader};

use common::curl::{curl, require_curl};

struct Events {
    _upstream: WsDaemon,
    gateway: Running,
    /// `http://127.0.0.1:PORT/rpc`.
    url: String,
}

impl Events {
    async fn start(listener_extra: &str) -> Events {
        let upstream = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::JsonRpc)
            .await
            .expect("json-rpc upstream");
        let toml = format!(
            r#"
[listeners.web]
dialect = "jsonrpc-http"
address = "127.0.0.1:0"
path = "/rpc"
{listener_extra}

[upstreams.events]
dialect = "jsonrpc-ws"
url = "{}"
pool_size = 1

[[routes]]
listener = "web"
upstream = "events"
"#,
            upstream.url()
        );
        let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let bound = app::bind(cfg).await.expect("bind");
        let url = bound
            .ws_url("web")
            .expect("url")
            .replacen("ws://", "http://", 1);
        let gateway = bound.spawn();
        common::wait_connected(&gateway, "events").await;
        Events {
            _upstream: upstream,
            gateway,
            url,
        }
    }

    /// Makes the daemon send notification `method` with `params`.
    async fn push(&self, method: &str, params: Value) {
        let call = json!({"jsonrpc":"2.0","method":"push","params":{"method":method,"params":params},"id":1});
        let answer = curl(&[
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &call.to_string(),
            &self.url,
        ])
        .await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
}

/// A running `curl -N` on an event stream, read line by line.
struct Stream {
    _child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Stream {
    /// `curl -N -i` with `args` (the URL among them).
    async fn open(args: &[&str]) -> Stream {
        let mut child = tokio::process::Command::new(require_curl())
            .args(["-sS", "-N", "-i"])
            .args(args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("curl runs");
        let stdout = child.stdout.take().expect("stdout");
        Stream {
            _child: child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    async fn line(&mut self) -> String {
        tokio::time::timeout(common::STEP, self.lines.next_line())
            .await
            .expect("a line in time")
            .expect("read")
            .expect("stream still open")
    }

    /// The status line and headers (lower-case names), up to the blank line.
    async fn head(&mut self) -> Vec<String> {
        let mut head = Vec::new();
        loop {
            let line = self.line().await;
            let line = line.trim_end_matches('\r').to_ascii_lowercase();
            if line.is_empty() {
                return head;
            }
            head.push(line);
        }
    }

    /// The next event: its `event:` name and its data, joined.
    async fn event(&mut self) -> (String, String) {
        let (mut name, mut data) = (String::new(), Vec::new());
        loop {
            let line = self.line().await;
            if line.is_empty() {
                if !data.is_empty() {
                    return (name, data.join("\n"));
                }
                continue;
            }
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_owned();
            } else if let Some(d) = line.strip_prefix("data: ") {
                data.push(d.to_owned());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_source_stream_carries_each_event_of_its_topics() {
    let stack = Events::start("").await;
    let events = format!(
        "{}/events?topic=events.tick&topic=events.other.*",
        stack.url
    );
    let mut stream = Stream::open(&[&events]).await;
    // The head comes once the subscription is made.
    let head = stream.head().await;
    assert!(head[0].contains(" 200"), "{head:?}");
    assert!(
        head.iter().any(|h| h == "content-type: text/event-stream"),
        "{head:?}"
    );
    stack.push("tick", json!({"n": 1})).await;
    stack.push("unrelated", json!({"n": 2})).await;
    stack.push("other.thing", json!({"n": 3})).await;
    let (name, data) = stream.event().await;
    assert_eq!(name, "rpc.notification");
    let data: Value = serde_json::from_str(&data).expect("JSON data");
    assert_eq!(data, json!({"topic": "events.tick", "data": {"n": 1}}));
    // `unrelated` matches no topic of the stream: the next is `other.thing`.
    let (_, data) = stream.event().await;
    let data: Value = serde_json::from_str(&data).expect("JSON data");
    assert_eq!(
        data,
        json!({"topic": "events.other.thing", "data": {"n": 3}})
    );
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn an_event_stream_is_checked_like_any_request() {
    let stack =
        Events::start("allowed_origins = [\"http://app.example\"]\nauth_token = \"s3cret\"").await;
    let events = format!("{}/events?topic=events.tick", stack.url);
    let bearer = "Authorization: Bearer s3cret";
    // No token: 401 with the challenge.
    let answer = curl(&[&events]).await;
    assert_eq!(answer.status, 401, "{answer:?}");
    assert_eq!(answer.header("www-authenticate"), Some("Bearer"));
    // A refused origin: 403, no CORS headers.
    let answer = curl(&["-H", bearer, "-H", "Origin: http://evil.example", &events]).await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.header("access-control-allow-origin"), None);
    // No topic, or an invalid pattern: 400 with the subscribe's error.
    let answer = curl(&["-H", bearer, &format!("{}/events", stack.url)]).await;
    assert_eq!(answer.status, 400, "{answer:?}");
    let answer = curl(&["-H", bearer, &format!("{}/events?topic=a..b", stack.url)]).await;
    assert_eq!(answer.status, 400, "{answer:?}");
    let error: Value = serde_json::from_str(&answer.body).expect("JSON error");
    assert_eq!(error["error"]["code"], -32602, "{error}");
    // Other methods: 405 with Allow.
    let answer = curl(&["-X", "POST", "-H", bearer, &events]).await;
    assert_eq!(answer.status, 405, "{answer:?}");
    assert_eq!(answer.header("allow"), Some("GET, OPTIONS"));
    // An allowed origin with the token gets the stream, with CORS.
    let mut stream =
        Stream::open(&["-H", bearer, "-H", "Origin: http://app.example", &events]).await;
    let head = stream.head().await;
    assert!(head[0].contains(" 200"), "{head:?}");
    assert!(
        head.iter()
            .any(|h| h == "access-control-allow-origin: http://app.example"),
        "{head:?}"
    );
    stack.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_does_not_read_loses_events_and_is_closed_as_a_slow_consumer() {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let stack = Events::start(
        "outbox_capacity = 8\nmax_message_bytes = 65536\noutbox_max_bytes = 65536\nslow_consumer_timeout_ms = 300",
    )
    .await;
    let authority = stack
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("authority")
        .to_owned();
    // A client with a tiny receive window that asks for the stream and
    // then never reads.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut tcp = socket
        .connect(authority.parse().expect("addr"))
        .await
        .expect("connect");
    let head = format!("GET /rpc/events?topic=events.big HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.expect("request");
    // Wait for the head (the subscription is made), reading only it.
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(common::STEP, tcp.read(&mut byte))
            .await
            .expect("head in time")
            .expect("read");
        assert_eq!(n, 1, "closed before the head");
        got.push(byte[0]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    // Events of 48 KiB until the stream is dropped as a slow consumer.
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let big = "x".repeat(48 * 1024);
    let slow = [("listener", "web"), ("limit", "slow_consumer_timeout_ms")];
    let limit = "switchyard_limit_rejections_total";
    let mut pushed = 0;
    while common::try_metric_value(&stack.gateway, limit, &slow).unwrap_or(0.0) < 1.0 {
        assert!(pushed < 2000, "never a slow consumer after {pushed} events");
        let call = json!({"jsonrpc":"2.0","method":"push","params":{"method":"big","params":{"s":big}},"id":pushed});
        let req = hyper::Request::post(stack.url.as_str())
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from(call.to_string())))
            .expect("request");
        let response = client.request(req).await.expect("push");
        assert_eq!(response.status(), 200);
        response.into_body().collect().await.expect("body");
        pushed += 1;
    }
    // Events that did not fit were dropped and counted.
    let dropped = common::try_metric_value(
        &stack.gateway,
        "switchyard_events_dropped_total",
        &[("reason", "slow_consumer")],
    );
    assert!(dropped.unwrap_or(0.0) >= 1.0, "dropped: {dropped:?}");
    // The connection is closed: what was sent reads out, then the end.
    let mut rest = Vec::new();
    let end = tokio::time::timeout(common::STEP * 3, tcp.read_to_end(&mut rest)).await;
    assert!(
        end.is_ok(),
        "connection still open after {} bytes",
        rest.len()
    );
    stack.gateway.shutdown().await;
}
