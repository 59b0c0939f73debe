//! Starting the processes a target needs: the reference daemons (NDJSON on
//! a Unix socket, or JSON-RPC over WebSocket), floor C's relay and switchyard with a
//! generated configuration, each waited for until it accepts connections.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use switchyard::dialect::Dialect;
use tokio::net::{TcpStream, UnixStream};
use tokio::time::Instant;

use super::super::conn::Endpoint;
use super::super::procs::ChildGuard;
use super::{StartOpts, PROBE_EVERY, READY_TIMEOUT};

/// The path switchyard's WebSocket listeners serve.
const LISTENER_PATH: &str = "/rpc";

/// What switchyard forwards to.
#[derive(Debug, Clone)]
pub(super) enum Upstream {
    /// The NDJSON daemon's Unix socket.
    Ndjson(PathBuf),
    /// The WebSocket daemon's `ws://…/rpc` URL.
    JsonRpcWs(String),
}

/// `switchyard daemon --socket DIR/daemon.sock`, once it accepts.
pub(super) async fn ndjson_daemon(
    opts: &StartOpts,
    dir: &Path,
) -> anyhow::Result<(ChildGuard, PathBuf)> {
    let socket = dir.join("daemon.sock");
    let mut cmd = Command::new(&opts.switchyard);
    cmd.arg("daemon").arg("--socket").arg(&socket);
    let mut daemon = ChildGuard::spawn("daemon", cmd, &dir.join("daemon.log"))?;
    until_accepting(&mut daemon, &socket).await?;
    Ok((daemon, socket))
}

/// Floor C: this loadgen executable as a byte relay from `DIR/relay.sock`
/// to the daemon's socket, once it accepts.
pub(super) async fn relay(daemon: &Path, dir: &Path) -> anyhow::Result<(ChildGuard, PathBuf)> {
    let socket = dir.join("relay.sock");
    let exe = std::env::current_exe().context("locating the loadgen executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("--relay-listen")
        .arg(&socket)
        .arg("--relay-to")
        .arg(daemon);
    let mut relay = ChildGuard::spawn("relay", cmd, &dir.join("relay.log"))?;
    until_accepting(&mut relay, &socket).await?;
    Ok((relay, socket))
}

/// Waits until `child` accepts connections on the Unix `socket`.
async fn until_accepting(child: &mut ChildGuard, socket: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    while UnixStream::connect(socket).await.is_err() {
        child.check_alive()?;
        if Instant::now() >= deadline {
            bail!(
                "the {} did not listen on {} in time",
                child.name(),
                socket.display()
            );
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
    Ok(())
}

/// `switchyard daemon --ws-listen ADDR` (JSON-RPC) on a free loopback
/// port, once it accepts; returns its URL.
pub(super) async fn ws_daemon(
    opts: &StartOpts,
    dir: &Path,
) -> anyhow::Result<(ChildGuard, String)> {
    let addr = free_port().context("picking a free port")?;
    let mut cmd = Command::new(&opts.switchyard);
    cmd.arg("daemon")
        .arg("--ws-listen")
        .arg(addr.to_string())
        .arg("--ws-dialect")
        .arg("jsonrpc");
    let mut daemon = ChildGuard::spawn("ws daemon", cmd, &dir.join("ws-daemon.log"))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    while TcpStream::connect(addr).await.is_err() {
        daemon.check_alive()?;
        if Instant::now() >= deadline {
            bail!("the WebSocket daemon did not listen on {addr} in time");
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
    Ok((daemon, format!("ws://{addr}/rpc")))
}

/// `switchyard run --config DIR/switchyard.toml` with one `listener`
/// (a free loopback port, or a socket in `dir` for NDJSON) in front of
/// `upstream`. Returns as soon as it is started; the caller probes it.
pub(super) fn switchyard(
    opts: &StartOpts,
    listener: Dialect,
    sideband_cbor: bool,
    upstream: &Upstream,
    dir: &Path,
) -> anyhow::Result<(ChildGuard, Endpoint)> {
    let (listen, endpoint) = if listener.is_websocket() {
        let addr = free_port().context("picking a free port")?;
        let listen = format!("address = \"{addr}\"\npath = \"{LISTENER_PATH}\"");
        (listen, ws_endpoint(addr, LISTENER_PATH))
    } else {
        let socket = dir.join("gateway.sock");
        let listen = format!("socket = \"{}\"", socket.display());
        (listen, Endpoint::Unix(socket))
    };
    let upstream = match upstream {
        Upstream::Ndjson(socket) => format!(
            "dialect = \"{}\"\nsocket = \"{}\"",
            Dialect::Ndjson,
            socket.display()
        ),
        Upstream::JsonRpcWs(url) => format!("dialect = \"{}\"\nurl = \"{url}\"", Dialect::JsonRpc),
    };
    let toml = gateway_toml(listener, &listen, sideband_cbor, &upstream, opts);
    let config = dir.join("switchyard.toml");
    std::fs::write(&config, toml).context("writing the switchyard config")?;
    let mut cmd = Command::new(&opts.switchyard);
    cmd.arg("run").arg("--config").arg(&config);
    let gateway = ChildGuard::spawn("switchyard", cmd, &dir.join("switchyard.log"))?;
    Ok((gateway, endpoint))
}

/// A WebSocket endpoint on a loopback address.
pub(super) fn ws_endpoint(addr: SocketAddr, path: &str) -> Endpoint {
    Endpoint::Ws {
        addr,
        url: format!("ws://{addr}{path}"),
    }
}

/// A port that was free a moment ago (bound to 127.0.0.1:0, then closed).
fn free_port() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// One listener and one upstream, with admission limits raised far above
/// any scenario so that only the data path is measured. `listen` and
/// `upstream` are the keys that say where each is.
fn gateway_toml(
    dialect: Dialect,
    listen: &str,
    sideband_cbor: bool,
    upstream: &str,
    opts: &StartOpts,
) -> String {
    let (pool, workers) = (opts.pool_size, opts.gateway_workers);
    // `sideband_cbor` is a Sideband key; other dialects leave it out.
    let cbor = if dialect == Dialect::Sideband {
        format!("sideband_cbor = {sideband_cbor}\n")
    } else {
        String::new()
    };
    format!(
        r#"[gateway]
shutdown_grace_ms = 100
worker_threads = {workers}

[log]
level = "warn"

[listeners.bench]
dialect = "{dialect}"
{listen}
max_in_flight = 4096
outbox_capacity = 4096
{cbor}
[upstreams.daemon]
{upstream}
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
    )
}
