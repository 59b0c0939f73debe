//! The listener's method policy (`allow_methods` / `deny_methods`, see
//! [`crate::limits::policy`]), applied before routing: a refused request
//! is answered `unauthorized` and a refused notification dropped, both
//! counted and logged (throttled), and neither reaches an upstream ([`Router::routed`] refuses
//! them too, for the paths that route without [`Router::handle`]).

use std::sync::Arc;

use super::Router;
use crate::config::RouteTable;
use crate::envelope::{Message, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::telemetry::metrics::{DropReason, RequestOutcome};
use crate::telemetry::Peer;
use crate::upstream::Upstream;

/// The detail of the `unauthorized` error: the policy, not the token.
const DETAIL: &str = "forbidden by policy";

// === impl Router ===

impl Router {
    /// True when the listener's method policy refuses `method`.
    /// switchyard's own `rpc.*` namespace is not subject to it (those
    /// methods are answered by switchyard, never forwarded), except the
    /// pub/sub and persistent methods: they expose the upstreams' events,
    /// so a listener with an allow list must allow them (`rpc.subscribe*`,
    /// `rpc.unsubscribe*`, `rpc.acknowledge.persistent*`).
    ///
    /// `who` is the client's named client (`None`: the unnamed client),
    /// whose own policy applies; a named client this configuration no
    /// longer has may call nothing.
    pub(super) fn forbidden(&self, method: &str, who: Option<&str>) -> bool {
        let own = method.starts_with("rpc.")
            && !crate::pubsub::methods::is_pubsub(method)
            && !crate::persist::methods::is_persistent(method);
        let Some(policy) = self.cfg.methods_of(who) else {
            return true;
        };
        if policy.is_open() || own {
            return false;
        }
        !policy.permits(method)
    }

    /// The reply to a request the policy refuses (counted and logged),
    /// or `None` when it may go on.
    pub(super) fn refuse_request(
        &self,
        id: &WireId,
        method: &str,
        peer: Peer,
        who: Option<&str>,
    ) -> Option<Message> {
        if !self.forbidden(method, who) {
            return None;
        }
        self.log_refusal("request", method, peer, who);
        self.count_request("none", RequestOutcome::Forbidden);
        let err = GatewayError::with_detail(ErrorKind::Unauthorized, DETAIL);
        Some(self.error_reply(id.clone(), &err))
    }

    /// True (and counted as dropped, and logged) when the policy refuses
    /// a notification.
    pub(super) fn refuse_notification(&self, method: &str, peer: Peer, who: Option<&str>) -> bool {
        if !self.forbidden(method, who) {
            return false;
        }
        self.log_refusal("notification", method, peer, who);
        self.count_dropped(DropReason::Forbidden);
        true
    }

    /// The reply to a subscribe whose `patterns` the client's topic policy
    /// does not admit (counted and logged), or `None` when every pattern
    /// may be subscribed. Invalid patterns are left to the method, which
    /// answers them -32602.
    pub(super) fn refuse_topics(
        &self,
        id: &WireId,
        patterns: &[String],
        peer: Peer,
        who: Option<&str>,
    ) -> Option<Message> {
        let policy = self.cfg.topics_of(who);
        let refused = patterns.iter().any(|p| {
            crate::pubsub::topic::validate_pattern(p).is_ok()
                && !policy.is_some_and(|policy| policy.admits(p))
        });
        if !refused {
            return None;
        }
        self.log_refusal("subscription", "rpc.subscribe", peer, who);
        self.count_request("none", RequestOutcome::Forbidden);
        let err = GatewayError::with_detail(ErrorKind::Unauthorized, DETAIL);
        Some(self.error_reply(id.clone(), &err))
    }

    /// Tells the operator that the policy refused a `what` (`request` or
    /// `notification`): at `info`, at most one line per second per
    /// listener generation and kind, like every refusal switchyard decides.
    fn log_refusal(&self, what: &str, method: &str, peer: Peer, who: Option<&str>) {
        let Some(suppressed) = self.logs.admit(what) else {
            return;
        };
        tracing::info!(
            listener = %self.cfg.name,
            %peer,
            // The named client (empty: the listener's unnamed client).
            client = who.unwrap_or_default(),
            reason = DETAIL,
            method,
            suppressed,
            "{what} refused"
        );
    }
}

/// The topics the upstreams of `table` publish: `<upstream>.>` for their
/// notifications, and the topics their `topics` renames and feeds name.
/// What a listener's clients may subscribe to unless it sets
/// `allow_topics`.
pub(super) fn upstream_topics(table: &RouteTable<Arc<Upstream>>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for up in table.upstreams() {
        let publish = &up.config().publish;
        let own = std::iter::once(format!("{}.>", up.name()))
            .chain(publish.topics.values().cloned())
            .chain(publish.feeds.iter().map(|f| f.topic.clone()));
        for topic in own {
            if !out.contains(&topic) {
                out.push(topic);
            }
        }
    }
    out
}
