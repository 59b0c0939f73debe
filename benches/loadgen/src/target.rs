//! What the load is aimed at: the floors and the gateway targets.
//!
//! Each scenario starts a fresh instance of every target it measures (so
//! peak RSS and CPU belong to that scenario alone) and drops it afterwards:
//! [`Live`] owns the child processes, the in-process echo server and the
//! temp dir, and cleans all of them up on drop.
//!
//! Adding a target is one entry in [`standard`] with its [`Server`] and
//! [`Wire`]. `launch` starts the processes: the reference daemons and
//! switchyard with a configuration `gateway_config` generates.

pub(crate) mod gateway_config;
pub(crate) mod launch;
mod nats;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use switchyard::dialect::sideband::Encoding;
use switchyard::dialect::Dialect;
use tokio::time::Instant;

use self::gateway_config::Upstream;
use super::conn::{Buffers, Endpoint};
use super::echo::EchoServer;
use super::persist::Backend;
use super::procs::ChildGuard;
use super::wire::{HttpVersion, Reply, Requests, Wire};

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
    /// Floor B2: the same echo in a process of its own.
    FloorB2,
    /// Floor C: a byte relay process in front of the daemon.
    FloorC,
    /// Floor M: the minimal multiplexing gateway process in front of the
    /// daemon (`benches/minimal/gateway.rs`), the yardstick for what a
    /// straightforward correct gateway costs.
    FloorM,
    /// Floor H: a bare hyper echo process (the HTTP rows' floor).
    FloorH,
    /// A switchyard listener in front of a reference daemon.
    Gateway,
}

/// What serves a target's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Server {
    /// The reference daemon process, connected to directly.
    Daemon,
    /// The in-process WebSocket echo.
    WsEcho,
    /// The WebSocket echo as its own process (loadgen re-executed).
    WsEchoProcess,
    /// loadgen's byte relay process in front of the NDJSON daemon.
    Relay,
    /// loadgen's minimal multiplexing gateway process (JSON-RPC WebSocket
    /// clients) in front of the NDJSON daemon.
    Minimal,
    /// A bare hyper HTTP echo as its own process (loadgen re-executed).
    HttpEchoProcess,
    /// A switchyard process with one listener of the first dialect, in
    /// front of a reference daemon process speaking the second: the NDJSON
    /// daemon for `ndjson`, the WebSocket daemon for `jsonrpc-ws`. A
    /// Sideband listener advertises CBOR when the target's wire speaks it.
    Switchyard(Dialect, Dialect),
    /// A switchyard process in its DEFAULT configuration with one JSON-RPC
    /// WebSocket listener in front of the NDJSON daemon, whose `Subscribe`
    /// is configured as a pub/sub feed (the fanout scenario).
    SwitchyardFeed,
    /// [`Server::SwitchyardFeed`] with the feed's topic persistent, stored
    /// by this backend (the persist scenario).
    SwitchyardPersist(Backend),
    /// This many instances of [`Server::SwitchyardFeed`] (1 or 2), all in
    /// front of the same NDJSON daemon, with a NATS core server of their
    /// own as the pub/sub backbone; only the first publishes the feed (the
    /// scaleout scenario).
    SwitchyardBackbone(u8),
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
    /// The `switchyard` binary (also runs the daemons).
    pub(crate) switchyard: PathBuf,
    /// Upstream connections from switchyard to its daemon (`None`: not
    /// written, switchyard's default).
    pub(crate) pool_size: Option<usize>,
    /// switchyard's `[gateway] worker_threads` (0: one per core).
    pub(crate) gateway_workers: usize,
    /// `--default-config`: write only listener, upstream and route keys.
    pub(crate) default_config: bool,
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
    /// A scale-out target's instances after the first (which is
    /// `endpoint` and `server_pid`): where clients connect, its process.
    pub(crate) more: Vec<(Endpoint, u32)>,
    /// A scale-out target's nats-server.
    pub(crate) backbone_pid: Option<u32>,
    /// Gateway first, so it is killed before its upstream.
    children: Vec<ChildGuard>,
    _echo: Option<EchoServer>,
    _dir: tempfile::TempDir,
}

/// The floors and the gateway targets, in table order.
pub(crate) fn standard() -> Vec<TargetSpec> {
    let gateway = |name, listener, upstream, wire| TargetSpec {
        name,
        role: Role::Gateway,
        server: Server::Switchyard(listener, upstream),
        wire,
    };
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
        TargetSpec {
            name: "B2: WebSocket echo process",
            role: Role::FloorB2,
            server: Server::WsEchoProcess,
            wire: Wire::JsonRpc,
        },
        TargetSpec {
            name: "C: byte relay → daemon (NDJSON)",
            role: Role::FloorC,
            server: Server::Relay,
            wire: Wire::JsonRpc,
        },
        TargetSpec {
            name: "M: minimal gateway → daemon (NDJSON)",
            role: Role::FloorM,
            server: Server::Minimal,
            wire: Wire::JsonRpc,
        },
        switchyard_jsonrpc(),
        gateway(
            "switchyard holon-rpc → ndjson",
            Dialect::Holon,
            Dialect::Ndjson,
            Wire::Holon,
        ),
        gateway(
            "switchyard sideband json → ndjson",
            Dialect::Sideband,
            Dialect::Ndjson,
            Wire::Sideband(Encoding::Json),
        ),
        gateway(
            "switchyard sideband cbor → ndjson",
            Dialect::Sideband,
            Dialect::Ndjson,
            Wire::Sideband(Encoding::Cbor),
        ),
        gateway(
            "switchyard ndjson → jsonrpc-ws",
            Dialect::Ndjson,
            Dialect::JsonRpc,
            Wire::JsonRpc,
        ),
    ]
}

/// The HTTP rows, in table order: floor H and switchyard's `jsonrpc-http`
/// listener in front of the NDJSON daemon, over HTTP/1.1 and over HTTP/2.
pub(crate) fn http_targets() -> Vec<TargetSpec> {
    let floor = |name, version| TargetSpec {
        name,
        role: Role::FloorH,
        server: Server::HttpEchoProcess,
        wire: Wire::Http(version),
    };
    let gateway = |name, version| TargetSpec {
        name,
        role: Role::Gateway,
        server: Server::Switchyard(Dialect::JsonRpcHttp, Dialect::Ndjson),
        wire: Wire::Http(version),
    };
    vec![
        floor("H: hyper echo process, HTTP/1.1", HttpVersion::H1),
        gateway(
            "switchyard jsonrpc-http → ndjson, HTTP/1.1",
            HttpVersion::H1,
        ),
        floor("H: hyper echo process, HTTP/2", HttpVersion::H2),
        gateway("switchyard jsonrpc-http → ndjson, HTTP/2", HttpVersion::H2),
    ]
}

/// The fanout target: subscribers of the NDJSON daemon's feed on
/// switchyard's JSON-RPC WebSocket listener.
pub(crate) fn switchyard_feed() -> TargetSpec {
    TargetSpec {
        name: "switchyard jsonrpc-ws ← ndjson feed",
        role: Role::Gateway,
        server: Server::SwitchyardFeed,
        wire: Wire::JsonRpc,
    }
}

/// The persist target: the fanout target's feed stored in a persistent
/// topic by `backend`.
pub(crate) fn switchyard_persist(backend: Backend) -> TargetSpec {
    TargetSpec {
        name: match backend {
            Backend::Memory => "switchyard persistent ← ndjson feed, memory store",
            Backend::Embedded => "switchyard persistent ← ndjson feed, embedded store",
            Backend::Nats => "switchyard persistent ← ndjson feed, nats store",
        },
        role: Role::Gateway,
        server: Server::SwitchyardPersist(backend),
        wire: Wire::JsonRpc,
    }
}

/// The scaleout target: `instances` (1 or 2) fanout targets on one NATS
/// core backbone, the feed published by the first.
pub(crate) fn switchyard_backbone(instances: u8) -> TargetSpec {
    TargetSpec {
        name: if instances == 1 {
            "switchyard jsonrpc-ws ← ndjson feed, nats backbone, 1 instance"
        } else {
            "switchyard jsonrpc-ws ← ndjson feed, nats backbone, 2 instances"
        },
        role: Role::Gateway,
        server: Server::SwitchyardBackbone(instances),
        wire: Wire::JsonRpc,
    }
}

/// switchyard's JSON-RPC WebSocket listener → NDJSON daemon.
pub(crate) fn switchyard_jsonrpc() -> TargetSpec {
    TargetSpec {
        name: "switchyard jsonrpc-ws → ndjson",
        role: Role::Gateway,
        server: Server::Switchyard(Dialect::JsonRpc, Dialect::Ndjson),
        wire: Wire::JsonRpc,
    }
}

// === impl Live ===

impl Live {
    /// A target of processes only, reached at `endpoint`: the first of
    /// `children` is the server judged, the second (if any) its daemon.
    fn processes(endpoint: Endpoint, children: Vec<ChildGuard>, dir: tempfile::TempDir) -> Self {
        Live {
            endpoint,
            server_pid: children.first().map(ChildGuard::id),
            daemon_pid: children.get(1).map(ChildGuard::id),
            more: Vec::new(),
            backbone_pid: None,
            children,
            _echo: None,
            _dir: dir,
        }
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
                    endpoint: gateway_config::ws_endpoint(echo.addr(), "/"),
                    server_pid: None,
                    daemon_pid: None,
                    more: Vec::new(),
                    backbone_pid: None,
                    children: Vec::new(),
                    _echo: Some(echo),
                    _dir: dir,
                })
            }
            Server::WsEchoProcess => {
                let (echo, endpoint) = launch::echo_process(dir.path()).await?;
                Ok(Live::processes(endpoint, vec![echo], dir))
            }
            Server::HttpEchoProcess => {
                let (echo, endpoint) = launch::http_echo_process(dir.path()).await?;
                let mut live = Live::processes(endpoint, vec![echo], dir);
                probe_echo(&live.endpoint, self.wire, &mut live.children).await?;
                Ok(live)
            }
            Server::Daemon => {
                let (daemon, socket) = launch::ndjson_daemon(opts, dir.path()).await?;
                Ok(Live::processes(Endpoint::Unix(socket), vec![daemon], dir))
            }
            Server::Relay => {
                let (daemon, socket) = launch::ndjson_daemon(opts, dir.path()).await?;
                let (relay, front) = launch::relay(&socket, dir.path()).await?;
                Ok(Live::processes(
                    Endpoint::Unix(front),
                    vec![relay, daemon],
                    dir,
                ))
            }
            Server::Minimal => {
                let (daemon, socket) = launch::ndjson_daemon(opts, dir.path()).await?;
                let (minimal, endpoint) = launch::minimal(&socket, dir.path()).await?;
                let mut live = Live::processes(endpoint, vec![minimal, daemon], dir);
                probe_echo(&live.endpoint, self.wire, &mut live.children).await?;
                Ok(live)
            }
            Server::SwitchyardFeed | Server::SwitchyardPersist(_) => {
                // The nats backend's server, started first and killed last.
                let nats = match self.server {
                    Server::SwitchyardPersist(Backend::Nats) => {
                        Some(nats::nats_server(dir.path(), true).await?)
                    }
                    _ => None,
                };
                let (daemon, socket) = launch::ndjson_daemon(opts, dir.path()).await?;
                let feed = match self.server {
                    Server::SwitchyardPersist(backend) => super::persist::persistence_toml(
                        backend,
                        dir.path(),
                        nats.as_ref().map(|(_, url)| url.as_str()),
                    ),
                    _ => super::feed::feed_toml(),
                };
                let (gateway, endpoint) =
                    launch::switchyard_with_feed(opts, &socket, &feed, dir.path())?;
                let mut children = vec![gateway, daemon];
                children.extend(nats.map(|(child, _)| child));
                let mut live = Live::processes(endpoint, children, dir);
                probe_echo(&live.endpoint, self.wire, &mut live.children).await?;
                Ok(live)
            }
            Server::SwitchyardBackbone(instances) => {
                backbone(opts, instances, self.wire, dir).await
            }
            Server::Switchyard(listener, upstream) => {
                let (daemon, upstream) = match upstream {
                    Dialect::Ndjson => {
                        let (daemon, socket) = launch::ndjson_daemon(opts, dir.path()).await?;
                        (daemon, Upstream::Ndjson(socket))
                    }
                    Dialect::JsonRpc => {
                        let (daemon, url) = launch::ws_daemon(opts, dir.path()).await?;
                        (daemon, Upstream::JsonRpcWs(url))
                    }
                    other => bail!("no reference daemon speaks {other}"),
                };
                let cbor = self.wire == Wire::Sideband(Encoding::Cbor);
                let (gateway, endpoint) =
                    launch::switchyard(opts, listener, cbor, &upstream, dir.path())?;
                let mut live = Live::processes(endpoint, vec![gateway, daemon], dir);
                probe_echo(&live.endpoint, self.wire, &mut live.children).await?;
                Ok(live)
            }
        }
    }
}

/// Starts the scaleout target: nats-server (NATS core), the daemon, then
/// `instances` switchyards, each in a directory of its own, each waited
/// for until it answers an echo. Killed in the reverse order.
async fn backbone(
    opts: &StartOpts,
    instances: u8,
    wire: Wire,
    dir: tempfile::TempDir,
) -> anyhow::Result<Live> {
    let (nats, url) = nats::nats_server(dir.path(), false).await?;
    let (daemon, socket) = launch::ndjson_daemon(opts, dir.path()).await?;
    let (nats_pid, daemon_pid) = (nats.id(), daemon.id());
    let feed = super::feed::feed_toml();
    let mut gateways = Vec::new();
    let mut endpoints = Vec::new();
    for i in 0..instances.max(1) {
        let own = dir.path().join(format!("instance-{i}"));
        std::fs::create_dir(&own).context("creating an instance's dir")?;
        let (gateway, endpoint) =
            launch::switchyard_on_backbone(opts, &socket, &feed, &url, i == 0, &own)?;
        gateways.push(gateway);
        endpoints.push(endpoint);
    }
    let pids: Vec<u32> = gateways.iter().map(ChildGuard::id).collect();
    let mut children = gateways;
    children.extend([daemon, nats]);
    for endpoint in &endpoints {
        probe_echo(endpoint, wire, &mut children).await?;
    }
    let mut instances = endpoints.into_iter().zip(pids);
    let Some((endpoint, server_pid)) = instances.next() else {
        bail!("a scale-out target needs an instance");
    };
    Ok(Live {
        endpoint,
        server_pid: Some(server_pid),
        daemon_pid: Some(daemon_pid),
        more: instances.collect(),
        backbone_pid: Some(nats_pid),
        children,
        _echo: None,
        _dir: dir,
    })
}

/// Waits until a gateway answers an echo through its upstream.
pub(crate) async fn probe_echo(
    endpoint: &Endpoint,
    wire: Wire,
    children: &mut [ChildGuard],
) -> anyhow::Result<()> {
    let requests = Requests::new(wire, 0)?;
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        for child in children.iter_mut() {
            child.check_alive()?;
        }
        match echo_once(endpoint, wire, &requests).await {
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
async fn echo_once(endpoint: &Endpoint, wire: Wire, requests: &Requests) -> anyhow::Result<()> {
    let (mut tx, mut rx) = endpoint.connect(wire, Buffers::Small).await?;
    tx.feed(requests.make(1, 42)).await?;
    tx.flush().await?;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let reply = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .context("no reply within 2 s")?
            .context("connection closed")??;
        match wire.parse(&reply) {
            Reply::Echo { id: 1, nonce: 42 } => return Ok(()),
            Reply::Ignore => continue,
            other => bail!(
                "unexpected reply {other:?}: {}",
                String::from_utf8_lossy(reply.bytes())
            ),
        }
    }
}
