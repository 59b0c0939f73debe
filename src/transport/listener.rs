//! [`Listener`]: one configured listener as the transport serves it.
//!
//! It holds what is about connections rather than requests: the
//! listener's configuration (message and batch sizes, in-flight and
//! outbox caps, timers, the Sideband settings), its connection caps and
//! rate limits, the upgrade checks (Host, Origin, token) built once per
//! configuration generation, the throttled log of refusals and closes, the
//! metrics handle the transport counts with, and the listener's
//! [`Router`], which takes each request from there. The transport reads
//! the listener's configuration only through a `Listener`; the router
//! gets its own few settings ([`crate::router::RouterSettings`]) and never
//! sees these.
//!
//! A reload builds a new `Listener` (and `Router`) per listener and swaps
//! it into the listener's [`ListenerCell`]; [`Listener::succeeding`] keeps
//! what must outlive a generation (rate buckets, open-connection counts).

use std::net::IpAddr;
use std::sync::Arc;

use crate::close::CloseCode;
use crate::config::ListenerConfig;
use crate::dialect::Dialect;
use crate::error::Side;
use crate::limits::conns::ConnLimits;
use crate::limits::identity::{AtCap, ClientConns, ClientPermit, Identity};
use crate::limits::origin::UpgradePolicy;
use crate::limits::rate::{Rate, RateLimits};
use crate::router::Router;
use crate::telemetry::metrics::{DropReason, Limit, Metrics, ProtocolError, RejectReason};
use crate::telemetry::Peer;
use crate::throttle::Throttle;

mod cell;

pub use cell::ListenerCell;

/// At most one log line per refusal or close reason per this period; the
/// next line counts the ones held back.
const REFUSAL_LOG_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// One listener's configuration, limits and router, for one configuration
/// generation.
#[derive(Debug)]
pub struct Listener {
    /// The listener's configuration.
    cfg: ListenerConfig,
    /// The listener's rate limits, shared by its connections (and kept
    /// across reloads that leave the rates alone).
    rate: Arc<RateLimits>,
    /// The listener's connection caps (the counts outlive a reload).
    conns: ConnLimits,
    /// Open connections per named client (outlive a reload).
    clients: ClientConns,
    /// The upgrade checks (Host, Origin, token), built once per
    /// configuration.
    upgrade: UpgradePolicy,
    /// One log line per second per reason: refused upgrades and requests,
    /// connections switchyard closes.
    refusals: Throttle,
    metrics: Metrics,
    /// Where each request goes from here.
    router: Arc<Router>,
}

// === impl Listener ===

impl Listener {
    /// Listener `cfg`, sending its requests to `router` (made from the
    /// same configuration).
    pub fn new(cfg: ListenerConfig, router: Arc<Router>, metrics: Metrics) -> Self {
        let p = &cfg.protection;
        let rate = RateLimits::with_clients(
            p.rate,
            p.ip_rate,
            p.global_rate,
            client_rates(&p.clients),
            p.method_weights.clone(),
            p.abuse_threshold,
        );
        let conns = ConnLimits::new(p.max_connections, p.max_connections_per_ip);
        let upgrade = upgrade_policy(&cfg);
        Listener {
            cfg,
            rate,
            conns,
            clients: ClientConns::default(),
            upgrade,
            refusals: Throttle::new(REFUSAL_LOG_PERIOD),
            metrics,
            router,
        }
    }

    /// This listener, taking over what `old` (the same listener's previous
    /// generation) keeps across a reload: its rate-limit buckets when the
    /// rates are unchanged (changed rates start with full buckets), and
    /// its open-connection counts under the new caps.
    pub fn succeeding(mut self, old: &Listener) -> Self {
        let (p, q) = (&self.cfg.protection, &old.cfg.protection);
        let same_rates = p.rate == q.rate
            && p.ip_rate == q.ip_rate
            && p.global_rate == q.global_rate
            && client_rates(&p.clients) == client_rates(&q.clients)
            && p.method_weights == q.method_weights
            && p.abuse_threshold == q.abuse_threshold;
        if same_rates {
            self.rate = old.rate.clone();
        }
        self.conns = old
            .conns
            .with_caps(p.max_connections, p.max_connections_per_ip);
        self.clients = old.clients.clone();
        // A named client whose credential is gone or changed: its open
        // connections close (1008); the others keep going under the new
        // policies, which the next request reads.
        for c in &q.clients {
            let kept = p
                .clients
                .iter()
                .any(|n| n.name == c.name && n.token == c.token);
            if !kept {
                self.clients.revoke(&c.name);
            }
        }
        self
    }

    /// Admits a connection of `who` under its named client's own cap
    /// (`max_connections` of its `[[clients]]` entry); `Err` at the cap.
    /// The unnamed client has no place here (`Ok(None)`).
    pub fn admit_client(&self, who: &Identity) -> Result<Option<ClientPermit>, AtCap> {
        let cap = who
            .client()
            .and_then(|name| {
                self.cfg
                    .protection
                    .clients
                    .iter()
                    .find(|c| &*c.name == name)
            })
            .map_or(0, |c| c.max_connections);
        self.clients.admit(who, cap)
    }

    /// Open connections of named client `name`.
    pub fn client_connections(&self, name: &str) -> usize {
        self.clients.open(name)
    }

    /// The listener's configuration.
    pub fn cfg(&self) -> &ListenerConfig {
        &self.cfg
    }

    /// The listener's name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The listener's dialect.
    pub fn dialect(&self) -> Dialect {
        self.cfg.dialect
    }

    /// Where the listener's requests go.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// The listener's rate limits.
    pub fn rate(&self) -> &Arc<RateLimits> {
        &self.rate
    }

    /// The listener's connection caps.
    pub fn conns(&self) -> &ConnLimits {
        &self.conns
    }

    /// The upgrade checks of this listener (WebSocket): allow-lists and
    /// token, with the loopback defaults when bound to loopback.
    pub fn upgrade_policy(&self) -> &UpgradePolicy {
        &self.upgrade
    }

    /// The metrics handle.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Logs an upgrade refused for `reason` (throttled per reason: one line
    /// per second, with the count held back since).
    pub fn log_refused_upgrade(&self, reason: &str, peer: IpAddr) {
        let Some(suppressed) = self.refusals.admit(reason) else {
            return;
        };
        tracing::info!(listener = %self.cfg.name, %peer, reason, suppressed, "upgrade refused");
    }

    /// Logs a connection switchyard closes with `code` for `reason` (rate
    /// limit, oversize message, slow consumer, connection cap), throttled
    /// per reason like the refused upgrades. The close code is a
    /// WebSocket's: an NDJSON connection just ends.
    pub fn log_closed(&self, code: CloseCode, reason: &str, peer: Peer) {
        let Some(suppressed) = self.refusals.admit(reason) else {
            return;
        };
        let name = &self.cfg.name;
        if let crate::config::ListenAddr::Unix { .. } = self.cfg.addr {
            tracing::info!(listener = %name, %peer, reason, suppressed, "connection closed by switchyard");
        } else {
            let code = code.as_u16();
            tracing::info!(listener = %name, %peer, code, reason, suppressed, "connection closed by switchyard");
        }
    }

    /// Logs a request switchyard refuses itself for `reason` (a rate
    /// limit), throttled per reason.
    pub fn log_refused_request(&self, reason: &str, peer: Peer) {
        let Some(suppressed) = self.refusals.admit(reason) else {
            return;
        };
        tracing::info!(listener = %self.cfg.name, %peer, reason, suppressed, "request refused");
    }

    /// Counts a malformed client message or frame.
    pub fn count_protocol_error(&self, reason: ProtocolError) {
        self.metrics
            .count_protocol_error(self.cfg.dialect, Side::Client, reason);
    }

    /// Counts a client message dropped for `reason`.
    pub fn count_dropped(&self, reason: DropReason) {
        self.metrics
            .count_dropped(self.cfg.dialect, Side::Client, reason);
    }

    /// Counts a limit the listener applied.
    pub fn count_limit(&self, limit: Limit) {
        self.metrics.count_limit(&self.cfg.name, limit);
    }

    /// Counts a connection refused for `reason`.
    pub fn count_rejected(&self, reason: RejectReason) {
        self.metrics
            .count_rejected_connection(&self.cfg.name, reason);
    }
}

/// The named clients with a rate of their own, and their rates.
fn client_rates(clients: &[crate::config::clients::Client]) -> Vec<(Arc<str>, Rate)> {
    clients
        .iter()
        .filter_map(|c| Some((c.name.clone(), c.rate?)))
        .collect()
}

/// The upgrade checks of listener `cfg`.
fn upgrade_policy(cfg: &ListenerConfig) -> UpgradePolicy {
    let p = &cfg.protection;
    let loopback_only = match &cfg.addr {
        crate::config::ListenAddr::Ws { addr, .. } => addr.ip().is_loopback(),
        crate::config::ListenAddr::Unix { .. } => false,
    };
    UpgradePolicy {
        hosts: p.allowed_hosts.clone(),
        origins: p.allowed_origins.clone(),
        any_origin: p.any_origin,
        loopback_only,
        token: p.auth_token.clone(),
        clients: p
            .clients
            .iter()
            .filter_map(|c| Some((c.name.clone(), c.token.clone()?)))
            .collect(),
        jwt: p.jwt.clone(),
    }
}
