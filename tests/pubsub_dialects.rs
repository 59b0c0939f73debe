//! Pub/sub in every client dialect (jsonrpc-ws.md §7.2, as the README maps
//! it): the same `rpc.subscribe` call, and one event delivered once per
//! connection as a JSON-RPC / NDJSON notification, a holon `s<N>` request
//! or a Sideband `N` envelope on `event`. Events come from a real upstream:
//! the reference JSON-RPC WebSocket daemon's `push` sends a notification on
//! switchyard's shared connection, published as `events.<method>`; and from
//! a streaming feed on the reference NDJSON daemon, opened once.

mod common;

use common::clients::{Speak, TestClient};
use common::json;
use serde_json::json;
use switchyard::daemon::ws::{WsDaemon, WsDialect};
use switchyard::daemon::{Daemon, DaemonOptions};

struct Gw {
    _dir: tempfile::TempDir,
    gateway: switchyard::app::Running,
    endpoints: Vec<(Speak, String)>,
}

/// Listeners of every dialect, all routed to `upstream` (TOML).
async fn gateway(upstream: &str, dir: tempfile::TempDir) -> Gw {
    let sock = dir.path().join("n.sock");
    let toml = format!(
        "[listeners.j]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\n\n\
         [listeners.h]\ndialect = \"holon-rpc\"\naddress = \"127.0.0.1:0\"\npath = \"/holon\"\n\n\
         [listeners.n]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [listeners.s]\ndialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"\n\n\
         {upstream}\n\
         [[routes]]\nlistener = \"j\"\nupstream = \"up\"\n[[routes]]\nlistener = \"h\"\nupstream = \"up\"\n\
         [[routes]]\nlistener = \"n\"\nupstream = \"up\"\n[[routes]]\nlistener = \"s\"\nupstream = \"up\"\n",
        sock.display(),
    );
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let endpoints = vec![
        (Speak::JsonRpc, bound.ws_url("j").expect("url")),
        (Speak::Holon, bound.ws_url("h").expect("url")),
        (
            Speak::Ndjson,
            bound.unix_path("n").expect("socket").display().to_string(),
        ),
        (Speak::SidebandJson, bound.ws_url("s").expect("url")),
        (Speak::SidebandCbor, bound.ws_url("s").expect("url")),
    ];
    let gateway = bound.spawn();
    common::wait_connected(&gateway, "up").await;
    Gw {
        _dir: dir,
        gateway,
        endpoints,
    }
}

/// Calls `method` and returns the reply's `result` (or the whole reply).
async fn call(
    c: &mut TestClient,
    id: &str,
    method: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    c.send(&request.to_string()).await;
    let reply = json(&c.recv().await);
    reply.get("result").cloned().unwrap_or(reply)
}

/// The next event as (topic, data), answering a holon `s<N>` request.
async fn event(c: &mut TestClient) -> (String, serde_json::Value) {
    let v = json(&c.recv().await);
    match c.speaks() {
        Speak::SidebandJson | Speak::SidebandCbor => {
            // An `N` on `event`: e = the topic, d = the data.
            assert!(v.get("id").is_none(), "{v}");
            let topic = v["method"].as_str().expect("topic").to_owned();
            (topic, v["params"].clone())
        }
        speak => {
            assert_eq!(v["method"], "rpc.notification", "{v}");
            if speak == Speak::Holon {
                let id = v["id"].as_str().expect("holon events are s<N> requests");
                assert!(id.starts_with('s'), "{v}");
                c.send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string())
                    .await;
            } else {
                assert!(v.get("id").is_none(), "{v}");
            }
            let topic = v["params"]["topic"].as_str().expect("topic").to_owned();
            (topic, v["params"]["data"].clone())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_notification_reaches_every_dialect_once_per_connection() {
    let daemon = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::JsonRpc)
        .await
        .expect("ws daemon");
    let upstream = format!(
        "[upstreams.up]\ndialect = \"jsonrpc-ws\"\nurl = \"{}\"\npool_size = 1\n",
        daemon.url()
    );
    let gw = gateway(&upstream, tempfile::tempdir().expect("tempdir")).await;
    let mut subscribers = Vec::new();
    for (speak, endpoint) in &gw.endpoints {
        let mut c = TestClient::connect(*speak, endpoint).await;
        // Two overlapping patterns: every event still arrives once.
        let ok = call(
            &mut c,
            "1",
            "rpc.subscribe.batch",
            json!({"topics": ["up.orders.*", "up.>"]}),
        )
        .await;
        assert_eq!(
            ok,
            json!({"subscribed": ["up.orders.*", "up.>"]}),
            "{speak:?}"
        );
        subscribers.push(c);
    }
    let mut publisher = TestClient::connect(Speak::JsonRpc, &gw.endpoints[0].1).await;
    for n in 1..=2 {
        let pushed = call(
            &mut publisher,
            &format!("p{n}"),
            "push",
            json!({"method": "orders.created", "params": {"n": n}}),
        )
        .await;
        assert_eq!(pushed, json!({"pushed": true}));
    }
    for c in &mut subscribers {
        let speak = c.speaks();
        // The second event comes right after the first: none was doubled.
        for n in 1..=2 {
            let (topic, data) = event(c).await;
            assert_eq!(topic, "up.orders.created", "{speak:?}");
            assert_eq!(data, json!({"n": n}), "{speak:?}");
        }
    }
    let delivered = |l: &str| {
        common::metric_value(
            &gw.gateway,
            "switchyard_events_delivered_total",
            &[("listener", l)],
        )
    };
    assert_eq!(delivered("j"), 2.0);
    assert_eq!(delivered("s"), 4.0);
    let published = common::metric_value(
        &gw.gateway,
        "switchyard_events_published_total",
        &[("upstream", "up")],
    );
    assert_eq!(published, 2.0);
    drop(subscribers);
    let held = || {
        common::metric_value(
            &gw.gateway,
            "switchyard_subscriptions",
            &[("listener", "s")],
        )
    };
    assert!(
        common::eventually(common::STEP, || held() == 0.0).await,
        "subscriptions left: {}",
        held()
    );
    gw.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_feed_is_opened_for_the_first_subscriber_and_closed_after_the_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&dir.path().join("d.sock"), DaemonOptions::default())
        .await
        .expect("daemon");
    let upstream = format!(
        "[upstreams.up]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [[upstreams.up.feeds]]\nmethod = \"Subscribe\"\nparams = {{ interval_ms = 20 }}\ntopic = \"up.events\"\n",
        daemon.path().display()
    );
    let gw = gateway(&upstream, dir).await;
    let open = || common::metric_value(&gw.gateway, "switchyard_feeds_open", &[("upstream", "up")]);
    assert_eq!(open(), 0.0, "no subscriber, no feed");
    let mut clients = Vec::new();
    for (speak, endpoint) in &gw.endpoints {
        let mut c = TestClient::connect(*speak, endpoint).await;
        let pattern = if *speak == Speak::Holon {
            "up.*"
        } else {
            "up.events"
        };
        let ok = call(&mut c, "1", "rpc.subscribe", json!({ "topic": pattern })).await;
        assert_eq!(ok, json!({"subscribed": true}), "{speak:?}");
        clients.push(c);
    }
    for c in &mut clients {
        let speak = c.speaks();
        let (topic, first) = event(c).await;
        assert_eq!(topic, "up.events", "{speak:?}");
        let seq = |d: &serde_json::Value| d["event"]["data"]["seq"].as_u64().expect("seq");
        let (_, second) = event(c).await;
        assert_eq!(seq(&second), seq(&first) + 1, "{speak:?}: in order, no gap");
    }
    assert_eq!(open(), 1.0, "one upstream stream for every subscriber");
    for c in &mut clients {
        // Events may still arrive before the answer: skip them.
        let request = json!({"jsonrpc": "2.0", "id": "u", "method": "rpc.unsubscribe.batch", "params": {"topics": ["up.events", "up.*"]}});
        c.send(&request.to_string()).await;
        loop {
            let v = json(&c.recv().await);
            if v["id"] == "u" || v["result"]["unsubscribed"].is_array() {
                break;
            }
            if c.speaks() == Speak::Holon && v["method"] == "rpc.notification" {
                let id = v["id"].clone();
                c.send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string())
                    .await;
            }
        }
    }
    assert!(
        common::eventually(common::STEP, || open() == 0.0).await,
        "the feed stayed open"
    );
    gw.gateway.shutdown().await;
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_survive_a_reload_and_a_changed_feed_is_reopened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&dir.path().join("d.sock"), DaemonOptions::default())
        .await
        .expect("daemon");
    let file = dir.path().join("switchyard.toml");
    let write = |interval: u64| {
        let text = format!(
            "[listeners.j]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\n\n\
             [upstreams.up]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
             [[upstreams.up.feeds]]\nmethod = \"Subscribe\"\nparams = {{ interval_ms = {interval} }}\ntopic = \"up.events\"\n\n\
             [[routes]]\nlistener = \"j\"\nupstream = \"up\"\n",
            daemon.path().display()
        );
        std::fs::write(&file, text).expect("write config");
    };
    write(20);
    let cfg = switchyard::config::Config::load(Some(&file)).expect("config");
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("j").expect("url");
    let gateway = bound.reload_from(Some(file.clone())).spawn();
    common::wait_connected(&gateway, "up").await;
    let mut c = TestClient::connect(Speak::JsonRpc, &url).await;
    let ok = call(&mut c, "1", "rpc.subscribe", json!({"topic": "up.>"})).await;
    assert_eq!(ok, json!({"subscribed": true}));
    let seq = |d: &serde_json::Value| d["event"]["data"]["seq"].as_u64().expect("seq");
    let (_, first) = event(&mut c).await;
    assert!(seq(&first) >= 1);
    // A changed feed: the upstream is replaced, its stream closed, and the
    // new definition opens one at once for the subscription already held.
    write(25);
    gateway.reload().await.expect("reload");
    loop {
        let (topic, data) = event(&mut c).await;
        assert_eq!(topic, "up.events");
        if seq(&data) == 1 {
            // The new stream's first event: the subscription survived.
            break;
        }
    }
    let (_, next) = event(&mut c).await;
    assert_eq!(seq(&next), 2, "the new stream, in order");
    let open = || common::metric_value(&gateway, "switchyard_feeds_open", &[("upstream", "up")]);
    assert!(
        common::eventually(common::STEP, || open() == 1.0).await,
        "feeds open: {}",
        open()
    );
    gateway.shutdown().await;
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_past_a_bound_is_resource_exhausted_in_every_dialect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&dir.path().join("d.sock"), DaemonOptions::default())
        .await
        .expect("daemon");
    let upstream = format!(
        "[upstreams.up]\ndialect = \"ndjson\"\nsocket = \"{}\"\n",
        daemon.path().display()
    );
    let gw = gateway(&upstream, dir).await;
    // 17 tokens: one more than a pattern may have by default (under the
    // upstream's topics, which the topic policy admits).
    let deep = format!("up.{}", vec!["t"; 16].join("."));
    for (speak, endpoint) in &gw.endpoints {
        let mut c = TestClient::connect(*speak, endpoint).await;
        let reply = call(&mut c, "1", "rpc.subscribe", json!({ "topic": deep })).await;
        let detail = "topic has 17 tokens, at most 16 are allowed";
        // Each dialect's own code for resource_exhausted; Sideband names
        // the kind beside the detail.
        let (code, data) = match speak {
            Speak::Holon => (8, json!(detail)),
            Speak::SidebandJson | Speak::SidebandCbor => (
                2000,
                json!({"kind": "resource_exhausted", "detail": detail}),
            ),
            _ => (-32007, json!(detail)),
        };
        assert_eq!(reply["error"]["code"], code, "{speak:?}: {reply}");
        assert_eq!(reply["error"]["data"], data, "{speak:?}: {reply}");
    }
    gw.gateway.shutdown().await;
}
