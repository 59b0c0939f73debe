//! Limits and protection: rate limits in each dialect while a well-behaved
//! client is unaffected, the abuse threshold, and cross-site WebSocket
//! hijacking defences (Origin, Host, token) refused before the upgrade.

mod common;

use std::time::Duration;

use common::clients::{Speak, TestClient};
use common::json;
use switchyard::daemon::{Daemon, DaemonOptions};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

struct Gw {
    _dir: tempfile::TempDir,
    daemon: Daemon,
    /// Every line the daemon read and wrote (the last 256).
    tap: std::sync::Arc<switchyard::daemon::tap::Tap>,
    gateway: switchyard::app::Running,
    endpoints: Vec<String>,
}

/// One listener per dialect (JSON-RPC WS, holon WS, NDJSON) with `extra`
/// keys, all routed to the reference daemon.
async fn gateway(extra: &str) -> Gw {
    let dir = tempfile::tempdir().expect("tempdir");
    let tap = std::sync::Arc::new(switchyard::daemon::tap::Tap::new());
    let daemon = Daemon::start_tapped(
        &dir.path().join("d.sock"),
        DaemonOptions::default(),
        tap.clone(),
    )
    .await
    .expect("daemon");
    let sock = dir.path().join("local.sock");
    let toml = format!(
        "[listeners.j]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\n{extra}\n\n\
         [listeners.h]\ndialect = \"holon-rpc\"\naddress = \"127.0.0.1:0\"\npath = \"/holon\"\n{extra}\n\n\
         [listeners.n]\ndialect = \"ndjson\"\nsocket = \"{}\"\n{extra}\n\n\
         [listeners.s]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\n{extra}\n\n\
         [upstreams.d]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [[routes]]\nlistener = \"j\"\nupstream = \"d\"\n[[routes]]\nlistener = \"h\"\nupstream = \"d\"\n[[routes]]\nlistener = \"n\"\nupstream = \"d\"\n[[routes]]\nlistener = \"s\"\nupstream = \"d\"\n",
        sock.display(),
        daemon.path().display()
    );
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let endpoints = vec![
        bound.ws_url("j").expect("url"),
        bound.ws_url("h").expect("url"),
        bound.unix_path("n").expect("socket").display().to_string(),
        bound.ws_url("s").expect("url"),
    ];
    let gateway = bound.spawn();
    common::wait_connected(&gateway, "d").await;
    Gw {
        _dir: dir,
        daemon,
        tap,
        gateway,
        endpoints,
    }
}

const SPEAKS: [Speak; 4] = [
    Speak::JsonRpc,
    Speak::Holon,
    Speak::Ndjson,
    Speak::SidebandJson,
];

fn rate_limited_code(speak: Speak) -> i64 {
    match speak {
        Speak::Holon => 8,
        Speak::SidebandJson | Speak::SidebandCbor => 2000,
        _ => -32006,
    }
}

#[tokio::test]
async fn per_connection_rate_limit_answers_in_each_dialect_and_spares_others() {
    // 2 messages per second with a burst of 5; abuse after 50 refusals.
    const SENT: usize = 30;
    let gw = gateway("rate_per_second = 2\nrate_burst = 5\nabuse_threshold = 50").await;
    let mut rejected_seen = 0;
    for (speak, endpoint) in SPEAKS.iter().zip(&gw.endpoints) {
        let mut noisy = TestClient::connect(*speak, endpoint).await;
        let mut calm = TestClient::connect(*speak, endpoint).await;
        let started = tokio::time::Instant::now();
        for i in 0..SENT {
            noisy
                .send(&format!(
                    r#"{{"jsonrpc":"2.0","method":"echo","params":{{"i":{i}}},"id":"n{i}"}}"#
                ))
                .await;
        }
        let mut ok = 0;
        let mut limited = 0;
        for _ in 0..SENT {
            let v = json(&noisy.recv().await);
            if v.get("result").is_some() {
                ok += 1;
            } else {
                assert_eq!(
                    v["error"]["code"],
                    rate_limited_code(*speak),
                    "{speak:?}: {v}"
                );
                limited += 1;
            }
        }
        // The burst, plus what refilled (2 a second) while a busy machine
        // took its time: never more.
        let refilled = (started.elapsed().as_secs_f64() * 2.0).ceil() as usize;
        assert!(
            (5..=5 + refilled).contains(&ok),
            "{speak:?}: {ok} allowed, {limited} limited: burst of 5 (+{refilled} refilled)"
        );
        assert_eq!(ok + limited, SENT, "{speak:?}");
        assert!(limited > 0, "{speak:?}: nothing limited");
        rejected_seen += limited;
        // The calm client on the same listener and upstream is untouched.
        for i in 0..5 {
            calm.send(&format!(
                r#"{{"jsonrpc":"2.0","method":"echo","params":{{"i":{i}}},"id":"c{i}"}}"#
            ))
            .await;
            let v = json(&calm.recv().await);
            assert_eq!(v["result"]["i"], i, "{speak:?}: {v}");
        }
    }
    let rejected = common::metric_value(
        &gw.gateway,
        "switchyard_limit_rejections_total",
        &[("limit", "rate_per_second")],
    );
    assert_eq!(rejected, rejected_seen as f64);
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

#[tokio::test]
async fn a_client_that_keeps_going_is_closed_1008() {
    let gw = gateway("rate_per_second = 1\nrate_burst = 1\nabuse_threshold = 3").await;
    for (speak, endpoint) in SPEAKS.iter().zip(&gw.endpoints) {
        let mut c = TestClient::connect(*speak, endpoint).await;
        let mut calm = TestClient::connect(*speak, endpoint).await;
        for i in 0..10 {
            c.send(&format!(
                r#"{{"jsonrpc":"2.0","method":"echo","params":{{"i":{i}}},"id":"a{i}"}}"#
            ))
            .await;
        }
        let mut codes = Vec::new();
        let ended = loop {
            match c.next().await {
                Ok(text) => codes.push(json(&text)["error"]["code"].as_i64()),
                Err(end) => break end,
            }
        };
        let want = match speak {
            Speak::Ndjson => common::clients::Ended::Eof,
            _ => common::clients::Ended::Close(1008),
        };
        assert_eq!(ended, want, "{speak:?}");
        let limited = codes
            .iter()
            .filter(|c| **c == Some(rate_limited_code(*speak)))
            .count();
        assert_eq!(limited, 3, "{speak:?}: {codes:?}");
        // The other connection has its own budget.
        calm.send(r#"{"jsonrpc":"2.0","method":"echo","params":{"ok":1},"id":"ok"}"#)
            .await;
        assert_eq!(json(&calm.recv().await)["result"]["ok"], 1, "{speak:?}");
    }
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

/// Tries an upgrade with these headers; returns the HTTP status of a
/// refusal, or 101 when the upgrade succeeded.
async fn upgrade_status(url: &str, headers: &[(&str, &str)]) -> u16 {
    let mut request = url.into_client_request().expect("request");
    for (k, v) in headers {
        let name = tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes())
            .expect("name");
        request
            .headers_mut()
            .insert(name, HeaderValue::from_str(v).expect("value"));
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok(_) => 101,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[tokio::test]
async fn cross_site_hijacking_is_refused_before_the_upgrade() {
    let gw = gateway("").await;
    let url = &gw.endpoints[0];
    // Bound to loopback: loopback origins (or none) only.
    assert_eq!(upgrade_status(url, &[]).await, 101);
    assert_eq!(
        upgrade_status(url, &[("Origin", "http://localhost:5173")]).await,
        101
    );
    for origin in [
        "http://evil.com",
        "http://localhost.evil.com",
        "http://evil-localhost.com",
        "null",
        "https://127.0.0.1.nip.io",
    ] {
        assert_eq!(
            upgrade_status(url, &[("Origin", origin)]).await,
            403,
            "{origin}"
        );
    }
    // DNS rebinding: a foreign Host name pointing at 127.0.0.1.
    let port = url
        .split(':')
        .nth(2)
        .and_then(|p| p.split('/').next())
        .expect("port");
    assert_eq!(
        upgrade_status(url, &[("Host", &format!("evil.com:{port}"))]).await,
        403
    );
    let refused = common::metric_value(
        &gw.gateway,
        "switchyard_connections_rejected_total",
        &[("listener", "j")],
    );
    assert_eq!(refused, 6.0);
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

#[tokio::test]
async fn allow_lists_and_tokens() {
    let gw =
        gateway("allowed_origins = [\"https://app.example.com\"]\nauth_token = \"s3cret\"").await;
    let url = &gw.endpoints[0];
    assert_eq!(
        upgrade_status(url, &[("Origin", "https://app.example.com")]).await,
        401,
        "token required"
    );
    let bearer = [
        ("Origin", "https://app.example.com"),
        ("Authorization", "Bearer s3cret"),
    ];
    assert_eq!(upgrade_status(url, &bearer).await, 101);
    assert_eq!(
        upgrade_status(
            &format!("{url}?token=s3cret"),
            &[("Origin", "https://app.example.com")]
        )
        .await,
        101
    );
    assert_eq!(upgrade_status(&format!("{url}?token=nope"), &[]).await, 401);
    assert_eq!(
        upgrade_status(
            url,
            &[
                ("Origin", "http://app.example.com"),
                ("Authorization", "Bearer s3cret")
            ]
        )
        .await,
        403
    );
    // The allowed browser origin passes and the session works.
    let mut request = format!("{url}?token=s3cret")
        .into_client_request()
        .expect("request");
    request.headers_mut().insert(
        "Origin",
        HeaderValue::from_static("https://app.example.com"),
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("upgrade");
    common::send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#,
    )
    .await;
    assert_eq!(
        common::recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","result":[1],"id":1}"#
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

#[tokio::test]
async fn connection_caps_refuse_the_extra_connection_in_each_transport() {
    let gw = gateway("max_connections = 2").await;
    for (speak, endpoint) in SPEAKS[..3].iter().zip(&gw.endpoints) {
        let mut a = TestClient::connect(*speak, endpoint).await;
        let _b = TestClient::connect(*speak, endpoint).await;
        let mut c = TestClient::connect(*speak, endpoint).await;
        match speak {
            Speak::Ndjson => {
                let v = json(&c.recv().await);
                assert_eq!(v["error"]["code"], -32007, "{v}");
                assert_eq!(v["error"]["data"], "max connections exceeded");
                assert_eq!(c.next().await, Err(common::clients::Ended::Eof));
            }
            _ => assert_eq!(
                c.next().await,
                Err(common::clients::Ended::Close(1008)),
                "{speak:?}"
            ),
        }
        // The admitted clients are unaffected.
        a.send(r#"{"jsonrpc":"2.0","method":"echo","params":{"ok":1},"id":"a"}"#)
            .await;
        assert_eq!(json(&a.recv().await)["result"]["ok"], 1);
    }
    // Sideband: the extra connection is upgraded and closed 1008 before
    // any handshake.
    let _s1 = TestClient::connect(Speak::SidebandJson, &gw.endpoints[3]).await;
    let _s2 = TestClient::connect(Speak::SidebandJson, &gw.endpoints[3]).await;
    let mut s3 = common::connect(&gw.endpoints[3]).await;
    assert_eq!(
        common::expect_close(&mut s3).await,
        (1008, "max connections exceeded".to_owned())
    );
    let refused = common::metric_value(
        &gw.gateway,
        "switchyard_connections_rejected_total",
        &[("reason", "limit")],
    );
    assert_eq!(refused, 4.0);
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

#[tokio::test]
async fn per_ip_cap_and_idle_timeout() {
    let gw = gateway("max_connections_per_ip = 1\nidle_timeout_ms = 300").await;
    let mut first = TestClient::connect(Speak::JsonRpc, &gw.endpoints[0]).await;
    let mut second = TestClient::connect(Speak::JsonRpc, &gw.endpoints[0]).await;
    assert_eq!(
        second.next().await,
        Err(common::clients::Ended::Close(1008))
    );
    // The first one goes quiet and is closed for it.
    assert_eq!(first.next().await, Err(common::clients::Ended::Close(1001)));
    // Its place is free again.
    let mut third = TestClient::connect(Speak::JsonRpc, &gw.endpoints[0]).await;
    third
        .send(r#"{"jsonrpc":"2.0","method":"echo","params":[3],"id":3}"#)
        .await;
    assert_eq!(json(&third.recv().await)["result"], serde_json::json!([3]));
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_is_closed_without_slowing_the_others() {
    let gw =
        gateway("outbox_capacity = 4\nslow_consumer_timeout_ms = 300\nmax_in_flight = 64").await;
    let pad = "x".repeat(256 * 1024);
    for ((speak, endpoint), listener) in SPEAKS.iter().zip(&gw.endpoints).zip(["j", "h", "n", "s"])
    {
        // The slow client sends large requests and never reads its replies.
        // The gateway may close it while it is still sending (its outbox
        // filled and the slow-consumer timeout ran out): an expected outcome,
        // so a failed write just ends the loop.
        let mut slow = TestClient::connect(*speak, endpoint).await;
        for i in 0..64 {
            let request = format!(
                r#"{{"jsonrpc":"2.0","method":"echo","params":{{"pad":"{pad}"}},"id":"s{i}"}}"#
            );
            if slow.try_send(&request).await.is_err() {
                break;
            }
        }
        // Twenty others run flat out over the same upstream meanwhile.
        let runners = (0..20).map(|c| {
            let (speak, endpoint) = (*speak, endpoint.clone());
            tokio::spawn(async move {
                let mut client = TestClient::connect(speak, &endpoint).await;
                for i in 0..30 {
                    client.send(&format!(r#"{{"jsonrpc":"2.0","method":"echo","params":{{"c":{c},"i":{i}}},"id":"r{i}"}}"#)).await;
                    let v = json(&client.recv().await);
                    assert_eq!(v["result"], serde_json::json!({"c": c, "i": i}), "{speak:?} client {c}");
                }
            })
        });
        for r in futures_util::future::join_all(runners).await {
            r.expect("runner");
        }
        let labels = [
            ("listener", listener),
            ("limit", "slow_consumer_timeout_ms"),
        ];
        let closed =
            || common::metric_value(&gw.gateway, "switchyard_limit_rejections_total", &labels);
        assert!(
            common::eventually(Duration::from_secs(20), || closed() == 1.0).await,
            "{speak:?}: slow consumer never closed"
        );
        let open = || {
            common::metric_value(
                &gw.gateway,
                "switchyard_connections_open",
                &[("listener", listener)],
            )
        };
        assert!(
            common::eventually(Duration::from_secs(20), || open() == 0.0).await,
            "{speak:?}: open = {}",
            open()
        );
        // Memory stayed bounded: the slow client's outbox filled to exactly
        // its capacity and never beyond.
        let high = common::metric_value(
            &gw.gateway,
            "switchyard_outbox_high_water",
            &[("listener", listener)],
        );
        assert_eq!(high, 4.0, "{speak:?}");
        drop(slow);
    }
    // Every pending call of the slow clients was purged.
    let entries = || common::metric_value(&gw.gateway, "switchyard_correlator_entries", &[]);
    assert!(common::eventually(Duration::from_secs(20), || entries() == 0.0).await);
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

/// From the daemon's lines: the most `sleep` calls it held at once, and how
/// many of them it read after it had answered one (ids are the gateway's,
/// one sequence per daemon connection).
fn sleeps_at_the_daemon(lines: &[switchyard::daemon::tap::TapLine]) -> (usize, usize) {
    let mut open = std::collections::HashSet::new();
    let (mut most, mut answered, mut late) = (0, 0, 0);
    for line in lines {
        let v = json(&line.text);
        match line.dir {
            "in" if v["method"] == "sleep" => {
                if answered > 0 {
                    late += 1;
                }
                open.insert((line.conn, v["id"].to_string()));
                most = most.max(open.len());
            }
            "out" if open.remove(&(line.conn, v["id"].to_string())) => answered += 1,
            _ => {}
        }
    }
    (most, late)
}

#[tokio::test]
async fn in_flight_cap_applies_back_pressure_in_each_dialect_and_spares_others() {
    // At its cap a connection is no longer read until a reply frees a slot:
    // every request is answered, none refused.
    let gw = gateway("max_in_flight = 2").await;
    for (speak, endpoint) in SPEAKS.iter().zip(&gw.endpoints) {
        let tapped_before = gw.tap.since(0).last().map_or(0, |l| l.seq);
        let mut busy = TestClient::connect(*speak, endpoint).await;
        let mut calm = TestClient::connect(*speak, endpoint).await;
        for i in 0..4 {
            busy.send(&format!(
                r#"{{"jsonrpc":"2.0","method":"sleep","params":{{"ms":300}},"id":"b{i}"}}"#
            ))
            .await;
        }
        // The calm client on the same listener and upstream is unaffected.
        for i in 0..3 {
            calm.send(&format!(
                r#"{{"jsonrpc":"2.0","method":"echo","params":{{"i":{i}}},"id":"c{i}"}}"#
            ))
            .await;
            assert_eq!(json(&calm.recv().await)["result"]["i"], i, "{speak:?}");
        }
        let mut answered = Vec::new();
        for _ in 0..4 {
            let v = json(&busy.recv().await);
            assert_eq!(v["result"], 300, "{speak:?}: {v}");
            answered.push(v["id"].as_str().expect("id").to_owned());
        }
        answered.sort();
        assert_eq!(answered, ["b0", "b1", "b2", "b3"], "{speak:?}");
        // What the daemon saw: never more than the cap of the busy client's
        // calls at once, and they came in waves: the first two together,
        // the third and fourth only after a reply had freed a slot.
        let lines = gw.tap.since(tapped_before);
        let (most, late) = sleeps_at_the_daemon(&lines);
        assert_eq!(
            most, 2,
            "{speak:?}: at most the cap at once, and the cap reached: {lines:#?}"
        );
        assert_eq!(
            late, 2,
            "{speak:?}: calls 3 and 4 after a reply: {lines:#?}"
        );
    }
    // Each request that had to wait for a slot is counted: in every dialect
    // the third did (the fourth too, unless both slots were free by then).
    let waited = common::metric_value(
        &gw.gateway,
        "switchyard_limit_rejections_total",
        &[("limit", "max_in_flight")],
    );
    assert!((4.0..=8.0).contains(&waited), "waited {waited}");
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

#[tokio::test]
async fn oversize_messages_get_each_dialects_answer() {
    let gw = gateway("max_message_bytes = 2048").await;
    let big = "x".repeat(3000);
    for (speak, endpoint) in SPEAKS.iter().zip(&gw.endpoints) {
        let mut c = TestClient::connect(*speak, endpoint).await;
        let mut calm = TestClient::connect(*speak, endpoint).await;
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"echo","params":{{"big":"{big}"}},"id":"big"}}"#
        ))
        .await;
        match speak {
            Speak::JsonRpc => {
                let v = json(&c.recv().await);
                assert_eq!(
                    v["error"]["data"],
                    "Message size exceeds maximum of 2048 bytes"
                );
                assert_eq!(c.next().await, Err(common::clients::Ended::Close(1009)));
            }
            Speak::Ndjson => {
                let v = json(&c.recv().await);
                assert_eq!(v["error"]["data"], "Line exceeds maximum of 2048 bytes");
                assert_eq!(c.next().await, Err(common::clients::Ended::Eof));
            }
            _ => assert_eq!(
                c.next().await,
                Err(common::clients::Ended::Close(1009)),
                "{speak:?}"
            ),
        }
        calm.send(r#"{"jsonrpc":"2.0","method":"echo","params":{"ok":1},"id":"ok"}"#)
            .await;
        assert_eq!(json(&calm.recv().await)["result"]["ok"], 1, "{speak:?}");
    }
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

#[tokio::test]
async fn idle_connections_close_in_each_dialect_while_busy_ones_stay() {
    // Generous against a busy machine: the busy client's gaps (100 ms) stay
    // far under the idle timeout, and it talks for longer than the timeout.
    let gw = gateway("idle_timeout_ms = 1000").await;
    for (speak, endpoint) in SPEAKS.iter().zip(&gw.endpoints) {
        let mut idle = TestClient::connect(*speak, endpoint).await;
        let mut busy = TestClient::connect(*speak, endpoint).await;
        // The busy one keeps talking past the idle timeout.
        for i in 0..15 {
            busy.send(&format!(
                r#"{{"jsonrpc":"2.0","method":"echo","params":{{"i":{i}}},"id":"b{i}"}}"#
            ))
            .await;
            assert_eq!(json(&busy.recv().await)["result"]["i"], i, "{speak:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let want = match speak {
            Speak::Ndjson => common::clients::Ended::Eof,
            _ => common::clients::Ended::Close(1001),
        };
        assert_eq!(idle.next().await, Err(want), "{speak:?}");
    }
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

#[tokio::test]
async fn connection_lifetime_closes_even_busy_connections() {
    let gw = gateway("max_connection_lifetime_ms = 400").await;
    for (speak, endpoint) in SPEAKS.iter().zip(&gw.endpoints) {
        let mut c = TestClient::connect(*speak, endpoint).await;
        let started = std::time::Instant::now();
        // WebSocket clients keep talking; the NDJSON one asks once and waits
        // (a write after the close would be a broken pipe, not a test).
        let ended = loop {
            c.send(r#"{"jsonrpc":"2.0","method":"echo","params":{"x":1},"id":"x"}"#)
                .await;
            match c.next().await {
                Ok(_) if *speak == Speak::Ndjson => break c.next().await.expect_err("closed"),
                Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(end) => break end,
            }
        };
        let want = match speak {
            Speak::Ndjson => common::clients::Ended::Eof,
            _ => common::clients::Ended::Close(1001),
        };
        assert_eq!(ended, want, "{speak:?}");
        assert!(
            started.elapsed() >= Duration::from_millis(350),
            "{speak:?}: {:?}",
            started.elapsed()
        );
    }
    gw.gateway.shutdown().await;
    gw.daemon.stop().await;
}

#[tokio::test]
async fn upstream_pending_cap_and_wait_queue_answer_resource_exhausted() {
    let stack = common::Stack::start(
        "",
        "pool_size = 1\nmax_pending = 1\nmax_queued = 1",
        DaemonOptions::default(),
    )
    .await;
    let mut c = TestClient::connect(Speak::JsonRpc, &stack.url).await;
    // One in flight, one waiting in the queue, the third refused at once.
    for i in 0..3 {
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"sleep","params":{{"ms":200}},"id":{i}}}"#
        ))
        .await;
    }
    let first = json(&c.recv().await);
    assert_eq!(first["error"]["code"], -32007, "{first}");
    assert_eq!(first["error"]["data"], "upstream pending limit reached");
    let mut ok = 0;
    for _ in 0..2 {
        ok += usize::from(json(&c.recv().await).get("result").is_some());
    }
    assert_eq!(ok, 2);
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn a_request_waiting_longer_than_the_queue_timeout_gets_resource_exhausted() {
    let stack = common::Stack::start(
        "",
        "pool_size = 1\nmax_pending = 1\nqueue_timeout_ms = 100",
        DaemonOptions::default(),
    )
    .await;
    let mut c = TestClient::connect(Speak::JsonRpc, &stack.url).await;
    // The first holds the only slot for 3 s; the second waits for it in
    // the queue and gives up after 100 ms.
    for i in 0..2 {
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"sleep","params":{{"ms":3000}},"id":{i}}}"#
        ))
        .await;
    }
    let first = json(&c.recv().await);
    assert_eq!(first["id"], 1, "{first}");
    assert_eq!(first["error"]["code"], -32007, "{first}");
    assert_eq!(
        first["error"]["data"],
        "no upstream capacity within the queue timeout (100 ms)"
    );
    let second = json(&c.recv().await);
    assert_eq!(second["result"], 3000, "{second}");
    stack.gateway.shutdown().await;
}
