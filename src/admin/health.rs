//! Readiness: may an orchestrator send traffic to this gateway now?
//!
//! The gateway is ready when all of these hold:
//!
//! - it is not draining: shutdown (SIGTERM/SIGINT or `Running::shutdown`)
//!   has not begun. Once it has, readiness stays `503` until the process
//!   exits, so load balancers stop routing new clients while requests in
//!   flight finish.
//! - every configured listener is serving (bound in `app::bind`, its accept
//!   loop running);
//! - every upstream with `required = true` in `shared` mode has at least one
//!   live pooled connection. `per-client` upstreams keep no standing
//!   connections (each client dials its own), so there is nothing to wait
//!   for and `required` does not gate readiness for them.
//! - the persistent-subscription store can serve: memory always; the
//!   embedded store unless a commit failed (a full disk) and its file is
//!   not yet reopened (it retries with backoff); NATS while connected.
//!
//! Liveness (`/livez`) checks none of this: a gateway whose upstream is down
//! must not be restarted for it.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use tokio_util::sync::CancellationToken;

use super::Gateway;
use crate::config::{ListenerConfig, UpstreamMode};

/// The readiness inputs that change while the gateway runs.
#[derive(Debug)]
pub(crate) struct Health {
    /// The gateway's shutdown token: cancelled means draining.
    draining: CancellationToken,
    /// Per listener name: how many accept loops serve it (0 or 1, but a
    /// reload that replaces a listener starts the new loop before the old
    /// one ends). One entry per listener name ever configured.
    serving: RwLock<BTreeMap<String, usize>>,
}

/// Marks listeners as serving while it lives; held by each listener's task.
#[derive(Debug)]
pub(crate) struct Serving {
    health: Arc<Health>,
    names: Vec<String>,
}

/// Why `gw` is not ready; empty when it is. Also updates the
/// `switchyard_ready` gauge.
pub(crate) fn check(gw: &Gateway) -> Vec<String> {
    let mut problems = Vec::new();
    if gw.health.is_draining() {
        problems.push("draining: shutdown has begun".to_owned());
    }
    for l in &gw.cfg.listeners {
        if !gw.health.is_serving(&l.name) {
            problems.push(format!("listener {}: not serving", l.name));
        }
    }
    for u in gw.cfg.upstreams.iter().filter(|u| u.required) {
        if u.mode == UpstreamMode::PerClient {
            continue;
        }
        let connected = gw.upstreams.get(&u.name).map_or(0, |up| up.connected());
        if connected == 0 {
            problems.push(format!("upstream {}: no live connection", u.name));
        }
    }
    if let Some(Err(reason)) = gw.store.as_ref().map(|s| s.ready()) {
        let kind = gw.store.as_ref().map_or("", |s| s.kind().as_str());
        problems.push(format!("persistent store ({kind}): {reason}"));
    }
    gw.metrics.ready.set(i64::from(problems.is_empty()));
    problems
}

// === impl Health ===

impl Health {
    /// No listener serving yet; `draining` is the gateway's shutdown token.
    pub(crate) fn new(listeners: &[ListenerConfig], draining: CancellationToken) -> Arc<Self> {
        let serving = listeners.iter().map(|l| (l.name.clone(), 0)).collect();
        Arc::new(Self {
            draining,
            serving: RwLock::new(serving),
        })
    }

    /// Marks `names` as serving until the returned guard is dropped.
    pub(crate) fn serving(self: &Arc<Self>, names: Vec<String>) -> Serving {
        self.set(&names, true);
        Serving {
            health: self.clone(),
            names,
        }
    }

    /// Shutdown has begun.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// The listener's accept loop is running.
    pub(crate) fn is_serving(&self, listener: &str) -> bool {
        self.serving.read().get(listener).is_some_and(|n| *n > 0)
    }

    fn set(&self, names: &[String], value: bool) {
        let mut serving = self.serving.write();
        for name in names {
            let n = serving.entry(name.clone()).or_insert(0);
            *n = if value { *n + 1 } else { n.saturating_sub(1) };
        }
    }
}

// === impl Serving ===

impl Drop for Serving {
    fn drop(&mut self) {
        self.health.set(&self.names, false);
    }
}
