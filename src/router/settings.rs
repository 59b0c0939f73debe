//! [`RouterSettings`]: what the router takes from its listener's
//! configuration.
//!
//! The router is given a small copy of these few values rather than a
//! shared `Arc<ListenerConfig>`, so that the type says what a request's
//! trip depends on: the listener's name (metric labels, logs), its
//! dialect (error replies, spans), the request timeout, the `ping`
//! notification switch and the method policy. Everything else in the
//! listener's configuration (message and batch sizes, in-flight and
//! outbox caps, timers, connection caps, rate limits, the upgrade checks,
//! the Sideband settings) belongs to the transport's
//! `transport::Listener`, and the router cannot reach it. The copy is
//! made once per configuration generation, next to the route table.

use std::time::Duration;

use crate::config::ListenerConfig;
use crate::dialect::Dialect;
use crate::limits::policy::MethodPolicy;

/// The listener settings a router applies to each request.
#[derive(Debug, Clone)]
pub struct RouterSettings {
    /// The listener's name: the `listener` label and log field.
    pub name: String,
    /// The listener's dialect: replies and errors are rendered in it.
    pub dialect: Dialect,
    /// How long a request may wait for its upstream's reply.
    pub request_timeout: Duration,
    /// Answer a `ping` notification with a `pong` (JSON-RPC dialects).
    pub answer_ping_notification: bool,
    /// Which methods clients may call (`allow_methods`, `deny_methods`),
    /// applied before routing.
    pub methods: MethodPolicy,
}

// === impl RouterSettings ===

impl RouterSettings {
    /// The router's share of listener `cfg`.
    pub fn of(cfg: &ListenerConfig) -> Self {
        RouterSettings {
            name: cfg.name.clone(),
            dialect: cfg.dialect,
            request_timeout: cfg.request_timeout,
            answer_ping_notification: cfg.answer_ping_notification,
            methods: cfg.protection.methods.clone(),
        }
    }
}
