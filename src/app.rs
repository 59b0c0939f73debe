//! Composition root: bind every listener, then run them.
//!
//! Binding and running are separate steps so that tests (and the demo) can
//! bind port 0 and temporary sockets, read the real addresses, and then
//! serve. [`Bound::spawn`] runs the gateway in the background and returns a
//! [`Running`] handle whose [`shutdown`](Running::shutdown) performs the same
//! graceful shutdown as SIGTERM.
//!
//! Shutdown order: stop accepting (readiness turns `503` at once) → let
//! requests in flight finish within the grace period → answer what is left
//! with `unavailable` → close client connections (WebSocket 1001) → close
//! upstream connections and wait (briefly) for their goodbyes, Sideband's
//! being Control Close `shutdown` then 1001 → stop the admin listener, which
//! serves throughout.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::path::PathBuf;

use tokio::net::{TcpListener, UnixListener};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{self, AdminState, Health};
use crate::config::{Config, ListenAddr};
use crate::pubsub::Broker;
use crate::router::Route;
use crate::telemetry::metrics::Metrics;
use crate::transport::{tls, ws, Serve};
use crate::upstream::Upstream;

/// Extra time, beyond the grace period, for connections to send their
/// closing frames before shutdown stops waiting for them.
const CLOSE_SLACK: Duration = Duration::from_secs(2);

/// Every listener bound, nothing served yet.
#[derive(Debug)]
pub struct Bound {
    cfg: Config,
    metrics: Metrics,
    /// One TCP listener per distinct address, with the listener names on it
    /// and its TLS acceptor when `tls_cert`/`tls_key` are set.
    ws: Vec<(
        TcpListener,
        Vec<String>,
        Option<crate::transport::tls::Acceptor>,
    )>,
    /// Actual local address of each WebSocket listener, by name.
    addrs: BTreeMap<String, SocketAddr>,
    /// Unix listeners (NDJSON), with their names and socket paths.
    unix: Vec<(UnixListener, String, PathBuf)>,
    /// The admin listener and its actual address, if `[admin]` enables it.
    admin: Option<(TcpListener, SocketAddr)>,
    /// Routes added to the admin listener (the demo's playground).
    admin_extra: Option<axum::Router>,
}

/// A gateway running in the background.
#[derive(Debug)]
pub struct Running {
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    metrics: Metrics,
    upstreams: HashMap<String, Arc<Upstream>>,
    admin_addr: Option<SocketAddr>,
}

/// Binding failed.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// A TCP address could not be bound.
    #[error("listener {listener}: cannot bind {addr}: {source}")]
    Tcp {
        /// Listener name.
        listener: String,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// A Unix socket could not be bound.
    #[error("listener {listener}: cannot bind {path}: {source}")]
    Unix {
        /// Listener name.
        listener: String,
        /// The socket path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The admin listener's address could not be bound.
    #[error("admin listener: cannot bind {addr}: {source}")]
    Admin {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// A listener's TLS certificate or key could not be loaded.
    #[error("listener {listener}: {message}")]
    Tls {
        /// Listener name(s).
        listener: String,
        /// What is wrong, naming the file.
        message: String,
    },
    /// Metrics registry setup failed.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// Binds every listener of `cfg`. No traffic is served until [`Bound::run`].
pub async fn bind(cfg: Config) -> Result<Bound, BindError> {
    let metrics = Metrics::new()?;
    metrics.init_labels(&cfg);
    let mut groups: BTreeMap<SocketAddr, Vec<String>> = BTreeMap::new();
    let mut unix = Vec::new();
    for l in &cfg.listeners {
        match &l.addr {
            ListenAddr::Ws { addr, .. } => groups.entry(*addr).or_default().push(l.name.clone()),
            ListenAddr::Unix { path, mode } => {
                let listener = crate::transport::unix::bind(path, *mode).map_err(|source| {
                    BindError::Unix {
                        listener: l.name.clone(),
                        path: path.display().to_string(),
                        source,
                    }
                })?;
                unix.push((listener, l.name.clone(), path.clone()));
            }
        }
    }
    let mut ws = Vec::new();
    let mut addrs = BTreeMap::new();
    for (addr, names) in groups {
        // Validation makes listeners sharing an address agree on TLS.
        let files = cfg
            .listeners
            .iter()
            .find(|l| names.contains(&l.name))
            .and_then(|l| l.tls.as_ref());
        let tls = files
            .map(tls::acceptor)
            .transpose()
            .map_err(|e| BindError::Tls {
                listener: names.join(","),
                message: e.to_string(),
            })?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| BindError::Tcp {
                listener: names.join(","),
                addr,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| BindError::Tcp {
            listener: names.join(","),
            addr,
            source,
        })?;
        for name in &names {
            addrs.insert(name.clone(), local);
        }
        ws.push((listener, names, tls));
    }
    let admin = match cfg.admin.addr {
        Some(addr) => Some(bind_admin(addr).await?),
        None => None,
    };
    Ok(Bound {
        cfg,
        metrics,
        ws,
        addrs,
        unix,
        admin,
        admin_extra: None,
    })
}

/// Binds the admin listener and reads back its actual address.
async fn bind_admin(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), BindError> {
    let error = |source| BindError::Admin { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(error)?;
    let local = listener.local_addr().map_err(error)?;
    Ok((listener, local))
}

// === impl Bound ===

impl Bound {
    /// The bound address of a WebSocket listener.
    pub fn ws_addr(&self, listener: &str) -> Option<SocketAddr> {
        self.addrs.get(listener).copied()
    }

    /// `ws://host:port/path` (`wss://` with TLS) of a WebSocket listener.
    pub fn ws_url(&self, listener: &str) -> Option<String> {
        let addr = self.ws_addr(listener)?;
        let l = self.cfg.listeners.iter().find(|l| l.name == listener)?;
        match &l.addr {
            ListenAddr::Ws { path, .. } => {
                let scheme = if l.tls.is_some() { "wss" } else { "ws" };
                Some(format!("{scheme}://{addr}{path}"))
            }
            ListenAddr::Unix { .. } => None,
        }
    }

    /// The metrics every component reports to.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The bound address of the admin listener (`/metrics`, `/livez`,
    /// `/readyz`, status page), if `[admin] address` enables it.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|(_, addr)| *addr)
    }

    /// The socket path of a Unix (NDJSON) listener.
    pub fn unix_path(&self, listener: &str) -> Option<PathBuf> {
        self.unix
            .iter()
            .find(|(_, n, _)| n == listener)
            .map(|(_, _, p)| p.clone())
    }

    /// Names every listener and the address it really bound (port 0
    /// resolved), so an operator knows where to connect.
    fn log_addresses(&self) {
        for l in &self.cfg.listeners {
            let (listener, dialect) = (l.name.as_str(), l.dialect.as_str());
            let address = match &l.addr {
                ListenAddr::Ws { .. } => self.ws_url(listener),
                ListenAddr::Unix { path, .. } => Some(format!("unix://{}", path.display())),
            };
            if let Some(address) = address {
                tracing::info!(listener, dialect, %address, "listening");
            }
        }
    }

    /// Serves `routes` on the admin listener too, next to its own (the
    /// demo's playground). They get the admin layers (tracing, timeout,
    /// compression, security headers). Without an admin listener they are
    /// not served.
    pub fn add_admin_routes(&mut self, routes: axum::Router) {
        self.admin_extra = Some(match self.admin_extra.take() {
            Some(before) => before.merge(routes),
            None => routes,
        });
    }

    /// Runs in the background; see [`Running`].
    pub fn spawn(self) -> Running {
        self.log_addresses();
        let shutdown = CancellationToken::new();
        let metrics = self.metrics.clone();
        let upstream_stop = CancellationToken::new();
        // One broker: every listener's subscribers, every upstream's events.
        let broker = Arc::new(Broker::new(crate::pubsub::DEFAULT_MAX_SUBSCRIPTIONS));
        let upstreams: HashMap<String, Arc<Upstream>> = self
            .cfg
            .upstreams
            .iter()
            .map(|u| {
                (
                    u.name.clone(),
                    // A child of `shutdown`: cancelled in the same instant,
                    // before any session sees the shutdown and closes a
                    // dedicated link.
                    Upstream::start(
                        u.clone(),
                        metrics.clone(),
                        broker.clone(),
                        shutdown.child_token(),
                        upstream_stop.clone(),
                    ),
                )
            })
            .collect();
        let admin_addr = self.admin_addr();
        let task =
            tokio::spawn(self.serve(upstreams.clone(), broker, shutdown.clone(), upstream_stop));
        Running {
            shutdown,
            task,
            metrics,
            upstreams,
            admin_addr,
        }
    }

    /// Runs until `shutdown` is cancelled, then shuts down gracefully.
    pub async fn run(self, shutdown: CancellationToken) {
        let running = self.spawn();
        shutdown.cancelled().await;
        running.shutdown().await;
    }

    async fn serve(
        mut self,
        upstreams: HashMap<String, Arc<Upstream>>,
        broker: Arc<Broker>,
        shutdown: CancellationToken,
        upstream_stop: CancellationToken,
    ) {
        let health = Health::new(&self.cfg.listeners, shutdown.clone());
        let admin_stop = CancellationToken::new();
        let admin = self.spawn_admin(&upstreams, &health, admin_stop.clone());
        let ctx = Serve {
            shutdown: shutdown.clone(),
            grace_over: CancellationToken::new(),
            sessions: TaskTracker::new(),
        };
        let routes: HashMap<String, Arc<Route>> = self
            .cfg
            .listeners
            .iter()
            .map(|l| {
                (
                    l.name.clone(),
                    Arc::new(Route::new(
                        l.clone(),
                        &upstreams,
                        broker.clone(),
                        self.metrics.clone(),
                    )),
                )
            })
            .collect();
        let servers = TaskTracker::new();
        for (listener, names, tls) in self.ws {
            let group = names
                .iter()
                .filter_map(|n| routes.get(n).cloned())
                .collect();
            let ctx = ctx.clone();
            let serving = health.serving(names);
            servers.spawn(async move {
                let _serving = serving;
                if let Err(e) = ws::serve(listener, group, ctx, tls).await {
                    tracing::error!(error = %e, "WebSocket server failed");
                }
            });
        }
        for (listener, name, path) in self.unix {
            if let Some(route) = routes.get(&name).cloned() {
                let serving = health.serving(vec![name]);
                let serve = crate::transport::unix::serve(listener, path, route, ctx.clone());
                servers.spawn(async move {
                    let _serving = serving;
                    serve.await;
                });
            }
        }
        servers.close();
        shutdown.cancelled().await;
        tracing::info!("shutting down: no new connections; draining requests in flight");
        let grace = self.cfg.gateway.shutdown_grace;
        let grace_over = ctx.grace_over.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            grace_over.cancel();
        });
        ctx.sessions.close();
        let all_done = async {
            ctx.sessions.wait().await;
            servers.wait().await;
        };
        if tokio::time::timeout(grace + CLOSE_SLACK, all_done)
            .await
            .is_err()
        {
            tracing::warn!("some connections did not close within the grace period");
        }
        upstream_stop.cancel();
        let goodbyes = futures_util::future::join_all(upstreams.values().map(|u| u.links_closed()));
        if tokio::time::timeout(CLOSE_SLACK, goodbyes).await.is_err() {
            tracing::warn!("some upstream connections did not close in time");
        }
        admin_stop.cancel();
        if let Some(task) = admin {
            let abort = task.abort_handle();
            if tokio::time::timeout(CLOSE_SLACK, task).await.is_err() {
                // A scraper holding a request open must not delay exit.
                abort.abort();
            }
        }
    }

    /// Starts serving the admin listener, if any; it runs until `stop`.
    fn spawn_admin(
        &mut self,
        upstreams: &HashMap<String, Arc<Upstream>>,
        health: &Arc<Health>,
        stop: CancellationToken,
    ) -> Option<JoinHandle<()>> {
        let (listener, addr) = self.admin.take()?;
        let state = AdminState::new(admin::Gateway {
            cfg: self.cfg.clone(),
            metrics: self.metrics.clone(),
            upstreams: upstreams
                .iter()
                .map(|(n, u)| (n.clone(), u.clone()))
                .collect(),
            addrs: self.addrs.clone(),
            health: health.clone(),
            started: Instant::now(),
        });
        tracing::info!(%addr, "admin listener serving /metrics, /livez, /readyz and /");
        let extra = self.admin_extra.take();
        Some(tokio::spawn(admin::serve(listener, state, extra, stop)))
    }
}

// === impl Running ===

impl Running {
    /// Graceful shutdown; returns when it is complete.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        // A panicked serve task has nothing left to wait for.
        let _ = self.task.await;
    }

    /// The token that triggers shutdown.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The metrics every component reports to.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// A started upstream, by name.
    pub fn upstream(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.get(name)
    }

    /// The bound address of the admin listener, if enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }
}
