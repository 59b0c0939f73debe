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
//!
//! While running, [`Running::reload`] (and SIGHUP, and the admin listener's
//! `POST /reload`) applies a new configuration in place: `app/reload.rs`
//! says what changes and how; `app/live.rs` holds what a reload changes;
//! `app/run.rs` applies reloads one at a time, then shuts down.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::reload::{Outcome, Record, Requests};
use crate::admin::{self, AdminState, Health, View};
use crate::config::{Config, ListenAddr};
use crate::persist::hub::Hub;
use crate::persist::recorder::Recorder;
use crate::persist::Backend;
use crate::pubsub::Broker;
use crate::telemetry::metrics::Metrics;
use crate::transport::ListenerCell;
use crate::transport::Serve;
use crate::upstream::Upstream;

mod binding;
mod live;
mod reload;
mod run;

use binding::BoundGroup;
use live::Live;

/// Extra time, beyond the grace period, for connections to send their
/// closing frames before shutdown stops waiting for them.
const CLOSE_SLACK: Duration = Duration::from_secs(2);

/// Every listener bound, nothing served yet.
#[derive(Debug)]
pub struct Bound {
    cfg: Config,
    metrics: Metrics,
    /// One group per WebSocket address (with the listener names on it and
    /// its TLS acceptor) and one per Unix (NDJSON) listener.
    groups: Vec<BoundGroup>,
    /// Actual local address of each WebSocket listener, by name.
    addrs: BTreeMap<String, SocketAddr>,
    /// The admin listener and its actual address, if `[admin]` enables it.
    admin: Option<(TcpListener, SocketAddr)>,
    /// Routes added to the admin listener (the demo's playground).
    admin_extra: Option<axum::Router>,
    /// Where a reload reads the configuration (see [`Bound::reload_from`]).
    source: Option<Option<PathBuf>>,
    /// The persistent-subscription store, opened before any socket is
    /// bound (a store that cannot open fails the start).
    store: Arc<Backend>,
    /// The pub/sub broker, with its NATS backbone attached when `[pubsub]
    /// backend = "nats"` (connecting in the background).
    broker: Arc<Broker>,
}

/// A gateway running in the background.
#[derive(Debug)]
pub struct Running {
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    metrics: Metrics,
    /// The upstreams serving now (a reload updates it).
    upstreams: live::Current,
    admin_addr: Option<SocketAddr>,
    reloads: Requests,
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
    /// The persistent-subscription store could not be opened.
    #[error("persistence ({backend}): {source}")]
    Persist {
        /// `persistence.backend`.
        backend: &'static str,
        /// Why.
        source: crate::persist::PersistError,
    },
    /// The pub/sub backbone could not be set up.
    #[error("{0}")]
    Pubsub(#[from] crate::pubsub::nats::NatsError),
}

/// Binds every listener of `cfg`. No traffic is served until [`Bound::run`].
pub async fn bind(cfg: Config) -> Result<Bound, BindError> {
    let metrics = Metrics::new()?;
    metrics.init_labels(&cfg);
    let settings = &cfg.persistence;
    let meters = metrics.persist.meters(settings.backend);
    let store = Backend::open(settings, meters)
        .await
        .map_err(|source| BindError::Persist {
            backend: settings.backend.as_str(),
            source,
        })?;
    let broker = Arc::new(Broker::with_limits(cfg.pubsub));
    if let Some(settings) = &cfg.pubsub_nats {
        let meters = metrics.backbone.meters();
        crate::pubsub::nats::Nats::attach(settings.clone(), &broker, meters).await?;
    }
    let (groups, addrs) = binding::bind_groups(&cfg, |_| true).await?;
    let admin = match cfg.admin.addr {
        Some(addr) => Some(bind_admin(addr).await?),
        None => None,
    };
    Ok(Bound {
        cfg,
        metrics,
        groups,
        addrs,
        admin,
        admin_extra: None,
        source: None,
        store: Arc::new(store),
        broker,
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
        self.groups.iter().find_map(|g| match g {
            BoundGroup::Unix { name, path, .. } if name == listener => Some(path.clone()),
            _ => None,
        })
    }

    /// Lets this gateway reload (SIGHUP, `POST /reload`,
    /// [`Running::reload`]) by reading `file` (if any) and the
    /// environment again, exactly as at start. Without it, a reload is
    /// rejected.
    pub fn reload_from(mut self, file: Option<PathBuf>) -> Self {
        self.source = Some(file);
        self
    }

    /// Names every listener and the address it really bound (port 0
    /// resolved), so an operator knows where to connect.
    fn log_addresses(&self) {
        for (l, address) in addresses(&self.cfg, &self.addrs) {
            log_listening(l, &address);
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
    pub fn spawn(mut self) -> Running {
        self.log_addresses();
        let shutdown = CancellationToken::new();
        let upstream_stop = CancellationToken::new();
        let (reloads, requests) = mpsc::channel(admin::reload::QUEUE);
        let topics = self.cfg.persistence.topics.clone();
        self.store.spawn_background(upstream_stop.clone());
        let recorder = Recorder::spawn(
            self.store.clone(),
            topics.clone(),
            self.metrics.persist.meters(self.store.kind()),
            upstream_stop.clone(),
        );
        let mut live = Live {
            health: Health::new(&self.cfg.listeners, shutdown.clone()),
            cfg: self.cfg.clone(),
            generation: 1,
            metrics: self.metrics.clone(),
            broker: self.broker.clone(),
            recorder,
            hub: Arc::new(
                Hub::new(self.store.clone(), topics).with_caps(self.cfg.persistence.caps),
            ),
            upstreams: HashMap::new(),
            cells: HashMap::new(),
            groups: Vec::new(),
            addrs: std::mem::take(&mut self.addrs),
            ctx: Serve {
                shutdown: shutdown.clone(),
                grace_over: CancellationToken::new(),
                sessions: TaskTracker::new(),
            },
            servers: TaskTracker::new(),
            retiring: TaskTracker::new(),
            upstream_stop: upstream_stop.clone(),
            view: None,
            started: Instant::now(),
            record: Arc::new(Record::new()),
            reloads: Some(reloads.clone()),
            current: live::Current::default(),
            source: self.source.take(),
        };
        let events = live.events();
        live.upstreams = self
            .cfg
            .upstreams
            .iter()
            .map(|u| {
                let started =
                    live::start_upstream(u, &self.metrics, &events, &shutdown, &upstream_stop);
                (u.name.clone(), started)
            })
            .collect();
        live.cells = live
            .listeners()
            .into_iter()
            .map(|(name, listener)| (name, ListenerCell::new(listener)))
            .collect();
        for group in std::mem::take(&mut self.groups) {
            live.serve_group(group);
        }
        live.servers.close();
        let admin_addr = self.admin_addr();
        let admin_stop = CancellationToken::new();
        let admin = self.spawn_admin(&mut live, admin_stop.clone());
        let upstreams = live.current.clone();
        *upstreams.write() = live::by_name(&live.upstreams);
        let task = tokio::spawn(run::serve(live, requests, admin, admin_stop));
        Running {
            shutdown,
            task,
            metrics: self.metrics.clone(),
            upstreams,
            admin_addr,
            reloads,
        }
    }

    /// Runs until `shutdown` is cancelled, then shuts down gracefully.
    pub async fn run(self, shutdown: CancellationToken) {
        let running = self.spawn();
        shutdown.cancelled().await;
        running.shutdown().await;
    }

    /// Starts serving the admin listener, if any; it runs until `stop`.
    fn spawn_admin(&mut self, live: &mut Live, stop: CancellationToken) -> Option<JoinHandle<()>> {
        let (listener, addr) = self.admin.take()?;
        let view = View::new(live.gateway());
        live.view = Some(view.clone());
        let address = format!("http://{addr}");
        tracing::info!(%address, "admin listener serving /metrics, /livez, /readyz, /reload and /");
        let extra = self.admin_extra.take();
        Some(tokio::spawn(admin::serve(
            listener,
            AdminState::new(view),
            extra,
            stop,
        )))
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

    /// A started upstream of the configuration serving now, by name.
    /// (Holding it keeps a reload from closing it before the longest
    /// request timeout.)
    pub fn upstream(&self, name: &str) -> Option<Arc<Upstream>> {
        self.upstreams.read().get(name).cloned()
    }

    /// The bound address of the admin listener, if enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Reloads the configuration, as SIGHUP and `POST /reload` do: the
    /// generation now serving, or every problem that rejected it (the
    /// running configuration then serves on, untouched).
    pub async fn reload(&self) -> Outcome {
        let (tx, rx) = oneshot::channel();
        let gone = || vec!["the gateway is shutting down".to_owned()];
        self.reloads.send(tx).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

/// Each listener of `cfg` with where clients reach it: `ws://…` (or
/// `wss://…`) with the address it bound (in `addrs`), or `unix://…`.
fn addresses<'a>(
    cfg: &'a Config,
    addrs: &BTreeMap<String, SocketAddr>,
) -> Vec<(&'a crate::config::ListenerConfig, String)> {
    cfg.listeners
        .iter()
        .filter_map(|l| {
            let address = match &l.addr {
                ListenAddr::Ws { path, .. } => {
                    let addr = addrs.get(&l.name)?;
                    let scheme = if l.tls.is_some() { "wss" } else { "ws" };
                    format!("{scheme}://{addr}{path}")
                }
                ListenAddr::Unix { path, .. } => format!("unix://{}", path.display()),
            };
            Some((l, address))
        })
        .collect()
}

/// The `listening` line of one listener (at start, and after a reload
/// that adds or moves it).
fn log_listening(l: &crate::config::ListenerConfig, address: &str) {
    let (listener, dialect) = (l.name.as_str(), l.dialect.as_str());
    tracing::info!(%listener, %dialect, %address, "listening");
}
