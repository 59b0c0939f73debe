//! What clients' pub/sub patterns can make switchyard hold: connections
//! subscribing distinct deep patterns (255 bytes, 16 tokens, sharing no
//! trie node) with `rpc.subscribe.batch` until refused make a switchyard
//! child process grow by at most the documented bound in bytes of index
//! (`index_bytes_per_connection` per connection, `index_bytes_per_ip` per
//! client address, `index_bytes_total` in all) plus slack for what any
//! client costs (buffers, allocator caches), measured as the child's RSS.
//! Each is refused with `resource_exhausted` (-32007) naming the bound;
//! a reload applies new bounds to the next subscribe.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{json, send, Ws};
use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::MaybeTlsStream;

/// Patterns per `rpc.subscribe.batch`, as in the probe; then batches of
/// [`FINE`] until refused again, to come close to the bound.
const BATCH: usize = 250;
const FINE: usize = 25;
/// Each pattern: 255 bytes in 16 tokens (the default token cap).
const BYTES: usize = 255;
const TOKENS: usize = 16;
/// What a pattern accounts for: `2 × bytes + 128 × tokens + 256`.
const COST: usize = 2 * BYTES + 128 * TOKENS + 256;
/// The default `index_bytes_per_connection`.
const PER_CONNECTION: usize = 1 << 20;
/// RSS a client may add besides its patterns: its buffers (a 64 KiB
/// request and reply per batch), the allocator's caches. Generous: the
/// bound is about memory that grows with the patterns, not this.
const SLACK: usize = 24 << 20;
/// How long one reply may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_patterns_until_refused_grow_the_gateway_by_at_most_the_connection_bound() {
    let connections = 16;
    // The defaults only: no [pubsub] section.
    let gateway = Gateway::start("").await;
    let mut clients = Vec::new();
    for _ in 0..connections {
        clients.push(gateway.connect("127.0.0.1").await);
    }
    let before = gateway.rss();
    let mut refusals = Vec::new();
    for (c, ws) in clients.iter_mut().enumerate() {
        refusals.push(subscribe_until_refused(ws, &format!("c{c}")).await);
    }
    let grown = gateway.rss().saturating_sub(before);
    let bound = connections * PER_CONNECTION + SLACK;
    assert!(
        grown <= bound,
        "the gateway grew by {} KiB for {connections} connections, more than \
         {connections} × {} KiB + {} KiB slack: {refusals:?}",
        grown >> 10,
        PER_CONNECTION >> 10,
        SLACK >> 10
    );
    for refusal in &refusals {
        assert_eq!(refusal.code, -32007, "{refusal:?}");
        assert!(
            refusal.detail.contains("per connection") && refusal.detail.contains("bytes of index"),
            "{refusal:?}"
        );
        // Refused at the bound, not before: less than one more pattern's
        // cost was left.
        let held = refusal.accepted * COST;
        assert!(
            held <= PER_CONNECTION && held + COST * FINE > PER_CONNECTION,
            "{refusal:?}"
        );
    }
    drop(gateway);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_address_and_total_bounds_hold_the_whole_gateway() {
    const PER_IP: usize = 3 << 20;
    const TOTAL: usize = 5 << 20;
    let gateway = Gateway::start(&format!(
        "[pubsub]\nindex_bytes_per_ip = {PER_IP}\nindex_bytes_total = {TOTAL}\n"
    ))
    .await;
    // Eight connections from each of two addresses: 16 MiB of connection
    // bounds, 3 MiB per address, 5 MiB in all.
    let mut first = Vec::new();
    let mut second = Vec::new();
    for _ in 0..8 {
        first.push(gateway.connect("127.0.0.1").await);
        second.push(gateway.connect("127.0.0.2").await);
    }
    let before = gateway.rss();
    let mut accepted = [0, 0];
    let mut last = Vec::new();
    for (group, clients) in [&mut first, &mut second].into_iter().enumerate() {
        let n = clients.len();
        for (i, ws) in clients.iter_mut().enumerate() {
            let refusal = subscribe_until_refused(ws, &format!("g{group}c{i}")).await;
            assert_eq!(refusal.code, -32007, "{refusal:?}");
            accepted[group] += refusal.accepted;
            if i + 1 == n {
                last.push(refusal);
            }
        }
    }
    // The first address's last connections found its bound taken; the
    // second's, the total.
    assert!(last[0].detail.contains("per address"), "{last:?}");
    assert!(
        last[1].detail.contains("as many subscriptions as it may"),
        "{last:?}"
    );
    let grown = gateway.rss().saturating_sub(before);
    assert!(
        grown <= TOTAL + SLACK,
        "the gateway grew by {} KiB, more than {} KiB + {} KiB slack",
        grown >> 10,
        TOTAL >> 10,
        SLACK >> 10
    );
    assert!(accepted[0] * COST <= PER_IP, "{accepted:?}");
    assert!((accepted[0] + accepted[1]) * COST <= TOTAL, "{accepted:?}");
    assert!(
        (accepted[0] + accepted[1] + 2 * FINE) * COST > TOTAL,
        "filled to the total bound: {accepted:?}"
    );
    drop(gateway);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_new_bounds_to_the_next_subscribe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("switchyard.toml");
    let write = |tokens: usize| {
        let text = format!(
            "[listeners.j]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\nallow_topics = [\">\"]\n\n\
             [pubsub]\nmax_pattern_tokens = {tokens}\n"
        );
        std::fs::write(&file, text).expect("write config");
    };
    write(4);
    let cfg = switchyard::config::Config::load(Some(&file)).expect("config");
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("j").expect("url");
    let gateway = bound.reload_from(Some(file.clone())).spawn();
    let mut ws = common::connect(&url).await;
    let subscribe = |topic: &str| {
        serde_json::json!({
            "jsonrpc": "2.0", "method": "rpc.subscribe", "id": topic,
            "params": {"topic": topic},
        })
        .to_string()
    };
    send(&mut ws, &subscribe("a.b.c.d")).await;
    assert_eq!(json(&recv(&mut ws).await)["result"]["subscribed"], true);
    send(&mut ws, &subscribe("a.b.c.d.e")).await;
    let refused = json(&recv(&mut ws).await);
    assert_eq!(refused["error"]["code"], -32007, "{refused}");
    assert_eq!(
        refused["error"]["data"], "topic has 5 tokens, at most 4 are allowed",
        "{refused}"
    );
    write(8);
    gateway.reload().await.expect("reload");
    send(&mut ws, &subscribe("a.b.c.d.e")).await;
    let reply = json(&recv(&mut ws).await);
    assert_eq!(reply["result"]["subscribed"], true, "{reply}");
    // Down to 2: held patterns stay, new ones past it are refused.
    write(2);
    gateway.reload().await.expect("reload");
    send(&mut ws, &subscribe("x.y.z")).await;
    assert_eq!(json(&recv(&mut ws).await)["error"]["code"], -32007);
    let held = common::metric_value(&gateway, "switchyard_subscriptions", &[("listener", "j")]);
    assert_eq!(held, 2.0);
    gateway.shutdown().await;
}

/// A refused subscribe: how many patterns the connection held by then,
/// and the error.
#[derive(Debug)]
struct Refusal {
    accepted: usize,
    code: i64,
    detail: String,
}

/// Subscribes distinct deep patterns named after `prefix` on `ws`: batches
/// of [`BATCH`] until one is refused, then of [`FINE`] until one is
/// refused again (at most 4,000 patterns in all).
async fn subscribe_until_refused(ws: &mut Ws, prefix: &str) -> Refusal {
    let mut accepted = 0;
    let mut next = 0;
    let mut refusal = None;
    for size in [BATCH, FINE] {
        while next < 4_000 {
            let topics: Vec<String> = (next..next + size)
                .map(|i| deep_pattern(&format!("{prefix}p{i}")))
                .collect();
            next += size;
            let request = serde_json::json!({
                "jsonrpc": "2.0", "method": "rpc.subscribe.batch", "id": next,
                "params": {"topics": topics},
            });
            send(ws, &request.to_string()).await;
            let reply = json(&recv(ws).await);
            assert_eq!(reply["id"], next, "{reply}");
            if reply.get("result").is_some() {
                accepted += size;
                continue;
            }
            refusal = Some(Refusal {
                accepted,
                code: reply["error"]["code"].as_i64().unwrap_or_default(),
                detail: reply["error"]["data"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            });
            break;
        }
    }
    refusal.unwrap_or_else(|| panic!("{prefix}: {accepted} patterns accepted, none refused"))
}

/// A pattern of exactly [`BYTES`] bytes in [`TOKENS`] tokens, its first
/// token `head` (so that no two share a trie node).
fn deep_pattern(head: &str) -> String {
    let width = (BYTES - (TOKENS - 1) - head.len()) / (TOKENS - 1);
    let mut pattern = head.to_owned();
    for t in 1..TOKENS {
        pattern.push('.');
        let filler = char::from(b'a' + (t % 26) as u8);
        pattern.extend(std::iter::repeat_n(filler, width));
    }
    while pattern.len() < BYTES {
        pattern.push('z');
    }
    assert_eq!(pattern.split('.').count(), TOKENS);
    pattern
}

/// The next text frame, waiting at most [`PATIENCE`].
async fn recv(ws: &mut Ws) -> String {
    loop {
        let frame = tokio::time::timeout(PATIENCE, ws.next())
            .await
            .expect("a reply in time")
            .expect("the connection is open")
            .expect("a frame");
        if let Message::Text(text) = frame {
            return text.to_string();
        }
    }
}

/// A switchyard child process (one JSON-RPC WebSocket listener, nothing
/// upstream: pub/sub is served by switchyard itself), killed when done.
struct Gateway {
    child: common::child::Gateway,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// Starts switchyard with `extra` configuration; returns once its
    /// listener accepts.
    async fn start(extra: &str) -> Gateway {
        let dir = tempfile::tempdir().expect("tempdir");
        let child = common::child::Gateway::run(dir.path(), "gateway", |port| {
            format!(
                "[listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:{port}\"\n\
                 path = \"/rpc\"\nallow_topics = [\">\"]\n{extra}"
            )
        })
        .await;
        Gateway { child, _dir: dir }
    }

    /// A WebSocket client connecting from `source` (a loopback address).
    async fn connect(&self, source: &str) -> Ws {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        let source: SocketAddr = format!("{source}:0").parse().expect("address");
        socket.bind(source).expect("bind the source address");
        let stream = socket.connect(self.child.addr).await.expect("connect");
        let (ws, _) =
            tokio_tungstenite::client_async(self.child.url.as_str(), MaybeTlsStream::Plain(stream))
                .await
                .expect("upgrade");
        ws
    }

    /// The child's resident set, in bytes.
    fn rss(&self) -> usize {
        self.child.rss_kib("VmRSS") << 10
    }
}
