//! A gateway whose upstream `daemon` (the reference NDJSON daemon) has its
//! `Subscribe` stream configured as the pub/sub feed `daemon.events`, with
//! one listener per client dialect, and subscriber helpers that speak each
//! dialect (tests/pubsub_feed.rs, tests/pubsub_slow.rs).
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::daemon::{Daemon, DaemonOptions, SubscribeStreams};

use super::clients::{Speak, TestClient};
use super::eventually;
use super::scrape::{scrape, value};

pub const TOPIC: &str = "daemon.events";
pub const SUBSCRIPTIONS: &str = "switchyard_subscriptions";
/// How long a gauge or the daemon may take to settle.
pub const SETTLE: Duration = Duration::from_secs(30);

/// A gateway with one listener per client dialect, all routed to the
/// reference NDJSON daemon, whose `Subscribe` is a feed.
pub struct Feed {
    pub dir: tempfile::TempDir,
    /// `None` only while [`Feed::restart_daemon`] runs.
    daemon: Option<Daemon>,
    pub gateway: Running,
    pub admin: SocketAddr,
    pub jsonrpc: String,
    pub holon: String,
    pub sideband: String,
    pub ndjson: PathBuf,
}

impl Feed {
    /// `feed_params`: the TOML inline table passed to `Subscribe`;
    /// `listener_extra`: lines added to every listener.
    pub async fn start(feed_params: &str, listener_extra: &str) -> Feed {
        let backoff = "backoff_initial_ms = 50\nbackoff_max_ms = 200";
        Feed::start_with(feed_params, listener_extra, backoff).await
    }

    /// [`Feed::start`] with `upstream_keys` (which must set the backoff)
    /// in the upstream's table.
    pub async fn start_with(feed_params: &str, listener_extra: &str, upstream_keys: &str) -> Feed {
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
{upstream_keys}

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
        super::wait_connected(&gateway, "daemon").await;
        Feed {
            dir,
            daemon: Some(daemon),
            gateway,
            admin,
            jsonrpc,
            holon,
            sideband,
            ndjson,
        }
    }

    pub fn endpoint(&self, speak: Speak) -> String {
        match speak {
            Speak::JsonRpc => self.jsonrpc.clone(),
            Speak::Holon => self.holon.clone(),
            Speak::SidebandJson | Speak::SidebandCbor => self.sideband.clone(),
            Speak::Ndjson => self.ndjson.display().to_string(),
            Speak::Http => panic!("the feed harness has no jsonrpc-http listener"),
        }
    }

    pub async fn subscriptions(&self, listener: &str) -> f64 {
        value(
            &scrape(self.admin).await,
            SUBSCRIPTIONS,
            &[("listener", listener)],
        )
    }

    /// Waits until the daemon's stream counts are `want`.
    pub async fn streams_become(&self, want: SubscribeStreams) -> SubscribeStreams {
        eventually(SETTLE, || self.daemon().subscribe_streams() == want).await;
        self.daemon().subscribe_streams()
    }

    pub fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().expect("a daemon")
    }

    /// Stops the daemon abruptly (every connection dropped, the feed's
    /// stream included) and starts a fresh one on the same socket.
    pub async fn restart_daemon(&mut self) {
        let socket = self.dir.path().join("daemon.sock");
        if let Some(old) = self.daemon.take() {
            old.stop().await;
        }
        let fresh = Daemon::start(&socket, DaemonOptions::default())
            .await
            .expect("daemon restart");
        self.daemon = Some(fresh);
    }

    pub async fn stop(self) {
        self.gateway.shutdown().await;
        if let Some(daemon) = self.daemon {
            daemon.stop().await;
        }
    }
}

/// The listener name of a dialect.
pub fn listener(speak: Speak) -> &'static str {
    match speak {
        Speak::JsonRpc => "public",
        Speak::Holon => "holon",
        Speak::SidebandJson | Speak::SidebandCbor => "sb",
        Speak::Ndjson => "local",
        Speak::Http => panic!("the feed harness has no jsonrpc-http listener"),
    }
}

/// One event as a subscriber of `speak` received it: the topic and the
/// published data (the `result` of the daemon's event line).
pub fn event_of(speak: Speak, msg: &Value) -> Option<(String, Value)> {
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

pub fn seq_of(data: &Value) -> u64 {
    data["event"]["data"]["seq"]
        .as_u64()
        .unwrap_or_else(|| panic!("an event without seq: {data}"))
}

/// Subscribes `c` to `pattern`, then collects `want` events; returns the
/// client (still open) and the seqs received.
pub async fn subscribe_and_collect(
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

/// Asserts that `seqs` grow by exactly one.
pub fn assert_consecutive(who: &str, seqs: &[u64]) {
    for pair in seqs.windows(2) {
        assert_eq!(
            pair[1],
            pair[0] + 1,
            "{who}: events out of order or missing: {seqs:?}"
        );
    }
}

/// Reads `want` more events from a subscribed client.
pub async fn collect_more(mut c: TestClient, want: usize) -> (TestClient, Vec<u64>) {
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
