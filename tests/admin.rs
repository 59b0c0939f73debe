//! The admin listener over real sockets: `/metrics` parsed with a real
//! Prometheus text-format parser, the probes through upstream loss,
//! recovery and shutdown, and the status page (also in headless Chromium).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::http::Reply;
use common::*;
use prometheus_parse::{Sample, Scrape, Value};
use switchyard::app::{self, Running};
use switchyard::config::Config;
use switchyard::daemon::{Daemon, DaemonOptions};
use tokio::net::TcpStream;

/// A gateway with its admin listener on port 0 in front of a reference
/// daemon; the upstream is `required` with a single pooled connection, so
/// readiness and connection counts are exact.
struct AdminStack {
    _dir: tempfile::TempDir,
    daemon: Option<Daemon>,
    socket: PathBuf,
    url: String,
    admin: SocketAddr,
    gateway: Running,
}

impl AdminStack {
    async fn start() -> AdminStack {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("daemon.sock");
        let daemon = Daemon::start(&socket, DaemonOptions::default())
            .await
            .expect("daemon");
        let toml = format!(
            "{}\n[admin]\naddress = \"127.0.0.1:0\"\n",
            stack_toml(&socket, "", "required = true\npool_size = 1")
        );
        let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let bound = app::bind(cfg).await.expect("bind");
        let url = bound.ws_url("public").expect("url");
        let admin = bound.admin_addr().expect("admin listener is enabled");
        let gateway = bound.spawn();
        assert_eq!(gateway.admin_addr(), Some(admin));
        wait_connected(&gateway, "daemon").await;
        AdminStack {
            _dir: dir,
            daemon: Some(daemon),
            socket,
            url,
            admin,
            gateway,
        }
    }
}

/// A GET of `path` on `addr`.
async fn get(addr: SocketAddr, path: &str) -> Reply {
    common::http::get(addr, path, &[]).await
}

/// [`get`] with this `Host` header.
async fn get_as(addr: SocketAddr, path: &str, host: &str) -> Reply {
    common::http::get(addr, path, &[("Host", host)]).await
}

/// GETs `/metrics` and parses it with the Prometheus text-format parser.
async fn scrape(addr: SocketAddr) -> Scrape {
    let reply = get(addr, "/metrics").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let ctype = reply.header("content-type").unwrap_or_default();
    assert!(ctype.starts_with("text/plain"), "content type {ctype:?}");
    Scrape::parse(reply.text().lines().map(|l| Ok(l.to_owned()))).expect("valid exposition format")
}

fn find<'a>(s: &'a Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
    s.samples
        .iter()
        .find(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
}

/// A counter's or gauge's value; absent counts as 0.
fn value(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    match find(s, metric, labels).map(|x| &x.value) {
        None => 0.0,
        Some(Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v)) => *v,
        Some(other) => panic!("{metric} is not a scalar: {other:?}"),
    }
}

/// A histogram's observation count, from its `+Inf` bucket (checked
/// against `_count`), and its `_sum`.
fn histogram(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> (f64, f64) {
    let Some(Value::Histogram(buckets)) = find(s, metric, labels).map(|x| &x.value) else {
        panic!("no histogram {metric} {labels:?}");
    };
    for pair in buckets.windows(2) {
        assert!(
            pair[0].count <= pair[1].count,
            "{metric}: buckets not cumulative"
        );
    }
    let inf = buckets.last().expect("buckets").count;
    let count = value(s, &format!("{metric}_count"), labels);
    assert_eq!(inf, count, "{metric}: +Inf bucket != _count");
    (count, value(s, &format!("{metric}_sum"), labels))
}

/// Polls `path` until it answers `status`.
async fn wait_status(addr: SocketAddr, path: &str, status: u16, within: Duration) -> Reply {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let reply = get(addr, path).await;
        if reply.status == status || tokio::time::Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const PUBLIC: (&str, &str) = ("listener", "public");
const DAEMON: (&str, &str) = ("upstream", "daemon");

#[tokio::test]
async fn metrics_move_by_exactly_the_traffic_sent() {
    let stack = AdminStack::start().await;
    let before = scrape(stack.admin).await;
    let mut ws = connect(&stack.url).await;
    for id in 1..=4 {
        let req = format!(r#"{{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":{id}}}"#);
        send(&mut ws, &req).await;
        assert_eq!(
            recv(&mut ws).await,
            format!(r#"{{"jsonrpc":"2.0","result":19,"id":{id}}}"#)
        );
    }
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"fail","params":{"code":-32001,"message":"no"},"id":5}"#,
    )
    .await;
    assert!(recv(&mut ws).await.contains("-32001"));
    send(&mut ws, r#"{"jsonrpc":"2.0","method":1,"id":6}"#).await;
    assert!(recv(&mut ws).await.contains("-32600"));
    let after = scrape(stack.admin).await;

    let delta = |metric: &str, labels: &[(&str, &str)]| {
        value(&after, metric, labels) - value(&before, metric, labels)
    };
    let ok = [PUBLIC, DAEMON, ("outcome", "ok")];
    assert_eq!(delta("switchyard_requests_total", &ok), 4.0);
    let failed = [PUBLIC, DAEMON, ("outcome", "upstream_error")];
    assert_eq!(delta("switchyard_requests_total", &failed), 1.0);
    let invalid = [
        ("dialect", "jsonrpc-ws"),
        ("side", "client"),
        ("reason", "invalid_request"),
    ];
    assert_eq!(delta("switchyard_protocol_errors_total", &invalid), 1.0);
    assert_eq!(
        delta("switchyard_connections_accepted_total", &[PUBLIC]),
        1.0
    );
    assert_eq!(value(&after, "switchyard_connections_open", &[PUBLIC]), 1.0);

    let (n0, _) = histogram(
        &before,
        "switchyard_request_duration_seconds",
        &[PUBLIC, DAEMON],
    );
    let (n1, sum) = histogram(
        &after,
        "switchyard_request_duration_seconds",
        &[PUBLIC, DAEMON],
    );
    assert_eq!(n1 - n0, 5.0, "one observation per forwarded request");
    assert!(sum > 0.0 && sum < 5.0 * STEP.as_secs_f64(), "sum {sum}");

    // Gauges and info series describe the running gateway.
    assert_eq!(
        value(&after, "switchyard_upstream_connections", &[DAEMON]),
        1.0
    );
    assert_eq!(
        value(&after, "switchyard_correlator_entries", &[DAEMON]),
        0.0
    );
    assert_eq!(value(&after, "switchyard_ready", &[]), 1.0);
    let info = [
        DAEMON,
        ("dialect", "ndjson"),
        ("mode", "shared"),
        ("required", "true"),
    ];
    assert_eq!(value(&after, "switchyard_upstream_info", &info), 1.0);

    // The traffic, limit and size families exist from the first scrape.
    for family in [
        "switchyard_messages_total",
        "switchyard_bytes_total",
        "switchyard_message_size_bytes",
        "switchyard_connections_rejected_total",
        "switchyard_limit_rejections_total",
        "switchyard_batch_size",
        "switchyard_upstream_in_flight",
        "switchyard_upstream_request_duration_seconds",
    ] {
        assert!(before.docs.contains_key(family), "{family} not exported");
    }
    let limit = [PUBLIC, ("limit", "max_batch_items")];
    assert!(find(&before, "switchyard_limit_rejections_total", &limit).is_some());
    // Every reason of the closed label sets, on the side that reports it.
    let series = [
        (
            "switchyard_errors_total",
            [PUBLIC, ("side", "upstream")],
            ("kind", "resource_exhausted"),
        ),
        (
            "switchyard_protocol_errors_total",
            [("side", "client"), ("dialect", "jsonrpc-ws")],
            ("reason", "message_too_large"),
        ),
        (
            "switchyard_protocol_errors_total",
            [("side", "upstream"), ("dialect", "ndjson")],
            ("reason", "response_too_large"),
        ),
        (
            "switchyard_dropped_messages_total",
            [("side", "client"), ("dialect", "jsonrpc-ws")],
            ("reason", "no_route"),
        ),
        (
            "switchyard_dropped_messages_total",
            [("side", "upstream"), ("dialect", "ndjson")],
            ("reason", "upstream_queue_full"),
        ),
    ];
    for (family, [a, b], c) in series {
        assert!(
            find(&before, family, &[a, b, c]).is_some(),
            "{family} {a:?} {b:?} {c:?}"
        );
    }
    let client_only = [("side", "upstream"), ("reason", "message_too_large")];
    assert!(find(&before, "switchyard_protocol_errors_total", &client_only).is_none());
    stack.gateway.shutdown().await;
}

/// Scrapes until `done` holds for the scrape (the counts a connection's
/// tasks hold are published once they run out of work), at most `STEP`;
/// returns the last scrape either way.
async fn scrape_until(addr: SocketAddr, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let s = scrape(addr).await;
        if done(&s) || tokio::time::Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_burst_on_one_connection_is_counted_exactly_once() {
    // Requests sent back to back, so that the connection's writer writes
    // many replies per flush: every frame is counted once, the frames
    // written between two flushes included, none twice.
    const BURST: usize = 300;
    let stack = AdminStack::start().await;
    let before = scrape(stack.admin).await;
    let mut ws = connect(&stack.url).await;
    for id in 0..BURST {
        let pad = "x".repeat(id % 700);
        let req = format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{pad}"],"id":{id}}}"#);
        send(&mut ws, &req).await;
    }
    let mut received = 0usize;
    for _ in 0..BURST {
        received += recv(&mut ws).await.len();
    }
    let out = [
        ("dialect", "jsonrpc-ws"),
        ("side", "client"),
        ("direction", "out"),
    ];
    let sizes = "switchyard_message_size_bytes";
    let (n0, sum0) = histogram(&before, sizes, &out);
    let want = BURST as f64;
    // The connection stays open: its writer publishes when it runs empty.
    let after = scrape_until(stack.admin, |s| histogram(s, sizes, &out).0 - n0 >= want).await;
    let (n1, sum1) = histogram(&after, sizes, &out);
    let bytes = value(&after, "switchyard_bytes_total", &out)
        - value(&before, "switchyard_bytes_total", &out);
    assert_eq!(n1 - n0, want, "client frames out");
    assert_eq!(sum1 - sum0, received as f64, "client frame sizes out");
    assert_eq!(bytes, received as f64, "client bytes out");
    let delta = |metric: &str, labels: &[(&str, &str)]| {
        value(&after, metric, labels) - value(&before, metric, labels)
    };
    let msgs = "switchyard_messages_total";
    let response = [out[0], out[1], out[2], ("kind", "response")];
    assert_eq!(delta(msgs, &response), want, "client responses out");
    let request = [out[0], out[1], ("direction", "in"), ("kind", "request")];
    assert_eq!(delta(msgs, &request), want, "client requests in");
    let up = |direction, kind| {
        [
            ("dialect", "ndjson"),
            ("side", "upstream"),
            ("direction", direction),
            ("kind", kind),
        ]
    };
    assert_eq!(
        delta(msgs, &up("out", "request")),
        want,
        "upstream requests"
    );
    assert_eq!(delta(msgs, &up("in", "response")), want, "upstream replies");
    let ok = [PUBLIC, DAEMON, ("outcome", "ok")];
    assert_eq!(delta("switchyard_requests_total", &ok), want);
    let durations = "switchyard_request_duration_seconds";
    let (d0, _) = histogram(&before, durations, &[PUBLIC, DAEMON]);
    let (d1, _) = histogram(&after, durations, &[PUBLIC, DAEMON]);
    assert_eq!(d1 - d0, want, "request durations");
    let upstream = "switchyard_upstream_request_duration_seconds";
    let (u0, _) = histogram(&before, upstream, &[DAEMON]);
    let (u1, _) = histogram(&after, upstream, &[DAEMON]);
    assert_eq!(u1 - u0, want, "upstream durations");
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn probes_follow_the_required_upstream_and_shutdown() {
    let mut stack = AdminStack::start().await;
    let live = get(stack.admin, "/livez").await;
    assert_eq!((live.status, live.text()), (200, "ok\n"));
    assert_eq!(get(stack.admin, "/readyz").await.status, 200);

    // The required upstream goes away: not ready, but still alive.
    stack.daemon.take().expect("daemon").stop().await;
    let reply = wait_status(stack.admin, "/readyz", 503, STEP).await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert!(reply.text().contains("upstream daemon"), "{}", reply.text());
    assert_eq!(get(stack.admin, "/livez").await.status, 200);
    let metrics = scrape(stack.admin).await;
    assert_eq!(value(&metrics, "switchyard_ready", &[]), 0.0);

    // It comes back on the same socket: switchyard reconnects, ready again.
    stack.daemon = Some(
        Daemon::start(&stack.socket, DaemonOptions::default())
            .await
            .expect("daemon restarts"),
    );
    let reply = wait_status(stack.admin, "/readyz", 200, STEP).await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    // Shutdown with a request in flight: readiness is 503 while draining.
    let mut ws = connect(&stack.url).await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"sleep","params":[1500],"id":1}"#,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let admin = stack.admin;
    let shutdown = tokio::spawn(stack.gateway.shutdown());
    let reply = wait_status(admin, "/readyz", 503, STEP).await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert!(reply.text().contains("draining"), "{}", reply.text());
    assert_eq!(
        get(admin, "/livez").await.status,
        200,
        "alive while draining"
    );
    assert_eq!(
        recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","result":1500,"id":1}"#
    );
    tokio::time::timeout(STEP, shutdown)
        .await
        .expect("shutdown finishes")
        .expect("shutdown task");
    assert!(
        TcpStream::connect(admin).await.is_err(),
        "the admin listener stops with the gateway"
    );
}

#[tokio::test]
async fn status_page_lists_listeners_and_upstreams() {
    let stack = AdminStack::start().await;
    let page = get(stack.admin, "/").await;
    assert_eq!(page.status, 200);
    let ctype = page.header("content-type").unwrap_or_default();
    assert!(ctype.starts_with("text/html"), "content type {ctype:?}");
    for needle in [
        "<!DOCTYPE html>",
        "public",
        "jsonrpc-ws",
        "daemon",
        "ndjson",
        "shared",
        stack.socket.to_str().expect("UTF-8 path"),
        &stack.url,
    ] {
        assert!(page.text().contains(needle), "page lacks {needle:?}");
    }
    assert!(!page.text().contains("<script"), "no scripts on the page");
    assert!(!page.text().contains("src=\"http"), "no external assets");
    // Only the demo serves a playground (tests/playground.rs follows its link).
    assert!(
        !page.text().contains("/playground"),
        "a link to no playground"
    );
    assert_eq!(get(stack.admin, "/nope").await.status, 404);
    stack.gateway.shutdown().await;
}

/// The operator figures: last-minute rate and p50/p99 per listener and
/// upstream, since when the upstream is down with its last connect error,
/// and the configuration generation.
#[tokio::test]
async fn status_page_shows_last_minute_latency_down_since_and_generation() {
    let mut stack = AdminStack::start().await;
    let page = get(stack.admin, "/").await;
    assert!(
        page.text().contains("config generation 1, loaded 20"),
        "{}",
        page.text()
    );
    let mut ws = connect(&stack.url).await;
    for id in 1..=5 {
        send(
            &mut ws,
            &format!(r#"{{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":{id}}}"#),
        )
        .await;
        recv(&mut ws).await;
    }
    let page = get(stack.admin, "/").await;
    for series in ["listener-public", "upstream-daemon"] {
        let row = row_of(page.text(), &format!("data-series=\"{series}\""));
        assert!(
            row.contains("<td class=\"num\">5</td></tr>"),
            "{series}: {row}"
        );
        assert!(row.contains(" ms</td>"), "{series}: no p50/p99 in {row}");
    }
    assert!(!page.text().contains("down since"), "the upstream is up");

    // The upstream goes away: since when, and why reconnecting fails.
    stack.daemon.take().expect("daemon").stop().await;
    let deadline = tokio::time::Instant::now() + STEP;
    let page = loop {
        let page = get(stack.admin, "/").await;
        if page.text().contains("last connect error 20") || tokio::time::Instant::now() > deadline {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let row = row_of(page.text(), "data-upstream-health=\"daemon\"");
    assert!(row.contains("down since 20"), "{row}");
    assert!(row.contains("last connect error 20"), "{row}");
    assert!(
        row.contains(stack.socket.to_str().expect("UTF-8")) || row.contains("os error"),
        "{row}"
    );
    stack.gateway.shutdown().await;
}

/// The `<tr …>…</tr>` of `html` that contains `needle`.
fn row_of<'a>(html: &'a str, needle: &str) -> &'a str {
    let at = html
        .find(needle)
        .unwrap_or_else(|| panic!("no {needle:?} in {html}"));
    let start = html[..at].rfind("<tr").expect("row start");
    let end = at + html[at..].find("</tr>").expect("row end") + 5;
    &html[start..end]
}

/// Every admin answer, 404 included, carries the security headers; the CSP
/// allows no inline script or style and names the WebSocket listener.
#[tokio::test]
async fn every_admin_answer_carries_security_headers() {
    let stack = AdminStack::start().await;
    let listener = stack
        .url
        .trim_end_matches("/rpc")
        .trim_end_matches('/')
        .to_owned();
    for path in ["/", "/status.css", "/metrics", "/livez", "/readyz", "/nope"] {
        let reply = get(stack.admin, path).await;
        let csp = reply.header("content-security-policy").unwrap_or_default();
        assert!(csp.contains("default-src 'none'"), "{path}: CSP {csp:?}");
        assert!(csp.contains("script-src 'self'"), "{path}: CSP {csp:?}");
        assert!(csp.contains("style-src 'self'"), "{path}: CSP {csp:?}");
        assert!(!csp.contains("unsafe-inline"), "{path}: CSP {csp:?}");
        assert!(
            csp.contains("frame-ancestors 'none'"),
            "{path}: CSP {csp:?}"
        );
        assert!(
            csp.contains(&format!("connect-src 'self' {listener}")),
            "{path}: CSP {csp:?} lacks {listener}"
        );
        assert_eq!(
            reply.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(
            reply.header("referrer-policy"),
            Some("no-referrer"),
            "{path}"
        );
    }
    let page = get(stack.admin, "/").await;
    assert!(
        !page.text().contains("<style"),
        "no inline style under the CSP"
    );
    assert!(page.text().contains("href=\"/status.css\""));
    let css = get(stack.admin, "/status.css").await;
    assert_eq!(css.status, 200);
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    stack.gateway.shutdown().await;
}

/// `/metrics` and the status page are gzipped for clients that accept it,
/// and identical once decompressed; others get them plain.
#[tokio::test]
async fn metrics_and_status_page_are_gzipped_when_accepted() {
    use std::io::Read;
    let stack = AdminStack::start().await;
    for path in ["/metrics", "/"] {
        let url = format!("http://{}{path}", stack.admin);
        let fetch = |gzip: bool| {
            let url = url.clone();
            tokio::task::spawn_blocking(move || {
                let headers: &[(&str, &str)] = if gzip {
                    &[("Accept-Encoding", "gzip")]
                } else {
                    &[]
                };
                common::demo::http_get(&url, headers)
            })
        };
        let (status, headers, zipped) = fetch(true).await.expect("fetch");
        assert_eq!(status, 200, "{path}");
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            header("content-encoding").as_deref(),
            Some("gzip"),
            "{path}"
        );
        assert!(header("content-security-policy").is_some(), "{path}");
        let mut text = String::new();
        flate2::read::GzDecoder::new(zipped.as_slice())
            .read_to_string(&mut text)
            .expect("valid gzip");
        let (_, plain_headers, plain) = fetch(false).await.expect("fetch");
        assert!(
            !plain_headers.iter().any(|(n, _)| n == "content-encoding"),
            "{path}: compressed without Accept-Encoding"
        );
        let plain = String::from_utf8(plain).expect("UTF-8");
        let marker = if path == "/" {
            "id=\"listeners\""
        } else {
            "# TYPE switchyard_"
        };
        assert!(text.contains(marker) && plain.contains(marker), "{path}");
        assert!(zipped.len() < plain.len(), "{path}: gzip is smaller");
    }
    stack.gateway.shutdown().await;
}

/// The status page as a browser renders it: a screenshot and the DOM from
/// Debian's headless Chromium, which this test installs when missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_renders_in_headless_chromium() {
    let chromium = common::node::require_chromium();
    let mut stack = AdminStack::start().await;
    let mut ws = connect(&stack.url).await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}"#,
    )
    .await;
    recv(&mut ws).await;
    send(&mut ws, "{not json").await;
    recv(&mut ws).await;

    let url = format!("http://{}/", stack.admin);
    let profile = tempfile::tempdir().expect("tempdir");
    let shot = profile.path().join("status.png");
    let out = run_chromium(
        &chromium,
        profile.path(),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,900".to_owned(),
            "--enable-logging=stderr".to_owned(),
            "--v=0".to_owned(),
            url.clone(),
        ],
    )
    .await;
    let console: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .collect();
    assert!(
        console.is_empty(),
        "console messages:\n{}",
        console.join("\n")
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| {
        panic!(
            "no screenshot at {} ({e}); stderr:\n{}",
            shot.display(),
            out.stderr
        )
    });
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(
        png.len() > 10_000,
        "screenshot of {} bytes is suspiciously small",
        png.len()
    );
    let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin-status.png");
    std::fs::copy(&shot, &kept).expect("keep the screenshot");
    println!("status page screenshot: {}", kept.display());

    let dom = run_chromium(
        &chromium,
        profile.path(),
        &["--dump-dom".to_owned(), url.clone()],
    )
    .await;
    for needle in [
        "id=\"upstreams\"",
        "id=\"requests\"",
        ">daemon<",
        ">public<",
        "invalid_request",
        "id=\"state\">ready<",
    ] {
        assert!(
            dom.stdout.contains(needle),
            "DOM lacks {needle:?}:\n{}",
            dom.stdout
        );
    }

    // The same page while the required upstream is down.
    stack.daemon.take().expect("daemon").stop().await;
    assert_eq!(
        wait_status(stack.admin, "/readyz", 503, STEP).await.status,
        503
    );
    let down = profile.path().join("not-ready.png");
    let shot_arg = format!("--screenshot={}", down.display());
    let size = "--window-size=1280,900".to_owned();
    run_chromium(&chromium, profile.path(), &[shot_arg, size, url.clone()]).await;
    let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin-status-not-ready.png");
    std::fs::copy(&down, &kept).expect("keep the screenshot");
    println!("status page screenshot (upstream down): {}", kept.display());
    let dom = run_chromium(&chromium, profile.path(), &["--dump-dom".to_owned(), url]).await;
    for needle in [
        "id=\"state\">not ready<",
        "upstream daemon: no live connection",
    ] {
        assert!(
            dom.stdout.contains(needle),
            "DOM lacks {needle:?}:\n{}",
            dom.stdout
        );
    }
    stack.gateway.shutdown().await;
}

/// Output of one Chromium run.
struct Output {
    stdout: String,
    stderr: String,
}

/// Runs headless Chromium once with the flags every run needs plus `args`.
async fn run_chromium(chromium: &Path, profile: &Path, args: &[String]) -> Output {
    let child = tokio::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            profile.join("chromium").display()
        ))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start chromium");
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("chromium finished within 120 s")
        .expect("chromium output");
    let out = Output {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    out
}

#[test]
fn admin_address_is_optional_validated_and_never_a_client_port() {
    let base = stack_toml(Path::new("/tmp/d.sock"), "", "");
    let cfg = Config::from_toml(&base).expect("no [admin]");
    assert_eq!(cfg.admin.addr, None, "absent disables the admin listener");
    let with = |address: &str| format!("{base}\n[admin]\naddress = \"{address}\"\n");
    let cfg = Config::from_toml(&with("")).expect("empty address");
    assert_eq!(cfg.admin.addr, None, "\"\" disables it too");
    let cfg = Config::from_toml(&with("127.0.0.1:9090")).expect("valid");
    assert_eq!(
        cfg.admin.addr,
        Some("127.0.0.1:9090".parse().expect("addr"))
    );

    let problems = |toml: &str| match Config::from_toml(toml) {
        Ok(_) => panic!("expected invalid:\n{toml}"),
        Err(e) => e.problems().join("\n"),
    };
    let p = problems(&with("localhost"));
    assert!(p.contains("admin.address: invalid IP:port"), "{p}");
    let clash = base.replace("127.0.0.1:0", "127.0.0.1:8080");
    let p = problems(&format!("{clash}\n[admin]\naddress = \"0.0.0.0:8080\"\n"));
    assert!(
        p.contains("admin.address: same port as listeners.public"),
        "{p}"
    );
    let p = problems(&format!("{base}\n[admin]\nport = 1\n"));
    assert!(p.contains("port"), "unknown keys are errors: {p}");
}

/// Traffic through every listener dialect moves the message, byte, batch
/// and duration series by exactly what was sent.
#[tokio::test]
async fn every_dialect_moves_its_series_by_the_traffic_sent() {
    use common::clients::{Speak, TestClient};
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&dir.path().join("d.sock"), DaemonOptions::default())
        .await
        .expect("daemon");
    let toml = format!(
        "[admin]\naddress = \"127.0.0.1:0\"\n\n\
         [listeners.j]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/j\"\n\n\
         [listeners.h]\ndialect = \"holon-rpc\"\naddress = \"127.0.0.1:0\"\npath = \"/h\"\n\n\
         [listeners.n]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [listeners.s]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/s\"\n\n\
         [upstreams.d]\ndialect = \"ndjson\"\nsocket = \"{}\"\npool_size = 1\n\n\
         [[routes]]\nlistener = \"j\"\nupstream = \"d\"\n[[routes]]\nlistener = \"h\"\nupstream = \"d\"\n[[routes]]\nlistener = \"n\"\nupstream = \"d\"\n[[routes]]\nlistener = \"s\"\nupstream = \"d\"\n",
        dir.path().join("n.sock").display(),
        daemon.path().display()
    );
    let bound = app::bind(Config::from_toml(&toml).expect("config"))
        .await
        .expect("bind");
    let admin = bound.admin_addr().expect("admin");
    let endpoints = [
        (
            Speak::JsonRpc,
            "jsonrpc-ws",
            "j",
            bound.ws_url("j").expect("url"),
        ),
        (
            Speak::Holon,
            "holon-rpc",
            "h",
            bound.ws_url("h").expect("url"),
        ),
        (
            Speak::Ndjson,
            "ndjson",
            "n",
            bound.unix_path("n").expect("socket").display().to_string(),
        ),
        (
            Speak::SidebandCbor,
            "sideband",
            "s",
            bound.ws_url("s").expect("url"),
        ),
    ];
    let gateway = bound.spawn();
    wait_connected(&gateway, "d").await;
    let before = scrape(admin).await;
    for (speak, _, _, endpoint) in &endpoints {
        let mut c = TestClient::connect(*speak, endpoint).await;
        for i in 0..2 {
            c.send(&format!(
                r#"{{"jsonrpc":"2.0","method":"echo","params":{{"i":{i}}},"id":"r{i}"}}"#
            ))
            .await;
            c.recv().await;
        }
        if *speak == Speak::SidebandCbor {
            // One event and two more requests (Sideband has no batches).
            c.send(r#"{"jsonrpc":"2.0","method":"notify_hello","params":[7]}"#)
                .await;
            for i in 2..4 {
                c.send(&format!(
                    r#"{{"jsonrpc":"2.0","method":"echo","params":[{i}],"id":"r{i}"}}"#
                ))
                .await;
                c.recv().await;
            }
        } else if *speak != Speak::Holon {
            // One notification and a batch of two requests.
            c.send(r#"{"jsonrpc":"2.0","method":"notify_hello","params":[7]}"#)
                .await;
            c.send(r#"[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1},{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}]"#).await;
            c.recv().await;
        }
    }
    let after = scrape(admin).await;
    let delta = |metric: &str, labels: &[(&str, &str)]| {
        value(&after, metric, labels) - value(&before, metric, labels)
    };
    let msgs = "switchyard_messages_total";
    for (speak, dialect, listener, _) in &endpoints {
        let json = *speak != Speak::Holon;
        let batches = json && *speak != Speak::SidebandCbor;
        let requests = if json { 4.0 } else { 2.0 };
        let cin = [
            ("dialect", *dialect),
            ("side", "client"),
            ("direction", "in"),
        ];
        assert_eq!(
            delta(msgs, &[cin[0], cin[1], cin[2], ("kind", "request")]),
            requests,
            "{dialect} requests in"
        );
        assert_eq!(
            delta(msgs, &[cin[0], cin[1], cin[2], ("kind", "notification")]),
            if json { 1.0 } else { 0.0 },
            "{dialect}"
        );
        let out = [
            ("dialect", *dialect),
            ("side", "client"),
            ("direction", "out"),
            ("kind", "response"),
        ];
        assert_eq!(delta(msgs, &out), requests, "{dialect} responses out");
        assert!(
            delta("switchyard_bytes_total", &[cin[0], cin[1], cin[2]]) > 0.0,
            "{dialect} bytes in"
        );
        // What goes back to the client is counted too: every reply is a
        // frame or line of its own or shares one (a batch reply).
        let cout = [
            ("dialect", *dialect),
            ("side", "client"),
            ("direction", "out"),
        ];
        assert!(
            delta("switchyard_bytes_total", &cout) > 0.0,
            "{dialect} bytes out"
        );
        let (sizes_before, _) = histogram(&before, "switchyard_message_size_bytes", &cout);
        let (sizes_after, _) = histogram(&after, "switchyard_message_size_bytes", &cout);
        assert!(
            sizes_after - sizes_before >= if batches { 3.0 } else { requests },
            "{dialect} message sizes out: {sizes_before} -> {sizes_after}"
        );
        let (n, _) = histogram(
            &after,
            "switchyard_request_duration_seconds",
            &[("listener", *listener), ("upstream", "d")],
        );
        assert_eq!(n, requests, "{listener} request durations");
        if batches {
            let (count, sum) =
                histogram(&after, "switchyard_batch_size", &[("listener", *listener)]);
            assert_eq!((count, sum), (1.0, 2.0), "{listener} batch size");
        }
    }
    // Upstream side: 14 requests (4 + 2 + 4 + 4) and 3 notifications went
    // out, 14 responses came back; every call is settled.
    let up = [("dialect", "ndjson"), ("side", "upstream")];
    assert_eq!(
        delta(
            msgs,
            &[up[0], up[1], ("direction", "out"), ("kind", "request")]
        ),
        14.0
    );
    assert_eq!(
        delta(
            msgs,
            &[up[0], up[1], ("direction", "out"), ("kind", "notification")]
        ),
        3.0
    );
    assert_eq!(
        delta(
            msgs,
            &[up[0], up[1], ("direction", "in"), ("kind", "response")]
        ),
        14.0
    );
    let (calls, _) = histogram(
        &after,
        "switchyard_upstream_request_duration_seconds",
        &[("upstream", "d")],
    );
    assert_eq!(calls, 14.0);
    assert_eq!(
        value(
            &after,
            "switchyard_upstream_in_flight",
            &[("upstream", "d")]
        ),
        0.0
    );
    gateway.shutdown().await;
    daemon.stop().await;
}

#[tokio::test]
async fn outbox_high_water_exists_before_the_first_connection() {
    let stack = AdminStack::start().await;
    let first = scrape(stack.admin).await;
    let labels = [PUBLIC];
    assert!(
        find(&first, "switchyard_outbox_high_water", &labels).is_some(),
        "switchyard_outbox_high_water{{listener=\"public\"}} missing from the first scrape"
    );
    assert_eq!(value(&first, "switchyard_outbox_high_water", &labels), 0.0);
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn closes_initiated_by_clients_are_counted() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    let stack = AdminStack::start().await;
    let labels = [
        ("dialect", "jsonrpc-ws"),
        ("side", "client"),
        ("code", "1000"),
    ];
    let before = value(
        &scrape(stack.admin).await,
        "switchyard_ws_closes_total",
        &labels,
    );
    let mut ws = connect(&stack.url).await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"subtract","params":[2,1],"id":1}"#,
    )
    .await;
    recv(&mut ws).await;
    let frame = CloseFrame {
        code: CloseCode::Normal,
        reason: "bye".into(),
    };
    // The gateway may answer the close and drop the socket at once.
    let _ = futures_util::SinkExt::send(
        &mut ws,
        tokio_tungstenite::tungstenite::Message::Close(Some(frame)),
    )
    .await;
    let deadline = tokio::time::Instant::now() + STEP;
    let mut now = before;
    while now < before + 1.0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        now = value(
            &scrape(stack.admin).await,
            "switchyard_ws_closes_total",
            &labels,
        );
    }
    assert_eq!(now - before, 1.0, "one close from the client, code 1000");
    stack.gateway.shutdown().await;
}

/// DNS rebinding: a page on `evil.example` whose name now resolves to the
/// admin listener sends `Host: evil.example`. The listener answers only IP
/// addresses, loopback names and `[admin] allowed_hosts`, on every route;
/// and its status page never shows the credentials in an upstream's URL.
#[tokio::test]
async fn the_admin_listener_checks_host_and_hides_credentials() {
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = format!(
        "{}\n[upstreams.remote]\ndialect = \"jsonrpc-ws\"\n\
         url = \"ws://alice:s3cr3tpw@127.0.0.1:1/rpc?token=t0k3nval&v=2\"\n\
         [admin]\naddress = \"127.0.0.1:0\"\nallowed_hosts = [\"switchyard\"]\n",
        stack_toml(&dir.path().join("nobody.sock"), "", "")
    );
    let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = app::bind(cfg).await.expect("bind");
    let admin = bound.admin_addr().expect("admin listener");
    let gateway = bound.spawn();
    let port = admin.port();

    for path in [
        "/",
        "/metrics",
        "/livez",
        "/readyz",
        "/status.css",
        "/nowhere",
    ] {
        for host in ["evil.example".to_owned(), format!("evil.example:{port}")] {
            let reply = get_as(admin, path, &host).await;
            assert_eq!(reply.status, 403, "{path} as {host}: {}", reply.text());
            assert!(
                reply.text().contains("Host not allowed"),
                "{}",
                reply.text()
            );
            assert_eq!(reply.header("x-frame-options"), Some("DENY"), "{path}");
        }
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("switchyard:{port}"),
        "SWITCHYARD".to_owned(),
    ] {
        let reply = get_as(admin, "/livez", &host).await;
        assert_eq!(reply.status, 200, "{host}: {}", reply.text());
    }

    let page = get(admin, "/").await;
    assert_eq!(page.status, 200);
    for secret in ["s3cr3tpw", "t0k3nval"] {
        assert!(
            !page.text().contains(secret),
            "{secret} shown on the status page"
        );
    }
    assert!(
        page.text().contains("127.0.0.1:1/rpc"),
        "the URL's server is still shown"
    );
    gateway.shutdown().await;
}
