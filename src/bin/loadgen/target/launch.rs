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

/// One listener of a generated configuration.
#[derive(Debug, Clone)]
pub(crate) struct ListenerSpec {
    /// `[listeners.<name>]`.
    pub(crate) name: &'static str,
    /// Its dialect.
    pub(crate) dialect: Dialect,
    /// The keys that say where it listens (`address` and `path`, or `socket`).
    pub(crate) location: String,
    /// Sideband only: whether it offers CBOR envelopes (`None`: the default).
    pub(crate) sideband_cbor: Option<bool>,
}

/// What switchyard forwards to.
#[derive(Debug, Clone)]
pub(crate) enum Upstream {
    /// The NDJSON daemon's Unix socket.
    Ndjson(PathBuf),
    /// The WebSocket daemon's `ws://…/rpc` URL.
    JsonRpcWs(String),
}

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

/// The configuration of [`switchyard_with_feed`], and where clients connect.
fn feed_gateway_toml(
    opts: &StartOpts,
    socket: &Path,
    feed: &str,
    dir: &Path,
) -> anyhow::Result<(String, Endpoint)> {
    let (spec, endpoint) = listener_spec("bench", Dialect::JsonRpc, dir)?;
    let defaults = StartOpts {
        pool_size: None,
        gateway_workers: 0,
        default_config: true,
        ..opts.clone()
    };
    let mut toml = gateway_toml(&[spec], &Upstream::Ndjson(socket.to_owned()), &defaults);
    toml.push('\n');
    toml.push_str(feed);
    Ok((toml, endpoint))
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

/// A listener named `name` of `dialect`: a free loopback port for the
/// WebSocket dialects, `DIR/<name>.sock` for NDJSON; and where clients
/// connect to it.
pub(crate) fn listener_spec(
    name: &'static str,
    dialect: Dialect,
    dir: &Path,
) -> anyhow::Result<(ListenerSpec, Endpoint)> {
    let (location, endpoint) = if dialect.is_websocket() {
        let addr = free_port().context("picking a free port")?;
        let location = format!("address = \"{addr}\"\npath = \"{LISTENER_PATH}\"");
        (location, ws_endpoint(addr, LISTENER_PATH))
    } else {
        let socket = dir.join(format!("{name}.sock"));
        let location = format!("socket = \"{}\"", socket.display());
        (location, Endpoint::Unix(socket))
    };
    let spec = ListenerSpec {
        name,
        dialect,
        location,
        sideband_cbor: None,
    };
    Ok((spec, endpoint))
}

/// A WebSocket endpoint on a loopback address.
pub(super) fn ws_endpoint(addr: SocketAddr, path: &str) -> Endpoint {
    Endpoint::Ws {
        addr,
        url: format!("ws://{addr}{path}"),
    }
}

/// A port that was free a moment ago (bound to 127.0.0.1:0, then closed).
pub(super) fn free_port() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// The configuration: `listeners`, each routed to `upstream`.
///
/// Tuned (the default): admission limits raised far above any scenario so
/// that only the data path is measured, the pool size and worker threads
/// from the command line, quick reconnects, warnings only in the log.
/// `--default-config`: nothing but where each listener and the upstream
/// are, and the routes; every other key is left to switchyard's shipped
/// defaults (except a pool size a scenario needs, fan-in's 1).
fn gateway_toml(listeners: &[ListenerSpec], upstream: &Upstream, opts: &StartOpts) -> String {
    let mut out = String::new();
    if !opts.default_config {
        out.push_str(&format!(
            "[gateway]\nshutdown_grace_ms = 100\nworker_threads = {}\n\n[log]\nlevel = \"warn\"\n\n",
            opts.gateway_workers
        ));
    }
    for l in listeners {
        out.push_str(&format!(
            "[listeners.{}]\ndialect = \"{}\"\n{}\n",
            l.name,
            l.dialect.as_str(),
            l.location
        ));
        if !opts.default_config {
            out.push_str("max_in_flight = 4096\noutbox_capacity = 4096\n");
        }
        // A feature switch, not a tuning key: which envelopes the listener offers.
        if let Some(cbor) = l.sideband_cbor.filter(|_| !opts.default_config) {
            out.push_str(&format!("sideband_cbor = {cbor}\n"));
        }
        out.push('\n');
    }
    out.push_str("[upstreams.daemon]\n");
    out.push_str(&match upstream {
        Upstream::Ndjson(socket) => format!(
            "dialect = \"{}\"\nsocket = \"{}\"\n",
            Dialect::Ndjson,
            socket.display()
        ),
        Upstream::JsonRpcWs(url) => {
            format!("dialect = \"{}\"\nurl = \"{url}\"\n", Dialect::JsonRpc)
        }
    });
    if let Some(pool) = opts.pool_size {
        out.push_str(&format!("pool_size = {pool}\n"));
    }
    if !opts.default_config {
        out.push_str(
            "max_in_flight_per_connection = 65536\nmax_pending = 65536\nmax_queued = 65536\n\
             backoff_initial_ms = 20\nbackoff_max_ms = 200\n",
        );
    }
    for l in listeners {
        out.push_str(&format!(
            "\n[[routes]]\nlistener = \"{}\"\nupstream = \"daemon\"\n",
            l.name
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(default_config: bool, pool_size: Option<usize>) -> StartOpts {
        StartOpts {
            switchyard: PathBuf::from("switchyard"),
            pool_size,
            gateway_workers: 1,
            default_config,
        }
    }

    /// Every dialect as a listener, in front of the NDJSON daemon.
    fn toml(opts: &StartOpts, dir: &Path) -> String {
        let names = ["a", "b", "c", "d"];
        let dialects = [
            Dialect::JsonRpc,
            Dialect::Holon,
            Dialect::Sideband,
            Dialect::Ndjson,
        ];
        let listeners: Vec<ListenerSpec> = names
            .into_iter()
            .zip(dialects)
            .map(|(name, d)| {
                let (spec, _) = listener_spec(name, d, dir).expect("listener");
                ListenerSpec {
                    sideband_cbor: (d == Dialect::Sideband).then_some(false),
                    ..spec
                }
            })
            .collect();
        gateway_toml(&listeners, &Upstream::Ndjson(dir.join("daemon.sock")), opts)
    }

    #[test]
    fn both_configurations_are_valid() {
        let dir = tempfile::tempdir().expect("dir");
        for o in [opts(false, Some(2)), opts(true, None), opts(true, Some(1))] {
            let text = toml(&o, dir.path());
            if let Err(e) = switchyard::config::Config::from_toml(&text) {
                panic!("{e}\n{text}");
            }
        }
    }

    #[test]
    fn default_configuration_has_only_where_and_routes() {
        let dir = tempfile::tempdir().expect("dir");
        let allowed = [
            "dialect", "address", "path", "socket", "listener", "upstream",
        ];
        for (o, extra) in [
            (opts(true, None), None),
            (opts(true, Some(1)), Some("pool_size")),
        ] {
            let text = toml(&o, dir.path());
            for line in text.lines().filter(|l| l.contains('=')) {
                let key = line.split('=').next().unwrap_or_default().trim();
                assert!(
                    allowed.contains(&key) || Some(key) == extra,
                    "tuning key {key:?} in the default configuration:\n{text}"
                );
            }
            assert!(
                !text.contains("[gateway]") && !text.contains("[log]"),
                "{text}"
            );
        }
        // The tuned one does set them.
        let tuned = toml(&opts(false, Some(2)), dir.path());
        assert!(tuned.contains("max_pending = 65536") && tuned.contains("pool_size = 2"));
        assert!(tuned.contains("sideband_cbor = false"));
    }

    #[test]
    fn the_fanout_configuration_is_the_default_one_plus_the_feed() {
        let dir = tempfile::tempdir().expect("dir");
        let feed = crate::feed::feed_toml();
        // Tuned options on the command line do not apply to fanout.
        let (text, _) = feed_gateway_toml(
            &opts(false, Some(2)),
            &dir.path().join("daemon.sock"),
            &feed,
            dir.path(),
        )
        .expect("toml");
        let allowed = [
            "dialect", "address", "path", "socket", "listener", "upstream", "method", "params",
            "topic",
        ];
        for line in text.lines().filter(|l| l.contains('=')) {
            let key = line.split('=').next().unwrap_or_default().trim();
            assert!(allowed.contains(&key), "key {key:?} in:\n{text}");
        }
        assert!(text.ends_with(&feed), "{text}");
        if let Err(e) = switchyard::config::Config::from_toml(&text) {
            panic!("{e}\n{text}");
        }
    }
}
