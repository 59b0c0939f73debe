//! NATS core as the pub/sub backbone, on a real
//! `nats-server` (random loopback ports, its monitoring endpoint read for
//! the server's own view of subscriptions):
//!
//! - three switchyard instances with subscribers on each, an upstream
//!   feed on one (a second instance fronting the same daemon does not
//!   publish) and a service publishing with a plain NATS client: every
//!   subscriber gets every event exactly once, in order;
//! - interest follows local subscribers: one NATS subscription per
//!   distinct pattern, gone after the last local subscriber leaves; the
//!   payload mapping, over-size and invalid messages dropped and counted;
//! - nats-server restarted under traffic: no client connection dropped,
//!   delivery resumes, the gap counted;
//! - NATS unreachable at start: the gateway serves, a subscribe succeeds
//!   and takes effect once NATS is there;
//! - a NATS subscription past its pending limit: drops counted, the
//!   client still served.
//!
//! Instances run in this process (`app::bind`), each with its own
//! registry.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::clients::{Speak, TestClient};
use common::http::get_url;
use common::nats::NatsServer;
use common::{eventually, metric_value};
use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::daemon::{Daemon, DaemonOptions};

const PREFIX: &str = "switchyard.topics.";
/// A failure guard for the server's view to settle, never a pause.
const SETTLE: Duration = Duration::from_secs(30);

struct Gw {
    gateway: Running,
    url: String,
}

/// An instance on `nats` with `pubsub_extra` in `[pubsub.nats]`, and the
/// reference daemon's `Subscribe` as feed `daemon.events` if `daemon`.
async fn instance(nats: &str, pubsub_extra: &str, daemon: Option<&Path>) -> Gw {
    let mut toml = format!(
        r#"
[pubsub]
backend = "nats"

[pubsub.nats]
urls = ["{nats}"]
{pubsub_extra}

[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"
# Services publish topics on NATS that are no upstream's: a listener
# admits only its upstreams' topics unless told more.
allow_topics = [">"]
"#
    );
    if let Some(socket) = daemon {
        toml.push_str(&format!(
            r#"
[upstreams.daemon]
dialect = "ndjson"
socket = "{}"
backoff_initial_ms = 50
backoff_max_ms = 200

[[upstreams.daemon.feeds]]
method = "Subscribe"
params = {{ interval_ms = 20 }}
topic = "daemon.events"

[[routes]]
listener = "public"
upstream = "daemon"
"#,
            socket.display()
        ));
    }
    let cfg = switchyard::config::Config::from_toml(&toml)
        .unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    Gw {
        gateway: bound.spawn(),
        url,
    }
}

/// A JSON-RPC client subscribed to `patterns`.
async fn subscriber(url: &str, patterns: &[&str]) -> TestClient {
    let mut c = TestClient::connect(Speak::JsonRpc, url).await;
    for (i, pattern) in patterns.iter().enumerate() {
        let id = format!("sub{i}");
        let req = json!({"jsonrpc": "2.0", "method": "rpc.subscribe", "params": {"topic": pattern}, "id": id});
        c.send(&req.to_string()).await;
        // Events may already flow (another pattern); the reply comes in order.
        loop {
            let msg: Value = serde_json::from_str(&c.recv().await).unwrap();
            if msg["id"] == id {
                assert_eq!(msg["result"], json!({"subscribed": true}), "{msg}");
                break;
            }
        }
    }
    c
}

/// The next event: topic and data.
async fn event(c: &mut TestClient) -> (String, Value) {
    let msg: Value = serde_json::from_str(&c.recv().await).unwrap();
    assert_eq!(msg["method"], "rpc.notification", "{msg}");
    let topic = msg["params"]["topic"].as_str().unwrap().to_owned();
    (topic, msg["params"]["data"].clone())
}

/// The subjects of every switchyard backbone connection, as the server
/// sees them (`/connz?subs=1`), sorted.
async fn server_subjects(nats: &NatsServer) -> Vec<String> {
    let url = format!("{}/connz?subs=1", nats.monitor_url());
    let reply = get_url(&url, &[]).await;
    let connz: Value = serde_json::from_str(reply.text()).unwrap();
    let mut subjects: Vec<String> = connz["connections"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == "switchyard-pubsub")
        .flat_map(|c| {
            c["subscriptions_list"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    subjects.sort();
    subjects
}

/// Waits until the server holds exactly `want` (topic patterns).
async fn server_holds(nats: &NatsServer, want: &[&str]) {
    let mut want: Vec<String> = want.iter().map(|p| format!("{PREFIX}{p}")).collect();
    want.sort();
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let got = server_subjects(nats).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "server subscriptions {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_every_subscriber_gets_every_event_once() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("daemon.sock");
    let daemon = Daemon::start(&socket, DaemonOptions::default())
        .await
        .unwrap();
    // A publishes the feed; B fronts the same daemon but does not; C has
    // no upstream.
    let a = instance(&nats.url, "", Some(&socket)).await;
    let b = instance(&nats.url, "publish_upstream_events = false", Some(&socket)).await;
    let c = instance(&nats.url, "", None).await;
    let plan: [(&Gw, &[&str]); 6] = [
        (&a, &["daemon.events", "svc.orders"]),
        (&a, &["daemon.>", "svc.*"]),
        (&b, &["daemon.*", ">"]),
        (&b, &["daemon.events", "svc.orders"]),
        (&c, &[">"]),
        (&c, &["daemon.events", "svc.>"]),
    ];
    let mut clients = Vec::new();
    for (gw, patterns) in plan {
        clients.push(subscriber(&gw.url, patterns).await);
    }
    server_holds(
        &nats,
        &[
            "daemon.events",
            "svc.orders",
            "daemon.>",
            "svc.*",
            "daemon.*",
            ">",
            "daemon.events",
            "svc.orders",
            ">",
            "daemon.events",
            "svc.>",
        ],
    )
    .await;

    // A service publishes straight on NATS.
    const N: u64 = 100;
    let service = async_nats::connect(&nats.url).await.unwrap();
    for n in 0..N {
        let subject = format!("{PREFIX}svc.orders");
        service
            .publish(subject, json!({ "n": n }).to_string().into())
            .await
            .unwrap();
    }
    service.flush().await.unwrap();

    let mut tasks = Vec::new();
    for (i, mut c) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let (mut svc, mut feed) = (Vec::new(), Vec::new());
            while svc.len() < N as usize || feed.len() < 30 {
                let (topic, data) = event(&mut c).await;
                match topic.as_str() {
                    "svc.orders" => svc.push(data["n"].as_u64().unwrap()),
                    "daemon.events" => feed.push(data["event"]["data"]["seq"].as_u64().unwrap()),
                    other => panic!("subscriber {i}: unexpected topic {other}"),
                }
            }
            (i, c, svc, feed)
        }));
    }
    for task in tasks {
        let (i, _c, svc, feed) = task.await.unwrap();
        assert_eq!(
            svc,
            (0..N).collect::<Vec<_>>(),
            "subscriber {i}: service events"
        );
        for pair in feed.windows(2) {
            assert_eq!(pair[1], pair[0] + 1, "subscriber {i}: feed {feed:?}");
        }
    }
    // One upstream stream: B, not publishing, never opened its feed.
    assert_eq!(daemon.subscribe_streams().started, 1);
    // Nothing lost on the way (A's feed may have run before its NATS
    // connection was up: those are `disconnected`, and not asserted).
    for gw in [&a, &b, &c] {
        for reason in [
            "oversize",
            "invalid",
            "slow_consumer",
            "queue_full",
            "not_publisher",
        ] {
            let labels = [("reason", reason)];
            let name = "switchyard_pubsub_nats_events_dropped_total";
            assert_eq!(metric_value(&gw.gateway, name, &labels), 0.0, "{reason}");
        }
    }
    for gw in [a, b, c] {
        gw.gateway.shutdown().await;
    }
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interest_follows_local_subscribers_and_payloads_map() {
    let nats = NatsServer::start();
    let gw = instance(&nats.url, "max_payload_bytes = 64", None).await;
    let mut one = subscriber(&gw.url, &["a.b"]).await;
    let mut two = subscriber(&gw.url, &["a.b", "a.*"]).await;
    server_holds(&nats, &["a.b", "a.*"]).await;
    assert_eq!(
        metric_value(&gw.gateway, "switchyard_pubsub_nats_subscriptions", &[]),
        2.0
    );

    let service = async_nats::connect(&nats.url).await.unwrap();
    let big = format!("\"{}\"", "x".repeat(100));
    for (topic, payload) in [
        ("a.b", big.as_str()),
        ("a.b", "{nope"),
        ("a.b", r#"{"k":1}"#),
        ("a.c", ""),
    ] {
        let subject = format!("{PREFIX}{topic}");
        let payload = payload.to_owned().into_bytes();
        service.publish(subject, payload.into()).await.unwrap();
    }
    service.flush().await.unwrap();
    assert_eq!(event(&mut one).await, ("a.b".into(), json!({"k": 1})));
    // Two subjects, two NATS subscriptions: no order between them.
    let mut got = BTreeMap::new();
    for _ in 0..2 {
        let (topic, data) = event(&mut two).await;
        assert!(got.insert(topic, data).is_none(), "twice: {got:?}");
    }
    let want = [
        ("a.b".to_owned(), json!({"k": 1})),
        ("a.c".into(), Value::Null),
    ];
    assert_eq!(got, BTreeMap::from(want));
    let counted = |reason: &str| {
        let labels = [("reason", reason)];
        metric_value(
            &gw.gateway,
            "switchyard_pubsub_nats_events_dropped_total",
            &labels,
        )
    };
    // Counted once, though two subscriptions of this instance got each.
    assert_eq!((counted("oversize"), counted("invalid")), (1.0, 1.0));
    one.silence(Duration::from_millis(200)).await;

    // The last local subscriber of a pattern leaving drops its interest.
    let req = json!({"jsonrpc": "2.0", "method": "rpc.unsubscribe", "params": {"topic": "a.*"}, "id": "u"});
    two.send(&req.to_string()).await;
    server_holds(&nats, &["a.b"]).await;
    drop(one);
    // `two` still holds a.b: the subscription stays.
    let req =
        json!({"jsonrpc": "2.0", "method": "rpc.subscribe", "params": {"topic": "z"}, "id": "z"});
    two.send(&req.to_string()).await;
    server_holds(&nats, &["a.b", "z"]).await;
    drop(two);
    server_holds(&nats, &[]).await;
    let zero = eventually(SETTLE, || {
        metric_value(&gw.gateway, "switchyard_pubsub_nats_subscriptions", &[]) == 0.0
    })
    .await;
    assert!(zero, "the subscriptions gauge went back to 0");
    gw.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_restart_under_traffic_resumes_and_counts_the_gap() {
    let mut nats = NatsServer::start();
    let gw = instance(&nats.url, "", None).await;
    let mut c = subscriber(&gw.url, &["svc.>"]).await;
    server_holds(&nats, &["svc.>"]).await;

    // A service publishing every 5 ms, through the restart.
    let published = Arc::new(AtomicU64::new(0));
    let service = async_nats::connect(&nats.url).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let publisher = {
        let (published, stop) = (published.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                let data = json!({ "n": n }).to_string();
                if service
                    .publish(format!("{PREFIX}svc.t"), data.into())
                    .await
                    .is_ok()
                {
                    n += 1;
                    published.store(n, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let mut seen = Vec::new();
    while seen.len() < 10 {
        seen.push(event(&mut c).await.1["n"].as_u64().unwrap());
    }
    nats.restart();
    // After the restart, an event published later than now must come.
    let after = published.load(Ordering::SeqCst);
    loop {
        let n = event(&mut c).await.1["n"].as_u64().unwrap();
        seen.push(n);
        if n > after {
            break;
        }
    }
    stop.cancel();
    publisher.await.unwrap();
    for pair in seen.windows(2) {
        assert!(pair[1] > pair[0], "out of order or twice: {seen:?}");
    }
    let m = |name: &str| metric_value(&gw.gateway, name, &[]);
    assert!(m("switchyard_pubsub_nats_disconnects_total") >= 1.0);
    assert!(m("switchyard_pubsub_nats_disconnected_seconds_total") > 0.0);
    let up = eventually(SETTLE, || m("switchyard_pubsub_nats_connected") == 1.0).await;
    assert!(up, "the connected gauge went back to 1");
    assert_eq!(
        metric_value(&gw.gateway, "switchyard_connections_open", &[]),
        1.0
    );
    gw.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_at_start_serves_and_subscribes_once_connected() {
    let mut nats = NatsServer::start();
    nats.stop();
    // Nothing listens on the server's port: the gateway starts anyway.
    let gw = instance(&nats.url, "", None).await;
    let mut c = subscriber(&gw.url, &["svc.>"]).await;
    let m = |name: &str| metric_value(&gw.gateway, name, &[]);
    assert_eq!(m("switchyard_pubsub_nats_connected"), 0.0);

    nats.restart();
    server_holds(&nats, &["svc.>"]).await;
    let up = eventually(SETTLE, || m("switchyard_pubsub_nats_connected") == 1.0).await;
    assert!(up, "the connected gauge went to 1");
    let service = async_nats::connect(&nats.url).await.unwrap();
    let subject = format!("{PREFIX}svc.late");
    service.publish(subject, "7".into()).await.unwrap();
    service.flush().await.unwrap();
    assert_eq!(event(&mut c).await, ("svc.late".into(), json!(7)));
    gw.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_nats_subscription_drops_are_counted_and_nobody_is_closed() {
    let nats = NatsServer::start();
    // One message of room per NATS subscription in the client.
    let gw = instance(&nats.url, "pending_messages = 1", None).await;
    let mut c = subscriber(&gw.url, &["burst"]).await;
    server_holds(&nats, &["burst"]).await;

    // A burst arrives in a few socket reads, each parsed in one go by the
    // client: far faster than one message of room is drained.
    const N: u64 = 20_000;
    let service = async_nats::connect(&nats.url).await.unwrap();
    for n in 0..N {
        let subject = format!("{PREFIX}burst");
        service
            .publish(subject, n.to_string().into())
            .await
            .unwrap();
    }
    service
        .publish(format!("{PREFIX}burst"), "\"end\"".into())
        .await
        .unwrap();
    service.flush().await.unwrap();
    let name = "switchyard_pubsub_nats_events_dropped_total";
    let labels = [("reason", "slow_consumer")];
    let dropped = eventually(SETTLE, || metric_value(&gw.gateway, name, &labels) > 0.0).await;
    assert!(dropped, "no slow_consumer drop counted");
    // What got through came in order, and the connection is still served.
    let mut last = None;
    loop {
        match tokio::time::timeout(Duration::from_secs(2), event(&mut c)).await {
            Ok((_, data)) if data == "end" => break,
            Ok((_, data)) => {
                let n = data.as_u64().unwrap();
                assert!(last.is_none_or(|l| n > l), "{n} after {last:?}");
                last = Some(n);
            }
            // The end marker itself may be the one dropped.
            Err(_) => break,
        }
    }
    let received = metric_value(
        &gw.gateway,
        "switchyard_pubsub_nats_events_total",
        &[("direction", "in")],
    );
    assert!(received < (N + 1) as f64, "all {received} got through");
    let req = json!({"jsonrpc": "2.0", "method": "rpc.unsubscribe", "params": {"topic": "burst"}, "id": "u"});
    c.send(&req.to_string()).await;
    loop {
        // Events still on their way come first.
        let reply: Value = serde_json::from_str(&c.recv().await).unwrap();
        if reply["id"] == "u" {
            assert_eq!(reply["result"], json!({"unsubscribed": true}), "{reply}");
            break;
        }
    }
    gw.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_and_password_reach_the_server() {
    let nats = NatsServer::start_with(&["--user", "sy", "--pass", "s3cret-pw"]);
    let gw = instance(&nats.url, "user = \"sy\"\npassword = \"s3cret-pw\"", None).await;
    let mut c = subscriber(&gw.url, &["auth.t"]).await;
    server_holds(&nats, &["auth.t"]).await;
    // A wrong password never connects; the gateway serves on.
    let wrong = instance(&nats.url, "user = \"sy\"\npassword = \"nope\"", None).await;
    let mut w = subscriber(&wrong.url, &["auth.t"]).await;

    let service =
        async_nats::ConnectOptions::with_user_and_password("sy".into(), "s3cret-pw".into())
            .connect(&nats.url)
            .await
            .unwrap();
    service
        .publish(format!("{PREFIX}auth.t"), "1".into())
        .await
        .unwrap();
    service.flush().await.unwrap();
    assert_eq!(event(&mut c).await, ("auth.t".into(), json!(1)));
    let m = |gw: &Gw| metric_value(&gw.gateway, "switchyard_pubsub_nats_connected", &[]);
    assert_eq!(m(&wrong), 0.0);
    w.silence(Duration::from_millis(100)).await;
    for gw in [gw, wrong] {
        gw.gateway.shutdown().await;
    }
}

/// Sends `method` for `topic` and waits for its reply (no events are
/// expected meanwhile).
async fn call(c: &mut TestClient, method: &str, topic: &str) {
    let req = json!({"jsonrpc": "2.0", "method": method, "params": {"topic": topic}, "id": method});
    c.send(&req.to_string()).await;
    let msg: Value = serde_json::from_str(&c.recv().await).unwrap();
    assert_eq!(msg["id"], method, "{msg}");
    assert!(msg["result"].is_object(), "{msg}");
}

/// One client's subscription closing never costs another client events.
/// Each round, client A holds `daemon.>` (the older NATS subscription)
/// and client B `daemon.tick`; a service publishes a numbered burst on
/// `daemon.tick` with a plain NATS client, and A unsubscribes and closes
/// as soon as it has seen a few of them, without waiting, so `daemon.>`
/// closes while the burst is still crossing the instance. B must get the
/// whole burst exactly once and in order, then a marker published once
/// the server dropped `daemon.>`. Rounds repeat the close in mid-burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_overlapping_pattern_leaving_costs_nothing() {
    const ROUNDS: u64 = 20;
    // Below the outbox capacity (1024) with the marker: B's events wait
    // in its outbox however slowly this test reads them.
    const BURST: u64 = 1000;
    // Events A sees before it leaves.
    const SEEN: usize = 20;
    let nats = NatsServer::start();
    let gw = instance(&nats.url, "", None).await;
    let service = async_nats::connect(&nats.url).await.unwrap();
    let subject = format!("{PREFIX}daemon.tick");
    let mut b = TestClient::connect(Speak::JsonRpc, &gw.url).await;
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let mut a = subscriber(&gw.url, &["daemon.>"]).await;
        server_holds(&nats, &["daemon.>"]).await;
        call(&mut b, "rpc.subscribe", "daemon.tick").await;
        server_holds(&nats, &["daemon.>", "daemon.tick"]).await;

        let publisher = {
            let (service, subject) = (service.clone(), subject.clone());
            tokio::spawn(async move {
                for n in 0..BURST {
                    let payload = json!({ "round": round, "n": n }).to_string();
                    service
                        .publish(subject.clone(), payload.into())
                        .await
                        .unwrap();
                }
                service.flush().await.unwrap();
            })
        };
        for _ in 0..SEEN {
            let (topic, data) = event(&mut a).await;
            assert_eq!(
                (topic.as_str(), &data["round"]),
                ("daemon.tick", &json!(round))
            );
        }
        let req = json!({"jsonrpc": "2.0", "method": "rpc.unsubscribe", "params": {"topic": "daemon.>"}, "id": "u"});
        a.send(&req.to_string()).await;
        drop(a);
        publisher.await.unwrap();
        server_holds(&nats, &["daemon.tick"]).await;
        let marker = json!({ "round": round, "end": true }).to_string();
        service
            .publish(subject.clone(), marker.into())
            .await
            .unwrap();
        service.flush().await.unwrap();

        let mut got = Vec::new();
        loop {
            let (topic, data) = event(&mut b).await;
            assert_eq!(topic, "daemon.tick");
            assert_eq!(data["round"], round, "{data}");
            if data["end"] == true {
                break;
            }
            got.push(data["n"].as_u64().unwrap());
        }
        if got != (0..BURST).collect::<Vec<_>>() {
            let distinct = got.iter().collect::<std::collections::BTreeSet<_>>().len();
            failures.push(format!(
                "round {round}: {} events, {} missing, {} repeated",
                got.len(),
                BURST as usize - distinct,
                got.len() - distinct
            ));
        }
        call(&mut b, "rpc.unsubscribe", "daemon.tick").await;
        server_holds(&nats, &[]).await;
    }
    assert!(
        failures.is_empty(),
        "B did not get each burst once, in order ({} of {ROUNDS} rounds):\n{}",
        failures.len(),
        failures.join("\n")
    );
    let labels = [("reason", "slow_consumer")];
    let name = "switchyard_pubsub_nats_events_dropped_total";
    assert_eq!(metric_value(&gw.gateway, name, &labels), 0.0);
    drop(b);
    gw.gateway.shutdown().await;
}
