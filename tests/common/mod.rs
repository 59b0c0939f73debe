//! Shared harness for the integration tests: a reference daemon in a temp
//! dir, a gateway bound to port 0, and a raw WebSocket client.
#![allow(dead_code, unreachable_pub)]

pub mod child;
pub mod clients;
pub mod curl;
pub mod demo;
pub mod feed;
pub mod http;
pub mod nats;
pub mod node;
pub mod persist_node;
pub mod pubsub_node;
pub mod scrape;
pub mod spec;

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use switchyard::app::{self, Running};
use switchyard::config::Config;
use switchyard::daemon::{Daemon, DaemonOptions};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long a test waits for any single expected frame.
pub const STEP: Duration = Duration::from_secs(10);

/// A gateway (one JSON-RPC WS listener named `public`) in front of a
/// reference daemon (upstream `daemon`), all in a temp dir.
pub struct Stack {
    pub dir: tempfile::TempDir,
    pub daemon: Option<Daemon>,
    pub socket: PathBuf,
    pub url: String,
    pub gateway: Running,
}

impl Stack {
    /// Starts a stack; `listener_extra` and `upstream_extra` are TOML lines
    /// added to the listener and upstream tables.
    pub async fn start(listener_extra: &str, upstream_extra: &str, opts: DaemonOptions) -> Stack {
        Stack::start_with("", listener_extra, upstream_extra, opts)
            .await
            .0
    }

    /// [`start`](Self::start) with an admin listener (port 0) too; returns
    /// its address, for `/metrics` over a real socket (`scrape`).
    pub async fn start_with_admin(
        listener_extra: &str,
        upstream_extra: &str,
        opts: DaemonOptions,
    ) -> (Stack, std::net::SocketAddr) {
        let admin = "[admin]\naddress = \"127.0.0.1:0\"\n";
        let (stack, addr) = Stack::start_with(admin, listener_extra, upstream_extra, opts).await;
        (stack, addr.expect("admin listener"))
    }

    async fn start_with(
        head: &str,
        listener_extra: &str,
        upstream_extra: &str,
        opts: DaemonOptions,
    ) -> (Stack, Option<std::net::SocketAddr>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("daemon.sock");
        let daemon = Daemon::start(&socket, opts).await.expect("daemon");
        let toml = format!(
            "{head}{}",
            stack_toml(&socket, listener_extra, upstream_extra)
        );
        let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let bound = app::bind(cfg).await.expect("bind");
        let url = bound.ws_url("public").expect("url");
        let admin = bound.admin_addr();
        let gateway = bound.spawn();
        wait_connected(&gateway, "daemon").await;
        let stack = Stack {
            dir,
            daemon: Some(daemon),
            socket,
            url,
            gateway,
        };
        (stack, admin)
    }

    pub async fn client(&self) -> Ws {
        connect(&self.url).await
    }

    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_value(&self.gateway, name, labels)
    }
}

pub fn stack_toml(socket: &Path, listener_extra: &str, upstream_extra: &str) -> String {
    format!(
        r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"
{listener_extra}

[upstreams.daemon]
dialect = "ndjson"
socket = "{socket}"
backoff_initial_ms = 50
backoff_max_ms = 200
{upstream_extra}

[[routes]]
listener = "public"
upstream = "daemon"
"#,
        socket = socket.display()
    )
}

/// A gateway in front of a hand-written NDJSON upstream: `serve` gets the
/// Unix listener bound in a temp dir; the gateway runs the
/// [`stack_toml`] listener with `upstream_extra` in its upstream table.
/// Returns the temp dir (keep it), the gateway and its WebSocket URL.
pub async fn front_of<F>(
    upstream_extra: &str,
    serve: impl FnOnce(tokio::net::UnixListener) -> F,
) -> (tempfile::TempDir, Running, String)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("upstream.sock");
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
    tokio::spawn(serve(listener));
    let toml = stack_toml(&socket, "", upstream_extra);
    let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    (dir, bound.spawn(), url)
}

/// Waits until the upstream has at least one live connection.
pub async fn wait_connected(gateway: &Running, upstream: &str) {
    let up = gateway.upstream(upstream).expect("upstream");
    // Generous: the machine may be busy; this returns as soon as it holds.
    for _ in 0..2000 {
        if up.connected() > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("upstream {upstream} never connected");
}

pub async fn connect(url: &str) -> Ws {
    let (ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("connect");
    ws
}

/// A WebSocket client with a tiny receive buffer, so that not reading fills
/// the gateway's outbox soon.
pub async fn connect_tiny_window(url: &str) -> Ws {
    let addr: std::net::SocketAddr = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .expect("ws://IP:port/path");
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let stream = socket.connect(addr).await.expect("connect");
    let (ws, _) = tokio_tungstenite::client_async(url, MaybeTlsStream::Plain(stream))
        .await
        .expect("ws handshake");
    ws
}

pub async fn send(ws: &mut Ws, text: &str) {
    ws.send(Message::Text(text.into())).await.expect("send");
}

/// The next text frame (pings and pongs skipped), over any transport.
pub async fn recv<S>(ws: &mut WebSocketStream<S>) -> String
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let frame = tokio::time::timeout(STEP, ws.next())
            .await
            .expect("timed out waiting for a frame")
            .expect("connection ended")
            .expect("read");
        match frame {
            Message::Text(t) => return t.to_string(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
}

/// Asserts that no text frame arrives within `wait`.
pub async fn expect_silence(ws: &mut Ws, wait: Duration) {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => return,
            // Keep reading through pings, so tungstenite answers them.
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
            Ok(other) => panic!("expected silence, got {other:?}"),
        }
    }
}

/// Waits for a close frame and returns its code.
pub async fn expect_close(ws: &mut Ws) -> (u16, String) {
    loop {
        let frame = tokio::time::timeout(STEP, ws.next())
            .await
            .expect("timed out waiting for close");
        match frame {
            Some(Ok(Message::Close(Some(f)))) => return (u16::from(f.code), f.reason.to_string()),
            Some(Ok(Message::Close(None))) => return (u16::from(CloseCode::Status), String::new()),
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    }
}

pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Reads a counter or gauge from the gateway's registry: `name{labels}`
/// summed over the unnamed labels. A series that does not exist is an
/// error, not 0, so that an assertion of `0.0` cannot pass after a rename.
pub fn metric_value(gateway: &Running, name: &str, labels: &[(&str, &str)]) -> f64 {
    try_metric_value(gateway, name, labels).unwrap_or_else(|| {
        let families = gateway.metrics().registry().gather();
        let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
        panic!("no series {name}{labels:?} in the registry; families present: {names:?}")
    })
}

/// The sum of the counter or gauge series `name` carrying every label of
/// `labels`, or `None` when no such series exists (yet).
pub fn try_metric_value(gateway: &Running, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let families = gateway.metrics().registry().gather();
    let mut total = None;
    for family in families.iter().filter(|f| f.name() == name) {
        for m in family.get_metric() {
            let matches = labels.iter().all(|(k, v)| {
                m.get_label()
                    .iter()
                    .any(|l| l.name() == *k && l.value() == *v)
            });
            if matches {
                let v = match family.get_field_type() {
                    prometheus::proto::MetricType::COUNTER => m.get_counter().get_value(),
                    prometheus::proto::MetricType::GAUGE => m.get_gauge().get_value(),
                    other => panic!("{name} is a {other:?}, not a counter or gauge"),
                };
                total = Some(total.unwrap_or(0.0) + v);
            }
        }
    }
    total
}

/// How many samples the histogram `name` holds, summed over its series.
pub fn histogram_count(gateway: &Running, name: &str) -> u64 {
    let families = gateway.metrics().registry().gather();
    families
        .iter()
        .filter(|f| f.name() == name)
        .flat_map(|f| f.get_metric())
        .map(|m| m.get_histogram().get_sample_count())
        .sum()
}

/// Polls `f` until it returns true or `within` passes.
pub async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}
