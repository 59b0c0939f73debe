//! Starting the processes a target needs: the reference daemons (NDJSON on
//! a Unix socket, or JSON-RPC over WebSocket), floor C's relay, floor M's minimal gateway and switchyard with a
//! generated configuration (see `gateway_config`), each waited for until it
//! accepts connections.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use switchyard::dialect::Dialect;
use tokio::net::{TcpStream, UnixStream};
use tokio::time::Instant;

use super::super::conn::Endpoint;
use super::super::procs::ChildGuard;
use super::gateway_config::{
    backbone_toml, feed_gateway_toml, free_port, gateway_toml, http_endpoint, listener_spec,
    ws_endpoint, ListenerSpec, Upstream,
};
use super::{StartOpts, PROBE_EVERY, READY_TIMEOUT};

/// `switchyard daemon --socket DIR/daemon.sock`, once it accepts.
pub(crate) async fn ndjson_daemon(
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

/// Floor M: this loadgen executable as the minimal multiplexing gateway
/// on a free loopback port in front of the daemon's socket, once it
/// accepts.
pub(super) async fn minimal(daemon: &Path, dir: &Path) -> anyhow::Result<(ChildGuard, Endpoint)> {
    let addr = free_port().context("picking a free port")?;
    let exe = std::env::current_exe().context("locating the loadgen executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("--minimal-listen")
        .arg(addr.to_string())
        .arg("--minimal-to")
        .arg(daemon);
    let mut minimal = ChildGuard::spawn("minimal gateway", cmd, &dir.join("minimal.log"))?;
    until_tcp(&mut minimal, addr).await?;
    Ok((minimal, ws_endpoint(addr, "/rpc")))
}

/// Floor B2: this loadgen executable as a WebSocket echo on a free
/// loopback port, once it accepts.
pub(super) async fn echo_process(dir: &Path) -> anyhow::Result<(ChildGuard, Endpoint)> {
    let addr = free_port().context("picking a free port")?;
    let exe = std::env::current_exe().context("locating the loadgen executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("--echo-listen").arg(addr.to_string());
    let mut echo = ChildGuard::spawn("echo process", cmd, &dir.join("echo.log"))?;
    until_tcp(&mut echo, addr).await?;
    Ok((echo, ws_endpoint(addr, "/")))
}

/// Floor H: this loadgen executable as a bare hyper echo (HTTP/1.1 and
/// h2c) on a free loopback port, once it accepts.
pub(super) async fn http_echo_process(dir: &Path) -> anyhow::Result<(ChildGuard, Endpoint)> {
    let addr = free_port().context("picking a free port")?;
    let exe = std::env::current_exe().context("locating the loadgen executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("--http-echo-listen").arg(addr.to_string());
    let mut echo = ChildGuard::spawn("HTTP echo process", cmd, &dir.join("http-echo.log"))?;
    until_tcp(&mut echo, addr).await?;
    Ok((echo, http_endpoint(addr, "/rpc")))
}

/// Waits until `child` accepts TCP connections on `addr`.
pub(super) async fn until_tcp(child: &mut ChildGuard, addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    while TcpStream::connect(addr).await.is_err() {
        child.check_alive()?;
        if Instant::now() >= deadline {
            bail!("the {} did not listen on {addr} in time", child.name());
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
    Ok(())
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
    until_tcp(&mut daemon, addr).await?;
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
    let (spec, endpoint) = listener_spec("bench", listener, dir)?;
    let spec = ListenerSpec {
        sideband_cbor: (listener == Dialect::Sideband).then_some(sideband_cbor),
        ..spec
    };
    let gateway = start_switchyard(opts, &[spec], upstream, dir)?;
    Ok((gateway, endpoint))
}

/// The fanout target: switchyard in its DEFAULT configuration with one
/// JSON-RPC WebSocket listener in front of the NDJSON daemon at `socket`,
/// plus `feed` (TOML lines that go after the rest, e.g. a
/// `[[upstreams.daemon.feeds]]` table). Returns as soon as it is started.
pub(super) fn switchyard_with_feed(
    opts: &StartOpts,
    socket: &Path,
    feed: &str,
    dir: &Path,
) -> anyhow::Result<(ChildGuard, Endpoint)> {
    let (toml, endpoint) = feed_gateway_toml(opts, socket, feed, dir)?;
    let gateway = spawn_switchyard(opts, &toml, dir)?;
    Ok((gateway, endpoint))
}

/// One instance of the scaleout target: [`switchyard_with_feed`]'s
/// configuration plus NATS core at `nats` as the pub/sub backbone, the
/// feed published only if `publishes`. `dir` is the instance's own (its
/// config and log). Returns as soon as it is started.
pub(super) fn switchyard_on_backbone(
    opts: &StartOpts,
    socket: &Path,
    feed: &str,
    nats: &str,
    publishes: bool,
    dir: &Path,
) -> anyhow::Result<(ChildGuard, Endpoint)> {
    let (mut toml, endpoint) = feed_gateway_toml(opts, socket, feed, dir)?;
    toml.push('\n');
    toml.push_str(&backbone_toml(nats, publishes));
    let gateway = spawn_switchyard(opts, &toml, dir)?;
    Ok((gateway, endpoint))
}

/// Starts `switchyard run` with `listeners`, each routed to `upstream`.
pub(crate) fn start_switchyard(
    opts: &StartOpts,
    listeners: &[ListenerSpec],
    upstream: &Upstream,
    dir: &Path,
) -> anyhow::Result<ChildGuard> {
    let toml = gateway_toml(listeners, upstream, opts);
    spawn_switchyard(opts, &toml, dir)
}

/// `switchyard run` with the configuration `toml`, written to `dir`.
fn spawn_switchyard(opts: &StartOpts, toml: &str, dir: &Path) -> anyhow::Result<ChildGuard> {
    let config = dir.join("switchyard.toml");
    std::fs::write(&config, toml).context("writing the switchyard config")?;
    let mut cmd = Command::new(&opts.switchyard);
    cmd.arg("run").arg("--config").arg(&config);
    ChildGuard::spawn("switchyard", cmd, &dir.join("switchyard.log"))
}
