//! Protection before and around the upgrade, probed with raw sockets:
//! unfinished HTTP requests are timed out and count against the connection
//! caps, unparsable Origin/Host headers are refused, tokens are
//! percent-decoded and the `Bearer` scheme is case-insensitive, and holon
//! heartbeats never count against rate limits. The handshake itself is
//! checked too: its `101`, and the refusal of each kind of bad upgrade.

mod common;

use std::time::Duration;

use common::{json, Stack, STEP};
use switchyard::daemon::DaemonOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a test waits for the server to close a connection it should
/// close (generous: the machine may be busy).
const CLOSE_WAIT: Duration = Duration::from_secs(20);

/// `host:port` and path of a `ws://` URL.
fn authority_and_path(url: &str) -> (String, String) {
    let rest = url.strip_prefix("ws://").expect("ws URL");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    (authority.to_owned(), format!("/{path}"))
}

/// Sends a whole upgrade request with `extra` raw header lines and returns
/// the status code of the answer.
async fn raw_upgrade(url: &str, target: &str, extra: &[&[u8]]) -> u16 {
    let (authority, _) = authority_and_path(url);
    raw_upgrade_to(url, target, authority.as_bytes(), extra).await
}

/// [`raw_upgrade`] with this raw `Host` value.
async fn raw_upgrade_to(url: &str, target: &str, host: &[u8], extra: &[&[u8]]) -> u16 {
    let (authority, _) = authority_and_path(url);
    let mut tcp = TcpStream::connect(&authority).await.expect("connect");
    let mut request = [
        format!("GET {target} HTTP/1.1\r\nHost: ").as_bytes(),
        host,
        b"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n",
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
    ]
    .concat();
    for line in extra {
        request.extend_from_slice(line);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    tcp.write_all(&request).await.expect("write");
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(STEP, tcp.read(&mut buf))
            .await
            .expect("timed out waiting for the answer")
            .expect("read");
        assert!(n > 0, "closed without an answer");
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    line.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {line}"))
}

/// A gateway like [`Stack`] whose config text `edit` changes first; the
/// daemon and temp dir live as long as the returned guard.
async fn start_edited(
    listener_extra: &str,
    edit: impl Fn(String) -> String,
) -> (
    tempfile::TempDir,
    switchyard::daemon::Daemon,
    switchyard::app::Running,
    String,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let daemon = switchyard::daemon::Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    let toml = edit(common::stack_toml(&socket, listener_extra, ""));
    let cfg = switchyard::config::Config::from_toml(&toml).expect("config");
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let gateway = bound.spawn();
    common::wait_connected(&gateway, "daemon").await;
    (dir, daemon, gateway, url)
}

/// A connection closed for its unfinished head, `took` after it was
/// opened: not before the configured 300 ms, and well before the 10 s
/// default (a listener that ignored the setting would take 10 s).
fn assert_closed_at_the_header_timeout(took: Duration) {
    assert!(
        took >= Duration::from_millis(300),
        "closed after {took:?}, before header_read_timeout_ms = 300"
    );
    assert!(
        took < Duration::from_secs(6),
        "closed after {took:?}: the 300 ms setting was not applied (default 10 s)"
    );
}

/// Opens a connection and sends half a request line.
async fn half_request(authority: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(authority).await.expect("connect");
    tcp.write_all(b"GET /rpc HT").await.expect("write");
    tcp
}

/// Waits until the server ends the connection (EOF or reset): true, or
/// false if it is still open after `wait`.
async fn closed_by_server(tcp: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            // An error page before the close is fine.
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn a_half_sent_request_is_closed_after_the_header_read_timeout() {
    let stack = Stack::start("header_read_timeout_ms = 300", "", DaemonOptions::default()).await;
    let (authority, _) = authority_and_path(&stack.url);
    let started = tokio::time::Instant::now();
    let mut tcp = half_request(&authority).await;
    assert!(
        closed_by_server(&mut tcp, CLOSE_WAIT).await,
        "a half-sent request must not be held open"
    );
    assert_closed_at_the_header_timeout(started.elapsed());
    // A connection that sends nothing at all is closed too.
    let started = tokio::time::Instant::now();
    let mut silent = TcpStream::connect(&authority).await.expect("connect");
    assert!(closed_by_server(&mut silent, CLOSE_WAIT).await);
    assert_closed_at_the_header_timeout(started.elapsed());
    // A real client is unaffected.
    let mut ws = stack.client().await;
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#,
    )
    .await;
    assert_eq!(json(&common::recv(&mut ws).await)["result"][0], 1);
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn unfinished_requests_count_against_the_per_ip_cap() {
    // A long header-read timeout: only the cap can close the fourth in time.
    let stack = Stack::start(
        "max_connections_per_ip = 3\nheader_read_timeout_ms = 120000",
        "",
        DaemonOptions::default(),
    )
    .await;
    let (authority, _) = authority_and_path(&stack.url);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(half_request(&authority).await);
    }
    // The fourth is refused at once: closed by the server while the first
    // three are still held.
    let mut fourth = half_request(&authority).await;
    assert!(
        closed_by_server(&mut fourth, CLOSE_WAIT).await,
        "over the per-IP cap"
    );
    for tcp in &mut held {
        let mut buf = [0u8; 16];
        let still_open = tokio::time::timeout(Duration::from_millis(50), tcp.read(&mut buf)).await;
        assert!(still_open.is_err(), "the first three are held");
    }
    let refused = stack.counter(
        "switchyard_connections_rejected_total",
        &[("reason", "limit")],
    );
    assert!(refused >= 1.0, "counted: {refused}");
    // Once they are gone, a real client gets in.
    drop(held);
    let mut ws = None;
    for _ in 0..100 {
        match tokio_tungstenite::connect_async(&stack.url).await {
            Ok((c, _)) => {
                ws = Some(c);
                break;
            }
            // The server may not have seen the three go yet.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let mut ws = ws.expect("a legitimate client connects once the places are free");
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}"#,
    )
    .await;
    assert_eq!(json(&common::recv(&mut ws).await)["result"][0], 2);
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn unfinished_requests_count_against_the_listener_cap() {
    let stack = Stack::start(
        "max_connections = 2\nheader_read_timeout_ms = 120000",
        "",
        DaemonOptions::default(),
    )
    .await;
    let (authority, _) = authority_and_path(&stack.url);
    let _a = half_request(&authority).await;
    let _b = half_request(&authority).await;
    let mut third = half_request(&authority).await;
    assert!(closed_by_server(&mut third, CLOSE_WAIT).await);
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn an_unparsable_origin_or_host_is_refused() {
    let stack = Stack::start("", "", DaemonOptions::default()).await;
    let (_, path) = authority_and_path(&stack.url);
    assert_eq!(raw_upgrade(&stack.url, &path, &[]).await, 101);
    assert_eq!(
        raw_upgrade(&stack.url, &path, &[b"Origin: http://\xe9vil.com"]).await,
        403,
        "non-ASCII Origin"
    );
    assert_eq!(
        raw_upgrade(&stack.url, &path, &[b"Origin: http://localhost\xff"]).await,
        403,
        "non-UTF-8 Origin"
    );
    assert_eq!(
        raw_upgrade_to(&stack.url, &path, b"127.0.0.1\xe9", &[]).await,
        403,
        "non-ASCII Host"
    );
    stack.gateway.shutdown().await;
}

/// Sends `head` (the request line and headers, without the blank line)
/// and returns the answer's head and body (read up to its
/// `Content-Length`).
async fn raw_answer(url: &str, head: &str) -> (String, String) {
    let (authority, _) = authority_and_path(url);
    let mut tcp = TcpStream::connect(&authority).await.expect("connect");
    tcp.write_all(format!("{head}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if body.len() >= length {
                return (head.to_owned(), body.to_owned());
            }
        }
        let n = tokio::time::timeout(STEP, tcp.read(&mut buf))
            .await
            .expect("timed out waiting for the answer")
            .expect("read");
        assert!(n > 0, "closed without a whole answer: {text}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// The WebSocket handshake: a valid upgrade gets its `101` with the
/// RFC 6455 accept key and the subprotocol as offered; a request that is
/// not a valid upgrade gets the status and body of its refusal.
#[tokio::test]
async fn the_handshake_answers_and_refuses_as_rfc_6455_asks() {
    let stack = Stack::start("", "", DaemonOptions::default()).await;
    let (authority, path) = authority_and_path(&stack.url);
    let base = format!("GET {path} HTTP/1.1\r\nHost: {authority}");
    let key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==";
    let upgrade = "Connection: keep-alive, Upgrade\r\nUpgrade: WebSocket";
    let (head, _) = raw_answer(
        &stack.url,
        &format!(
            "{base}\r\n{upgrade}\r\n{key}\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Protocol: chat, jsonrpc"
        ),
    )
    .await;
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    // RFC 6455 §1.3's example key and its accept value.
    assert!(
        head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    assert!(
        head.lines().any(|l| l == "sec-websocket-protocol: jsonrpc"),
        "{head}"
    );
    assert!(head.contains("upgrade: websocket"), "{head}");

    let refusals = [
        (
            format!("{base}\r\nUpgrade: websocket\r\n{key}\r\nSec-WebSocket-Version: 13"),
            "400",
            "Connection header did not include 'upgrade'",
        ),
        (
            format!("{base}\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n{key}\r\nSec-WebSocket-Version: 13"),
            "400",
            "`Upgrade` header did not include 'websocket'",
        ),
        (
            format!("{base}\r\n{upgrade}\r\nSec-WebSocket-Version: 13"),
            "400",
            "`Sec-WebSocket-Key` header missing",
        ),
        (
            format!("{base}\r\n{upgrade}\r\n{key}\r\nSec-WebSocket-Version: 8"),
            "400",
            "`Sec-WebSocket-Version` header did not include '13'",
        ),
        (
            format!("POST {path} HTTP/1.1\r\nHost: {authority}\r\n{upgrade}\r\n{key}\r\nContent-Length: 0"),
            "405",
            "",
        ),
    ];
    for (request, status, body) in refusals {
        let (head, got) = raw_answer(&stack.url, &request).await;
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status}")),
            "{request}: {head}"
        );
        assert_eq!(got, body, "{request}");
    }
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn an_unparsable_host_is_refused_without_a_host_allow_list() {
    // Not bound to loopback and no allowed_hosts: any Host name passes, but
    // one that cannot be read or parsed cannot be judged at all.
    let (_dir, daemon, gateway, url) =
        start_edited("allowed_origins = [\"https://app.example.com\"]", |toml| {
            toml.replace("127.0.0.1:0", "0.0.0.0:0")
        })
        .await;
    let url = url.replace("0.0.0.0", "127.0.0.1");
    let (_, path) = authority_and_path(&url);
    assert_eq!(
        raw_upgrade_to(&url, &path, b"gw.example.com", &[]).await,
        101
    );
    for host in [
        &b"gw.\xe9xample.com"[..],
        b"gw.example.com:http",
        b"gw example",
    ] {
        assert_eq!(
            raw_upgrade_to(&url, &path, host, &[]).await,
            403,
            "{}",
            String::from_utf8_lossy(host)
        );
    }
    gateway.shutdown().await;
    daemon.stop().await;
}

#[tokio::test]
async fn an_unreadable_origin_is_refused_by_an_allow_list() {
    // An unreadable Origin cannot be compared with the list: refused.
    let stack = Stack::start(
        "allowed_origins = [\"https://app.example.com\"]",
        "",
        DaemonOptions::default(),
    )
    .await;
    let (_, path) = authority_and_path(&stack.url);
    assert_eq!(
        raw_upgrade(&stack.url, &path, &[b"Origin: https://app.example.com"]).await,
        101
    );
    assert_eq!(
        raw_upgrade(&stack.url, &path, &[b"Origin: https://app.\xe9xample.com"]).await,
        403
    );
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn tokens_are_percent_decoded_and_the_scheme_is_case_insensitive() {
    let stack = Stack::start("auth_token = \"s3cr+t/=&x\"", "", DaemonOptions::default()).await;
    let (_, path) = authority_and_path(&stack.url);
    let encoded = format!("{path}?token=s3cr%2Bt%2F%3D%26x");
    assert_eq!(raw_upgrade(&stack.url, &encoded, &[]).await, 101);
    let other_param_first = format!("{path}?v=1&token=s3cr%2bt%2f%3d%26x");
    assert_eq!(raw_upgrade(&stack.url, &other_param_first, &[]).await, 101);
    // A `+` in a query is a space: the raw token must be encoded.
    let raw = format!("{path}?token=s3cr+t/=");
    assert_eq!(raw_upgrade(&stack.url, &raw, &[]).await, 401);
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let header = format!("Authorization: {scheme} s3cr+t/=&x");
        assert_eq!(
            raw_upgrade(&stack.url, &path, &[header.as_bytes()]).await,
            101,
            "{scheme}"
        );
    }
    assert_eq!(
        raw_upgrade(&stack.url, &path, &[b"Authorization: Basic s3cr+t/=&x"]).await,
        401
    );
    assert_eq!(
        raw_upgrade(&stack.url, &path, &[b"Authorization: Bearer wrong"]).await,
        401
    );
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn holon_heartbeats_never_count_against_rate_limits() {
    let (_dir, daemon, gateway, url) = start_edited(
        "rate_per_second = 1\nrate_burst = 1\nabuse_threshold = 2",
        |toml| toml.replace("dialect = \"jsonrpc-ws\"", "dialect = \"holon-rpc\""),
    )
    .await;
    let mut ws = common::connect(&url).await;
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":{"a":1},"id":"1"}"#,
    )
    .await;
    assert_eq!(json(&common::recv(&mut ws).await)["result"]["a"], 1);
    // The budget is spent; heartbeats still get `{}`, and many of them in
    // a row are no abuse either.
    for i in 1..=5 {
        common::send(
            &mut ws,
            &format!(r#"{{"jsonrpc":"2.0","method":"rpc.heartbeat","params":{{}},"id":"h{i}"}}"#),
        )
        .await;
        let v = json(&common::recv(&mut ws).await);
        assert_eq!(v["id"], format!("h{i}"), "{v}");
        assert_eq!(v["result"], serde_json::json!({}), "{v}");
    }
    gateway.shutdown().await;
    daemon.stop().await;
}

#[test]
fn a_zero_header_read_timeout_is_a_config_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = common::stack_toml(&dir.path().join("d.sock"), "header_read_timeout_ms = 0", "");
    let error = switchyard::config::Config::from_toml(&toml).expect_err("must be rejected");
    let text = error.to_string();
    assert!(
        text.contains("listeners.public.header_read_timeout_ms: must be at least 1"),
        "{text}"
    );
}
