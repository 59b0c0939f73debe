//! `switchyard demo`: the gateway in front of the bundled reference daemon,
//! with every client dialect, the admin listener and a browser playground,
//! and nothing to install or configure.
//!
//! What runs:
//! - the reference NDJSON daemon on a Unix socket, with a [`Tap`] that keeps
//!   its last lines for the playground;
//! - one WebSocket port serving JSON-RPC 2.0 (`/rpc`), holon-rpc (`/holon`)
//!   and Sideband (`/sideband`), and JSON-RPC over HTTP (`/http`, with its
//!   event stream `/http/events`), whose allow-list admits exactly the
//!   playground's origin (and clients that send no `Origin`);
//! - an NDJSON listener on a Unix socket;
//! - the admin listener: status page, `/metrics`, probes, and the
//!   playground (`playground.rs`).
//!
//! All five listeners are routed to the daemon. The ports are fixed
//! defaults ([`DEFAULT_LISTEN`], [`DEFAULT_ADMIN`]); one that is taken is
//! replaced by a free port, and the banner says so.

mod banner;
mod playground;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use crate::app::{self, Bound};
use crate::config::Config;
use crate::daemon::tap::Tap;
use crate::daemon::{Daemon, DaemonOptions};

/// Default address of the WebSocket listeners.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Default address of the admin listener (status page, playground).
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9090";

/// Times the demo re-picks ports when another process takes one between
/// the check and the bind.
const BIND_ATTEMPTS: usize = 3;

/// Where the demo listens.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The WebSocket listeners' address (port 0: any free port).
    pub listen: SocketAddr,
    /// The admin listener's address (port 0: any free port).
    pub admin: SocketAddr,
    /// Directory for the Unix sockets; a fresh temporary one (removed on
    /// exit) when `None`.
    pub dir: Option<PathBuf>,
}

/// The demo's addresses, as printed and as the playground reads them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Endpoints {
    /// JSON-RPC 2.0 over WebSocket.
    pub jsonrpc: String,
    /// holon-rpc over WebSocket.
    pub holon: String,
    /// Sideband (SBP frames) over WebSocket.
    pub sideband: String,
    /// NDJSON listener, `unix://…`.
    pub ndjson: String,
    /// JSON-RPC over HTTP, `http://…/http`.
    pub http: String,
    /// The reference daemon itself, `unix://…` (no gateway in between).
    pub daemon: String,
    /// `http://host:port` of the admin listener: the playground's origin.
    pub admin: String,
}

/// Runs the demo until SIGINT/SIGTERM.
pub async fn run(opts: DemoOptions) -> anyhow::Result<()> {
    let owned_dir;
    let dir = match &opts.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            dir.clone()
        }
        None => {
            owned_dir = tempfile::Builder::new()
                .prefix("switchyard-demo-")
                .tempdir()?;
            owned_dir.path().to_owned()
        }
    };
    let socket = dir.join("daemon.sock");
    let tap = Arc::new(Tap::new());
    let daemon = Daemon::start_tapped(&socket, DaemonOptions::default(), tap.clone())
        .await
        .with_context(|| format!("reference daemon at {}", socket.display()))?;
    let (mut bound, notes) = bind(&opts, &dir, &socket).await?;
    let endpoints = endpoints(&bound, &dir, &socket)?;
    bound.add_admin_routes(playground::router(endpoints.clone(), tap));
    let mut text: Vec<String> = notes.iter().map(|n| format!("note: {n}")).collect();
    text.push(banner::text(&endpoints));
    if let Err(e) = crate::stdout::line(&text.join("\n")) {
        // Nobody can see the endpoints (`demo | head` ended): stop cleanly.
        daemon.stop().await;
        return if crate::stdout::is_closed(&e) {
            Ok(())
        } else {
            Err(e.into())
        };
    }
    let running = bound.spawn();
    crate::shutdown::signal().await;
    running.shutdown().await;
    daemon.stop().await;
    Ok(())
}

/// Picks the ports and binds the gateway; says which defaults were taken.
async fn bind(
    opts: &DemoOptions,
    dir: &Path,
    socket: &Path,
) -> anyhow::Result<(Bound, Vec<String>)> {
    let mut last = None;
    for _ in 0..BIND_ATTEMPTS {
        let mut notes = Vec::new();
        // Held until the admin port is picked, so both differ.
        let (ws_probe, ws) =
            free_or_fallback(opts.listen, "WebSocket listeners", &mut notes).await?;
        let (_, admin) = free_or_fallback(opts.admin, "admin listener", &mut notes).await?;
        drop(ws_probe);
        let cfg = config(ws, admin, dir, socket)?;
        match app::bind(cfg).await {
            Ok(bound) => return Ok((bound, notes)),
            // Taken between the check and the bind: pick again.
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or_else(|| anyhow::anyhow!("cannot bind"), Into::into))
}

/// `addr` if it can be bound now, else the same IP on a free port (with a
/// note). Port 0 resolves to the free port the OS picks. The probe listener
/// is returned so the caller decides when to let the port go.
async fn free_or_fallback(
    addr: SocketAddr,
    what: &str,
    notes: &mut Vec<String>,
) -> anyhow::Result<(tokio::net::TcpListener, SocketAddr)> {
    let probe = match tokio::net::TcpListener::bind(addr).await {
        Ok(probe) => probe,
        Err(e) if addr.port() != 0 => {
            let probe = tokio::net::TcpListener::bind(SocketAddr::new(addr.ip(), 0))
                .await
                .with_context(|| format!("{what}: cannot bind {addr} ({e}) nor a free port"))?;
            let free = probe.local_addr()?;
            notes.push(format!(
                "{what}: {addr} is taken ({e}); using {free} instead"
            ));
            probe
        }
        Err(e) => return Err(e).with_context(|| format!("{what}: cannot bind {addr}")),
    };
    let local = probe.local_addr()?;
    Ok((probe, local))
}

/// The demo's configuration: every listener routed to the daemon, and
/// the daemon's `Subscribe` stream as the pub/sub feed `daemon.events`.
pub fn config(
    ws: SocketAddr,
    admin: SocketAddr,
    dir: &Path,
    socket: &Path,
) -> Result<Config, crate::config::ConfigError> {
    let origin = admin_origin(admin);
    let mut text = format!(
        "[gateway]\nshutdown_grace_ms = 1000\n\n[admin]\naddress = \"{admin}\"\n\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\npool_size = 2\n\
         required = true\n\n\
         [[upstreams.daemon.feeds]]\nmethod = \"Subscribe\"\nparams = {{ interval_ms = 1000 }}\n\
         topic = \"daemon.events\"\n\n\
         [listeners.ndjson]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [[routes]]\nlistener = \"ndjson\"\nupstream = \"daemon\"\n",
        toml_str(socket),
        toml_str(&dir.join("gateway.sock")),
    );
    for (name, dialect, path) in [
        ("jsonrpc", "jsonrpc-ws", "/rpc"),
        ("holon", "holon-rpc", "/holon"),
        ("sideband", "sideband", "/sideband"),
        ("http", "jsonrpc-http", "/http"),
    ] {
        text.push_str(&format!(
            "\n[listeners.{name}]\ndialect = \"{dialect}\"\naddress = \"{ws}\"\npath = \"{path}\"\n\
             allowed_origins = [\"{origin}\"]\n\n\
             [[routes]]\nlistener = \"{name}\"\nupstream = \"daemon\"\n"
        ));
    }
    Config::from_toml(&text)
}

/// `http://host:port` of the admin listener as a browser on this host
/// reaches it (loopback when it listens on every interface).
fn admin_origin(admin: SocketAddr) -> String {
    let mut shown = admin;
    if admin.ip().is_unspecified() {
        shown.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{shown}")
}

/// A path as a TOML basic string's content.
fn toml_str(path: &Path) -> String {
    path.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

/// The bound addresses of every endpoint.
fn endpoints(bound: &Bound, dir: &Path, socket: &Path) -> anyhow::Result<Endpoints> {
    let ws = |name: &str| {
        bound
            .ws_url(name)
            .with_context(|| format!("listener {name} is not bound"))
    };
    let admin = bound.admin_addr().context("admin listener is not bound")?;
    Ok(Endpoints {
        jsonrpc: ws("jsonrpc")?,
        holon: ws("holon")?,
        sideband: ws("sideband")?,
        ndjson: format!("unix://{}", dir.join("gateway.sock").display()),
        http: ws("http")?.replacen("ws://", "http://", 1),
        daemon: format!("unix://{}", socket.display()),
        admin: admin_origin(admin),
    })
}
