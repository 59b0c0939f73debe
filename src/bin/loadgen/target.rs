//! What the load is aimed at: the floors and the gateway targets.
//!
//! Each scenario starts a fresh instance of every target it measures (so
//! peak RSS and CPU belong to that scenario alone) and drops it afterwards:
//! [`Live`] owns the child processes, the in-process echo server and the
//! temp dir, and cleans all of them up on drop.
//!
//! Adding a target (holon-rpc listener, Sideband, NDJSON listener) is one
//! entry in [`standard`] with its [`Server`] and [`Wire`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use switchyard::dialect::Dialect;
use tokio::net::UnixStream;
use tokio::time::Instant;

use super::conn::{Buffers, Endpoint};
use super::echo::EchoServer;
use super::procs::ChildGuard;
use super::wire::{Reply, Wire};

/// How long a started process may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// Pause between readiness probes.
const PROBE_EVERY: Duration = Duration::from_millis(20);

/// What a target's numbers are compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) enum Role {
    /// Floor A: the reference daemon over NDJSON, no gateway.
    FloorA,
    /// Floor B: a bare in-process WebSocket echo.
    FloorB,
    /// A switchyard listener in front of the daemon.
    Gateway,
}

/// What serves a target's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Server {
    /// The reference daemon process, connected to directly.
    Daemon,
    /// The in-process WebSocket echo.
    WsEcho,
    /// A switchyard process with one listener of this dialect, in front of
    /// a daemon process.
    Switchyard(Dialect),
}

/// One target.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TargetSpec {
    /// Row label.
    pub(crate) name: &'static str,
    /// Floor or gateway.
    pub(crate) role: Role,
    /// What serves it.
    pub(crate) server: Server,
    /// What its clients speak.
    pub(crate) wire: Wire,
}

/// Settings every target start needs.
#[derive(Debug, Clone)]
pub(crate) struct StartOpts {
    /// The `switchyard` binary (also runs the daemon).
    pub(crate) switchyard: PathBuf,
    /// Upstream connections from switchyard to the daemon.
    pub(crate) pool_size: usize,
}

/// A started target. Dropping it kills its processes, stops the echo server
/// and removes its temp dir, in that order.
#[derive(Debug)]
pub(crate) struct Live {
    /// Where clients connect.
    pub(crate) endpoint: Endpoint,
    /// The process whose CPU and memory the target is judged by: the daemon
    /// for floor A, switchyard for gateways, none for the in-process echo.
    pub(crate) server_pid: Option<u32>,
    /// The daemon behind a gateway.
    pub(crate) daemon_pid: Option<u32>,
    /// Gateway first, so it is killed before its upstream.
    children: Vec<ChildGuard>,
    _echo: Option<EchoServer>,
    _dir: tempfile::TempDir,
}

/// The floors and the gateway targets, in table order.
pub(crate) fn standard() -> Vec<TargetSpec> {
    vec![
        TargetSpec {
            name: "A: daemon direct (NDJSON)",
            role: Role::FloorA,
            server: Server::Daemon,
            wire: Wire::JsonRpc,
        },
        TargetSpec {
            name: "B: WebSocket echo",
            role: Role::FloorB,
            server: Server::WsEcho,
            wire: Wire::JsonRpc,
        },
        switchyard_jsonrpc(),
        // Later: holon-rpc listener, Sideband listener, NDJSON listener.
    ]
}

/// switchyard's JSON-RPC WebSocket listener → NDJSON daemon.
pub(crate) fn switchyard_jsonrpc() -> TargetSpec {
    TargetSpec {
        name: "switchyard jsonrpc-ws → ndjson",
        role: Role::Gateway,
        server: Server::Switchyard(Dialect::JsonRpc),
        wire: Wire::JsonRpc,
    }
}

// === impl TargetSpec ===

impl TargetSpec {
    /// Starts a fresh instance and waits until it answers.
    pub(crate) async fn start(&self, opts: &StartOpts) -> anyhow::Result<Live> {
        let dir = tempfile::Builder::new()
            .prefix("loadgen-")
            .tempdir()
            .context("creating a temp dir")?;
        match self.server {
            Server::WsEcho => {
                let echo = EchoServer::start().await.context("starting the echo")?;
                Ok(Live {
                    endpoint: ws_endpoint(echo.addr(), "/"),
                    server_pid: None,
                    daemon_pid: None,
                    children: Vec::new(),
                    _echo: Some(echo),
                    _dir: dir,
                })
            }
            Server::Daemon => {
                let (daemon, socket) = start_daemon(opts, dir.path()).await?;
                Ok(Live {
                    endpoint: Endpoint::Unix(socket),
                    server_pid: Some(daemon.id()),
                    daemon_pid: None,
                    children: vec![daemon],
                    _echo: None,
                    _dir: dir,
                })
            }
            Server::Switchyard(dialect) => {
                let (daemon, socket) = start_daemon(opts, dir.path()).await?;
                let (gateway, endpoint) =
                    start_switchyard(opts, dialect, &socket, dir.path()).await?;
                let mut live = Live {
                    endpoint,
                    server_pid: Some(gateway.id()),
                    daemon_pid: Some(daemon.id()),
                    children: vec![gateway, daemon],
                    _echo: None,
                    _dir: dir,
                };
                probe_echo(&live.endpoint, self.wire, &mut live.children).await?;
                Ok(live)
            }
        }
    }
}

fn ws_endpoint(addr: SocketAddr, path: &str) -> Endpoint {
    Endpoint::Ws {
        addr,
        url: format!("ws://{addr}{path}"),
    }
}

/// `switchyard daemon --socket DIR/daemon.sock`, once it accepts.
async fn start_daemon(opts: &StartOpts, dir: &Path) -> anyhow::Result<(ChildGuard, PathBuf)> {
    let socket = dir.join("daemon.sock");
    let mut cmd = Command::new(&opts.switchyard);
    cmd.arg("daemon").arg("--socket").arg(&socket);
    let mut daemon = ChildGuard::spawn("daemon", cmd, &dir.join("daemon.log"))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    while UnixStream::connect(&socket).await.is_err() {
        daemon.check_alive()?;
        if Instant::now() >= deadline {
            bail!("the daemon did not listen on {} in time", socket.display());
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
    Ok((daemon, socket))
}

/// `switchyard run --config DIR/switchyard.toml` on a free loopback port.
async fn start_switchyard(
    opts: &StartOpts,
    dialect: Dialect,
    socket: &Path,
    dir: &Path,
) -> anyhow::Result<(ChildGuard, Endpoint)> {
    let addr = free_port().context("picking a free port")?;
    let path = "/rpc";
    let toml = gateway_toml(dialect, addr, path, socket, opts.pool_size);
    let config = dir.join("switchyard.toml");
    std::fs::write(&config, toml).context("writing the switchyard config")?;
    let mut cmd = Command::new(&opts.switchyard);
    cmd.arg("run").arg("--config").arg(&config);
    let gateway = ChildGuard::spawn("switchyard", cmd, &dir.join("switchyard.log"))?;
    Ok((gateway, ws_endpoint(addr, path)))
}

/// A port that was free a moment ago (bound to 127.0.0.1:0, then closed).
fn free_port() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// One listener and the daemon upstream, with admission limits raised far
/// above any scenario so that only the data path is measured.
fn gateway_toml(
    dialect: Dialect,
    addr: SocketAddr,
    path: &str,
    socket: &Path,
    pool: usize,
) -> String {
    format!(
        r#"[gateway]
shutdown_grace_ms = 100

[log]
level = "warn"

[listeners.bench]
dialect = "{dialect}"
address = "{addr}"
path = "{path}"
max_in_flight = 4096
outbox_capacity = 4096

[upstreams.daemon]
dialect = "ndjson"
socket = "{socket}"
pool_size = {pool}
max_in_flight_per_connection = 65536
max_pending = 65536
max_queued = 65536
backoff_initial_ms = 20
backoff_max_ms = 200

[[routes]]
listener = "bench"
upstream = "daemon"
"#,
        dialect = dialect.as_str(),
        socket = socket.display(),
    )
}

/// Waits until a gateway answers an echo through its upstream.
async fn probe_echo(
    endpoint: &Endpoint,
    wire: Wire,
    children: &mut [ChildGuard],
) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        for child in children.iter_mut() {
            child.check_alive()?;
        }
        match echo_once(endpoint, wire).await {
            Ok(()) => return Ok(()),
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
    let tail = children
        .first()
        .map(ChildGuard::log_tail)
        .unwrap_or_default();
    bail!("switchyard did not answer in time (last: {last}){tail}")
}

/// One request on a fresh connection, with its reply checked.
async fn echo_once(endpoint: &Endpoint, wire: Wire) -> anyhow::Result<()> {
    let (mut tx, mut rx) = endpoint.connect(Buffers::Small).await?;
    tx.feed(wire.request(1, 42, "")).await?;
    tx.flush().await?;
    let reply = tokio::time::timeout(Duration::from_secs(2), rx.recv())
        .await
        .context("no reply within 2 s")?
        .context("connection closed")??;
    match wire.parse(reply.as_str()) {
        Reply::Echo { id: 1, nonce: 42 } => Ok(()),
        other => bail!("unexpected reply {other:?}: {}", reply.as_str()),
    }
}
