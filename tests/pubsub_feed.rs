//! Pub/sub feeds (issue 14): the reference NDJSON daemon's `Subscribe`
//! stream configured as a feed of upstream `daemon` under topic
//! `daemon.events`, fanned out to subscribers in every client dialect.
//!
//! - One upstream stream for many subscribers, every event to every one of
//!   them in order, the stream closed when the last one leaves.
//! - A subscriber that never reads loses events (counted `slow_consumer`)
//!   and is closed after the slow-consumer timeout, while the others get
//!   every event.
//!
//! The daemon counts its `Subscribe` streams
//! ([`switchyard::daemon::Daemon::subscribe_streams`]); subscription gauges
//! come from the admin listener's `/metrics`.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::clients::{Ended, Speak, TestClient};
use common::scrape::{scrape, value, wait_above, wait_value};
use common::{eventually, Ws};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::daemon::{Daemon, DaemonOptions, SubscribeStreams};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

const TOPIC: &str = "daemon.events";
const SUBSCRIPTIONS: &str = "switchyard_subscriptions";
/// How long a gauge or the daemon may take to settle.
const SETTLE: Duration = Duration::from_secs(30);

/// A gateway with one listener per client dialect, all routed to the
/// reference NDJSON daemon, whose `Subscribe` is a feed.
struct Feed {
    _dir: tempfile::TempDir,
    daemon: Daemon,
    gateway: Running,
    admin: SocketAddr,
    jsonrpc: String,
    holon: String,
    sideband: String,
    ndjson: PathBuf,
}

impl Feed {
    /// `feed_params`: the TOML inline table passed to `Subscribe`;
    /// `listener_extra`: lines added to every listener.
    async fn start(feed_params: &str, listener_extra: &str) -> Feed {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("daemon.sock");
        let local = dir.path().join("gw.sock");
        let daemon = Daemon::start(&socket, DaemonOptions::default())
            .await
            .expect("daemon");
        let mut toml = String::from("[admin]\naddress = \"127.0.0.1:0\"\n");
        // Listeners on port 0 share one server, so each needs its own path.
        for (name, dialect) in [
            ("public", "jsonrpc-ws"),
            ("holon", "holon-rpc"),
            ("sb", "sideband"),
        ] {
            toml.push_str(&format!(
                "\n[listeners.{name}]\ndialect = \"{dialect}\"\naddress = \"127.0.0.1:0\"\npath = \"/{name}\"\n{listener_extra}\n"
            ));
        }
        toml.push_str(&format!(
            "\n[listeners.local]\ndialect = \"ndjson\"\nsocket = \"{}\"\n{listener_extra}\n",
            local.display()
        ));
        toml.push_str(&format!(
            r#"
[upstreams.daemon]
dialect = "ndjson"
socket = "{}"
backoff_initial_ms = 50
backoff_max_ms = 200

[[upstreams.daemon.feeds]]
method = "Subscribe"
params = {feed_params}
topic = "{TOPIC}"
"#,
            socket.display()
        ));
        for name in ["public", "holon", "sb", "local"] {
            toml.push_str(&format!(
                "\n[[routes]]\nlistener = \"{name}\"\nupstream = \"daemon\"\n"
            ));
        }
        let cfg = switchyard::config::Config::from_toml(&toml)
            .unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let bound = switchyard::app::bind(cfg).await.expect("bind");
        let url = |name| bound.ws_url(name).expect("listener url");
        let (jsonrpc, holon, sideband) = (url("public"), url("holon"), url("sb"));
        let ndjson = bound.unix_path("local").expect("socket path");
        let admin = bound.admin_addr().expect("admin listener");
        let gateway = bound.spawn();
        common::wait_connected(&gateway, "daemon").await;
        Feed {
            _dir: dir,
            daemon,
            gateway,
            admin,
            jsonrpc,
            holon,
            sideband,
            ndjson,
        }
    }

    fn endpoint(&self, speak: Speak) -> String {
        match speak {
            Speak::JsonRpc => self.jsonrpc.clone(),
            Speak::Holon => self.holon.clone(),
            Speak::SidebandJson | Speak::SidebandCbor => self.sideband.clone(),
            Speak::Ndjson => self.ndjson.display().to_string(),
        }
    }

    async fn subscriptions(&self, listener: &str) -> f64 {
        value(
            &scrape(self.admin).await,
            SUBSCRIPTIONS,
            &[("listener", listener)],
        )
    }

    /// Waits until the daemon's stream counts are `want`.
    async fn streams_become(&self, want: SubscribeStreams) -> SubscribeStreams {
        eventually(SETTLE, || self.daemon.subscribe_streams() == want).await;
        self.daemon.subscribe_streams()
    }

    async fn stop(self) {
        self.gateway.shutdown().await;
        self.daemon.stop().await;
    }
}

/// The listener name of a dialect.
fn listener(speak: Speak) -> &'static str {
    match speak {
        Speak::JsonRpc => "public",
        Speak::Holon => "holon",
        Speak::SidebandJson | Speak::SidebandCbor => "sb",
        Speak::Ndjson => "local",
    }
}

/// One event as a subscriber of `speak` received it: the topic and the
/// published data (the `result` of the daemon's event line).
fn event_of(speak: Speak, msg: &Value) -> Option<(String, Value)> {
    if speak.is_sideband() {
        // An `N` envelope on `event`: e = topic, d = data.
        let method = msg["method"].as_str()?;
        if msg.get("id").is_some() {
            return None;
        }
        return Some((method.to_owned(), msg["params"].clone()));
    }
    if msg["method"] != "rpc.notification" {
        return None;
    }
    // holon-rpc: a server request with an `s<N>` id; others: a notification.
    let has_id = msg.get("id").is_some();
    assert_eq!(has_id, speak == Speak::Holon, "{speak:?}: {msg}");
    let topic = msg["params"]["topic"].as_str()?.to_owned();
    Some((topic, msg["params"]["data"].clone()))
}

fn seq_of(data: &Value) -> u64 {
    data["event"]["data"]["seq"]
        .as_u64()
        .unwrap_or_else(|| panic!("an event without seq: {data}"))
}

/// Subscribes `c` to `pattern`, then collects `want` events; returns the
/// client (still open) and the seqs received.
async fn subscribe_and_collect(
    mut c: TestClient,
    pattern: &str,
    want: usize,
) -> (TestClient, Vec<u64>) {
    let speak = c.speaks();
    let request = json!({"jsonrpc": "2.0", "method": "rpc.subscribe", "params": {"topic": pattern}, "id": "sub"});
    c.send(&request.to_string()).await;
    let mut subscribed = false;
    let mut seqs = Vec::with_capacity(want);
    while !(subscribed && seqs.len() >= want) {
        let text = c.recv().await;
        let msg: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{speak:?}: {e}: {text}"));
        if msg["id"] == "sub" {
            assert_eq!(
                msg,
                json!({"jsonrpc": "2.0", "result": {"subscribed": true}, "id": "sub"}),
                "{speak:?}"
            );
            subscribed = true;
            continue;
        }
        let Some((topic, data)) = event_of(speak, &msg) else {
            panic!("{speak:?}: unexpected message {text}");
        };
        // The concrete topic, for wildcard subscribers too.
        assert_eq!(topic, TOPIC, "{speak:?}: {text}");
        assert_eq!(data["event"]["type"], "new_approval", "{speak:?}: {text}");
        if speak == Speak::Holon {
            // Its reply is consumed by switchyard.
            let id = msg["id"].as_str().expect("a string id");
            assert!(id.starts_with('s') && id.len() > 1, "{text}");
            c.send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string())
                .await;
        }
        seqs.push(seq_of(&data));
    }
    (c, seqs)
}

fn assert_consecutive(who: &str, seqs: &[u64]) {
    for pair in seqs.windows(2) {
        assert_eq!(
            pair[1],
            pair[0] + 1,
            "{who}: events out of order or missing: {seqs:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_subscribers_in_every_dialect_share_one_upstream_stream() {
    let feed = Feed::start("{ interval_ms = 20 }", "").await;
    let none = SubscribeStreams {
        started: 0,
        open: 0,
    };
    // No subscriber, no stream.
    assert_eq!(feed.daemon.subscribe_streams(), none);

    let mut plan = Vec::new();
    for i in 0..20 {
        let pattern = if i % 2 == 0 { TOPIC } else { "daemon.>" };
        plan.push((Speak::JsonRpc, pattern));
    }
    for i in 0..10 {
        let pattern = if i % 2 == 0 { TOPIC } else { "*.events" };
        plan.push((Speak::Holon, pattern));
    }
    for i in 0..10 {
        let speak = if i % 2 == 0 {
            Speak::SidebandJson
        } else {
            Speak::SidebandCbor
        };
        plan.push((speak, if i < 5 { TOPIC } else { ">" }));
    }
    for i in 0..10 {
        plan.push((Speak::Ndjson, if i % 2 == 0 { TOPIC } else { "daemon.*" }));
    }
    assert_eq!(plan.len(), 50);

    const EVENTS: usize = 25;
    let mut tasks = Vec::new();
    for (i, (speak, pattern)) in plan.iter().copied().enumerate() {
        let c = TestClient::connect(speak, &feed.endpoint(speak)).await;
        tasks.push(tokio::spawn(async move {
            let (c, seqs) = subscribe_and_collect(c, pattern, EVENTS).await;
            (i, speak, c, seqs)
        }));
    }
    let mut clients = Vec::new();
    for task in tasks {
        let (i, speak, c, seqs) = task.await.expect("subscriber task");
        assert_consecutive(&format!("subscriber {i} ({speak:?})"), &seqs);
        clients.push((speak, c));
    }
    // Every subscriber attached; the daemon served ONE stream.
    let one = SubscribeStreams {
        started: 1,
        open: 1,
    };
    assert_eq!(feed.daemon.subscribe_streams(), one);
    let metrics = scrape(feed.admin).await;
    let daemon = [("upstream", "daemon")];
    assert_eq!(value(&metrics, "switchyard_feeds_open", &daemon), 1.0);
    let published = value(&metrics, "switchyard_events_published_total", &daemon);
    assert!(published >= EVENTS as f64, "published {published}");
    for (name, n) in [
        ("public", 20.0),
        ("holon", 10.0),
        ("sb", 10.0),
        ("local", 10.0),
    ] {
        assert_eq!(feed.subscriptions(name).await, n, "{name}");
    }

    // All but one leave: the stream stays.
    let (last_speak, last) = clients.pop().expect("a client");
    drop(clients);
    for name in ["public", "holon", "sb"] {
        let left = wait_value(
            feed.admin,
            SUBSCRIPTIONS,
            &[("listener", name)],
            0.0,
            SETTLE,
        )
        .await;
        assert_eq!(left, 0.0, "{name}");
    }
    assert_eq!(feed.subscriptions(listener(last_speak)).await, 1.0);
    assert_eq!(feed.daemon.subscribe_streams(), one);
    // The last one still gets events.
    let (last, more) = collect_more(last, 3).await;
    assert_consecutive("the last subscriber", &more);

    // The last one leaves: the daemon sees its stream end.
    drop(last);
    let ended = SubscribeStreams {
        started: 1,
        open: 0,
    };
    assert_eq!(feed.streams_become(ended).await, ended);
    let open = wait_value(
        feed.admin,
        "switchyard_feeds_open",
        &[("upstream", "daemon")],
        0.0,
        SETTLE,
    )
    .await;
    assert_eq!(open, 0.0);
    assert_eq!(feed.subscriptions(listener(last_speak)).await, 0.0);
    feed.stop().await;
}

/// Reads `want` more events from a subscribed client.
async fn collect_more(mut c: TestClient, want: usize) -> (TestClient, Vec<u64>) {
    let speak = c.speaks();
    let mut seqs = Vec::new();
    while seqs.len() < want {
        let text = c.recv().await;
        let msg: Value = serde_json::from_str(&text).expect("JSON");
        let (_, data) = event_of(speak, &msg).unwrap_or_else(|| panic!("{text}"));
        if speak == Speak::Holon {
            let id = msg["id"].as_str().expect("id");
            c.send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string())
                .await;
        }
        seqs.push(seq_of(&data));
    }
    (c, seqs)
}

/// The `seq` of an event frame, found without parsing the (large) frame.
fn quick_seq(text: &str) -> Option<u64> {
    let at = text.find("\"seq\":")? + "\"seq\":".len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Reads events until one has `seq >= target` (once a target is set);
/// returns every seq read. The subscribe reply (id "sub") is skipped.
async fn keep_up(
    mut ws: Ws,
    highest: Arc<AtomicU64>,
    mut target: watch::Receiver<u64>,
) -> Vec<u64> {
    let mut seqs = Vec::new();
    loop {
        let frame = tokio::time::timeout(SETTLE, ws.next())
            .await
            .expect("a reader waited too long for an event")
            .expect("a reader's connection ended")
            .expect("read");
        let Message::Text(text) = frame else {
            continue;
        };
        let Some(seq) = quick_seq(&text) else {
            assert!(
                text.contains("\"subscribed\":true"),
                "{}",
                &text[..text.len().min(200)]
            );
            continue;
        };
        seqs.push(seq);
        highest.fetch_max(seq, Ordering::Relaxed);
        let t = *target.borrow_and_update();
        if t > 0 && seq >= t {
            return seqs;
        }
    }
}

/// A WebSocket client with a tiny receive buffer, so that not reading fills
/// the gateway's outbox soon.
async fn tiny_window_client(url: &str) -> Ws {
    let addr: SocketAddr = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .expect("ws://IP:port/path");
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let stream = socket.connect(addr).await.expect("connect");
    let (ws, _) =
        tokio_tungstenite::client_async(url, tokio_tungstenite::MaybeTlsStream::Plain(stream))
            .await
            .expect("ws handshake");
    ws
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_is_dropped_then_closed_and_slows_nobody() {
    // 16 KiB events every 20 ms; a short slow-consumer timeout.
    let feed = Feed::start(
        "{ interval_ms = 20, pad_bytes = 16384 }",
        "outbox_capacity = 128\nslow_consumer_timeout_ms = 1000",
    )
    .await;
    let subscribe = |p: &str| {
        json!({"jsonrpc": "2.0", "method": "rpc.subscribe", "params": {"topic": p}, "id": "sub"})
            .to_string()
    };

    // The one that never reads (not even the subscribe reply).
    let mut slow = tiny_window_client(&feed.jsonrpc).await;
    slow.send(Message::Text(subscribe(TOPIC).into()))
        .await
        .expect("send");

    let highest = Arc::new(AtomicU64::new(0));
    let (set_target, target) = watch::channel(0u64);
    let mut readers = Vec::new();
    for i in 0..99 {
        let mut ws = common::connect(&feed.jsonrpc).await;
        let pattern = if i % 2 == 0 { TOPIC } else { "daemon.>" };
        ws.send(Message::Text(subscribe(pattern).into()))
            .await
            .expect("send");
        readers.push(tokio::spawn(keep_up(ws, highest.clone(), target.clone())));
    }
    assert_eq!(
        wait_value(
            feed.admin,
            SUBSCRIPTIONS,
            &[("listener", "public")],
            100.0,
            SETTLE
        )
        .await,
        100.0
    );

    // The slow one's events are dropped and counted…
    let slow_drops = [("listener", "public"), ("reason", "slow_consumer")];
    let dropped = wait_above(
        feed.admin,
        "switchyard_events_dropped_total",
        &slow_drops,
        0.0,
        Duration::from_secs(60),
    )
    .await;
    assert!(dropped > 0.0, "no slow_consumer drops counted");
    // …then it is closed after the slow-consumer timeout: its subscription
    // goes with its connection.
    assert_eq!(
        wait_value(
            feed.admin,
            SUBSCRIPTIONS,
            &[("listener", "public")],
            99.0,
            Duration::from_secs(60)
        )
        .await,
        99.0,
        "the slow subscriber was not closed"
    );
    // Memory per subscriber stayed within its outbox: at most
    // outbox_capacity events (about 16.5 KiB each as frames) were queued.
    let metrics = scrape(feed.admin).await;
    let high_water = value(
        &metrics,
        "switchyard_outbox_high_water",
        &[("listener", "public")],
    );
    assert!(high_water <= 128.0, "outbox high water {high_water}");
    let queued = value(
        &metrics,
        "switchyard_outbox_queued_bytes_max",
        &[("listener", "public")],
    );
    assert!(
        queued <= 128.0 * 17.0 * 1024.0,
        "{queued} bytes queued for one subscriber"
    );
    // Draining it now shows the end: a close (1008) or the connection gone.
    let end = drain(&mut slow).await;
    assert!(
        matches!(end, Ended::Close(1008) | Ended::Eof),
        "the slow subscriber ended with {end:?}"
    );

    // The others carry on and got every event, without a gap.
    let _ = set_target.send(highest.load(Ordering::Relaxed) + 10);
    for (i, reader) in readers.into_iter().enumerate() {
        let seqs = reader.await.expect("reader task");
        assert!(seqs.len() > 10, "reader {i}: {seqs:?}");
        assert_consecutive(&format!("reader {i}"), &seqs);
    }
    // One upstream stream all along.
    assert_eq!(feed.daemon.subscribe_streams().started, 1);
    feed.stop().await;
}

/// Reads a connection to its end; returns how it ended.
async fn drain(ws: &mut Ws) -> Ended {
    loop {
        match tokio::time::timeout(SETTLE, ws.next()).await {
            Err(_) => panic!("the slow subscriber's connection did not end"),
            Ok(Some(Ok(Message::Close(f)))) => {
                return Ended::Close(f.map_or(1005, |f| u16::from(f.code)))
            }
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_)) | None) => return Ended::Eof,
        }
    }
}
