//! The running gateway's parts that a reload changes: the configuration,
//! the started upstreams, each listener's cell, and the serving
//! groups (one per WebSocket address, one per Unix socket), each with its
//! own stop and grace tokens so that a reload can stop one alone.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::binding::{BoundGroup, GroupKey};
use super::CLOSE_SLACK;
use crate::admin::health::Serving;
use crate::admin::{self, reload::Record, Health, View};
use crate::config::{Config, ListenAddr, UpstreamConfig};
use crate::pubsub::Broker;
use crate::router::Router;
use crate::telemetry::metrics::Metrics;
use crate::transport::paths::{Entry, Paths};
use crate::transport::{address, Listener, ListenerCell, Serve};
use crate::upstream::Upstream;

/// A group being served.
#[derive(Debug)]
pub(super) struct Group {
    pub(super) key: GroupKey,
    pub(super) names: Vec<String>,
    /// Stops this group alone (a child of the gateway's shutdown).
    stop: CancellationToken,
    /// Ends this group's grace period (a child of the gateway's).
    grace_over: CancellationToken,
    /// WebSocket: the listeners by path, which a reload may change while
    /// the address serves, and the address it bound.
    pub(super) paths: Option<(Arc<Paths>, SocketAddr)>,
    /// Readiness of the listeners a reload added to the group.
    added: Vec<Serving>,
}

/// A started upstream and the tokens that close it alone.
#[derive(Debug)]
pub(super) struct Started {
    pub(super) upstream: Arc<Upstream>,
    /// Its links say goodbye as at shutdown once cancelled.
    stopping: CancellationToken,
    /// Its links close once cancelled.
    stop: CancellationToken,
}

/// The running gateway, owned by its serve task (reloads are applied one
/// at a time there).
#[derive(Debug)]
pub(super) struct Live {
    pub(super) cfg: Config,
    pub(super) generation: u64,
    pub(super) metrics: Metrics,
    /// The pub/sub broker: every listener's subscribers, every upstream's
    /// events (kept across reloads, so subscriptions survive them).
    pub(super) broker: Arc<Broker>,
    /// The persistent store's hand-off, given to every upstream (kept
    /// across reloads, as the store is).
    pub(super) recorder: crate::persist::recorder::Recorder,
    /// The persistent-subscription hub every listener serves from.
    pub(super) hub: Arc<crate::persist::hub::Hub>,
    pub(super) upstreams: HashMap<String, Started>,
    /// Each listener as it serves now, by name (a reload swaps the
    /// listener inside).
    pub(super) cells: HashMap<String, Arc<ListenerCell>>,
    pub(super) groups: Vec<Group>,
    /// Bound address of each WebSocket listener.
    pub(super) addrs: BTreeMap<String, SocketAddr>,
    /// The gateway-wide shutdown and grace tokens, and every connection.
    pub(super) ctx: Serve,
    pub(super) servers: TaskTracker,
    /// Upstreams draining after a reload removed or changed them.
    pub(super) retiring: TaskTracker,
    pub(super) health: Arc<Health>,
    pub(super) upstream_stop: CancellationToken,
    /// The admin listener's view, when there is one.
    pub(super) view: Option<View>,
    pub(super) started: Instant,
    pub(super) record: Arc<Record>,
    pub(super) reloads: Option<admin::reload::Requests>,
    /// Where a reload reads the configuration: `Some(file)` (`None` file:
    /// defaults and environment only); `None` when this gateway was not
    /// started from a configuration source.
    pub(super) source: Option<Option<PathBuf>>,
    /// The upstreams serving now, shared with [`super::Running`].
    pub(super) current: Current,
}

/// The upstreams serving now, by name (replaced whole by a reload, so a
/// retired upstream is not held here).
pub(super) type Current = Arc<parking_lot::RwLock<HashMap<String, Arc<Upstream>>>>;

/// Starts one upstream with tokens of its own, children of the gateway's.
pub(super) fn start_upstream(
    cfg: &UpstreamConfig,
    metrics: &Metrics,
    events: &crate::upstream::Events,
    shutdown: &CancellationToken,
    upstream_stop: &CancellationToken,
) -> Started {
    // `stopping` is a child of `shutdown`: cancelled in the same instant,
    // before any session sees the shutdown and closes a dedicated link.
    let (stopping, stop) = (shutdown.child_token(), upstream_stop.child_token());
    let upstream = Upstream::start(
        cfg.clone(),
        metrics.clone(),
        events.clone(),
        stopping.clone(),
        stop.clone(),
    );
    Started {
        upstream,
        stopping,
        stop,
    }
}

/// The upstreams by name, as routers resolve them.
pub(super) fn by_name(upstreams: &HashMap<String, Started>) -> HashMap<String, Arc<Upstream>> {
    upstreams
        .iter()
        .map(|(n, s)| (n.clone(), s.upstream.clone()))
        .collect()
}

// === impl Live ===

impl Live {
    /// Serves a bound group with tokens of its own.
    pub(super) fn serve_group(&mut self, bound: BoundGroup) {
        let stop = self.ctx.shutdown.child_token();
        let grace_over = self.ctx.grace_over.child_token();
        let ctx = Serve {
            shutdown: stop.clone(),
            grace_over: grace_over.clone(),
            sessions: self.ctx.sessions.clone(),
        };
        let (key, names, paths) = match bound {
            BoundGroup::Ws {
                listener,
                key,
                names,
                tls,
            } => {
                let paths = Arc::new(Paths::default());
                for name in &names {
                    self.add_path(&paths, &ctx, name);
                }
                let local = listener.local_addr().unwrap_or(key);
                let serving = self.health.serving(names.clone());
                let served = paths.clone();
                self.servers.spawn(async move {
                    let _serving = serving;
                    if let Err(e) = address::serve(listener, served, ctx, tls).await {
                        tracing::error!(error = %e, "WebSocket server failed");
                    }
                });
                (GroupKey::Ws(key), names, Some((paths, local)))
            }
            BoundGroup::Unix {
                listener,
                name,
                path,
            } => {
                if let Some(cell) = self.cells.get(&name).cloned() {
                    let serving = self.health.serving(vec![name.clone()]);
                    let serve = crate::transport::unix::serve(listener, path.clone(), cell, ctx);
                    self.servers.spawn(async move {
                        let _serving = serving;
                        serve.await;
                    });
                }
                (GroupKey::Unix(path), vec![name], None)
            }
        };
        self.groups.push(Group {
            key,
            names,
            stop,
            grace_over,
            paths,
            added: Vec::new(),
        });
    }

    /// Serves listener `name` (its cell made already) on its path of
    /// `paths`, with tokens that are children of the address's `ctx`.
    fn add_path(&self, paths: &Paths, ctx: &Serve, name: &str) {
        let path = self.cfg.listeners.iter().find_map(|l| match &l.addr {
            ListenAddr::Ws { path, .. } if l.name == name => Some(path.clone()),
            _ => None,
        });
        let (Some(path), Some(cell)) = (path, self.cells.get(name).cloned()) else {
            return;
        };
        let ctx = Serve {
            shutdown: ctx.shutdown.child_token(),
            grace_over: ctx.grace_over.child_token(),
            sessions: ctx.sessions.clone(),
        };
        paths.insert(path, Entry { cell, ctx });
    }

    /// A reload added listener `name` to a WebSocket group that keeps
    /// serving.
    pub(super) fn join_group(&mut self, index: usize, name: &str) {
        let Some(group) = self.groups.get(index) else {
            return;
        };
        let Some((paths, local)) = group.paths.clone() else {
            return;
        };
        let ctx = Serve {
            shutdown: group.stop.clone(),
            grace_over: group.grace_over.clone(),
            sessions: self.ctx.sessions.clone(),
        };
        self.add_path(&paths, &ctx, name);
        self.addrs.insert(name.to_owned(), local);
        let serving = self.health.serving(vec![name.to_owned()]);
        if let Some(group) = self.groups.get_mut(index) {
            group.names.push(name.to_owned());
            group.added.push(serving);
        }
        tracing::info!(listener = name, "listener added");
    }

    /// A reload removed (or replaced) listener `name`, served on `path` of
    /// a WebSocket group that keeps serving: no new upgrades there; its
    /// connections drain as on shutdown.
    pub(super) fn leave_group(&mut self, index: usize, name: &str, path: &str) {
        let Some(group) = self.groups.get_mut(index) else {
            return;
        };
        group.names.retain(|n| n != name);
        let Some(entry) = group.paths.as_ref().and_then(|(p, _)| p.remove(path)) else {
            return;
        };
        tracing::info!(
            listener = name,
            "listener removed: draining its connections"
        );
        self.cells.remove(name);
        self.addrs.remove(name);
        self.drain(entry.ctx.shutdown, entry.ctx.grace_over);
    }

    /// Stops what `stop` serves and ends its grace period after
    /// `shutdown_grace`.
    fn drain(&self, stop: CancellationToken, grace_over: CancellationToken) {
        stop.cancel();
        let grace = self.cfg.gateway.shutdown_grace;
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            grace_over.cancel();
        });
    }

    /// Stops a group as shutdown does: no new connections; its
    /// connections finish their requests within the grace period, then
    /// close (WebSocket 1001).
    pub(super) fn stop_group(&self, group: &Group) {
        tracing::info!(listeners = %group.names.join(","), "listener removed: draining its connections");
        self.drain(group.stop.clone(), group.grace_over.clone());
    }

    /// Builds every listener, with its router against the current
    /// upstreams, taking over the previous generation's counts and
    /// buckets.
    pub(super) fn listeners(&self) -> HashMap<String, Arc<Listener>> {
        let upstreams = by_name(&self.upstreams);
        self.cfg
            .listeners
            .iter()
            .map(|l| {
                let router = Router::new(l, &upstreams, self.broker.clone(), self.metrics.clone())
                    .with_hub(self.hub.clone());
                let listener = Listener::new(l.clone(), Arc::new(router), self.metrics.clone());
                let listener = match self.cells.get(&l.name) {
                    Some(cell) => listener.succeeding(&cell.load()),
                    None => listener,
                };
                (l.name.clone(), Arc::new(listener))
            })
            .collect()
    }

    /// Where the upstreams' events go.
    pub(super) fn events(&self) -> crate::upstream::Events {
        crate::upstream::Events {
            broker: self.broker.clone(),
            recorder: Some(self.recorder.clone()),
        }
    }

    /// The admin listener's view of the gateway now.
    pub(super) fn gateway(&self) -> admin::Gateway {
        admin::Gateway {
            cfg: self.cfg.clone(),
            metrics: self.metrics.clone(),
            upstreams: by_name(&self.upstreams).into_iter().collect(),
            addrs: self.addrs.clone(),
            health: self.health.clone(),
            started: self.started,
            record: self.record.clone(),
            reloads: self.reloads.clone(),
            store: Some(self.hub.store().clone()),
        }
    }

    /// Drains an upstream a reload removed or replaced: new calls already
    /// go to the new definition; this waits until nothing holds the old
    /// one (every router that named it, every call on it answered) or the
    /// longest request timeout has passed, then closes its links.
    pub(super) fn retire(&self, started: Started, patience: Duration) {
        let Started {
            upstream,
            stopping,
            stop,
        } = started;
        // Its feeds go now: the new definition opens its own.
        upstream.stop_feeds();
        self.retiring.spawn(async move {
            let until = tokio::time::Instant::now() + patience;
            // (Polled: an `Arc` has no "last other owner gone" event.) A
            // gateway shutdown cancels `stop` and ends the wait.
            while Arc::strong_count(&upstream) > 1 && tokio::time::Instant::now() < until {
                tokio::select! {
                    () = tokio::time::sleep(RETIRE_POLL) => {}
                    () = stop.cancelled() => break,
                }
            }
            tracing::info!(
                upstream = upstream.name(),
                "upstream drained; closing its connections"
            );
            stopping.cancel();
            stop.cancel();
            if tokio::time::timeout(CLOSE_SLACK, upstream.links_closed())
                .await
                .is_err()
            {
                tracing::warn!(
                    upstream = upstream.name(),
                    "some upstream connections did not close in time"
                );
            }
        });
    }
}

/// How often a retiring upstream checks whether it is still in use.
const RETIRE_POLL: Duration = Duration::from_millis(50);
