//! The listener's method policy (`allow_methods` / `deny_methods`, see
//! [`crate::limits::policy`]), applied before routing: a refused request
//! is answered `unauthorized` and a refused notification dropped, both
//! counted and logged (throttled), and neither reaches an upstream ([`Router::routed`] refuses
//! them too, for the paths that route without [`Router::handle`]).

use super::Router;
use crate::envelope::{Message, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::telemetry::metrics::{DropReason, RequestOutcome};
use crate::telemetry::Peer;

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
    pub(super) fn forbidden(&self, method: &str) -> bool {
        let policy = &self.cfg.methods;
        let own = method.starts_with("rpc.")
            && !crate::pubsub::methods::is_pubsub(method)
            && !crate::persist::methods::is_persistent(method);
        if policy.is_open() || own {
            return false;
        }
        !policy.permits(method)
    }

    /// The reply to a request the policy refuses (counted and logged),
    /// or `None` when it may go on.
    pub(super) fn refuse_request(&self, id: &WireId, method: &str, peer: Peer) -> Option<Message> {
        if !self.forbidden(method) {
            return None;
        }
        self.log_refusal("request", method, peer);
        self.count_request("none", RequestOutcome::Forbidden);
        let err = GatewayError::with_detail(ErrorKind::Unauthorized, DETAIL);
        Some(self.error_reply(id.clone(), &err))
    }

    /// True (and counted as dropped, and logged) when the policy refuses
    /// a notification.
    pub(super) fn refuse_notification(&self, method: &str, peer: Peer) -> bool {
        if !self.forbidden(method) {
            return false;
        }
        self.log_refusal("notification", method, peer);
        self.count_dropped(DropReason::Forbidden);
        true
    }

    /// Tells the operator that the policy refused a `what` (`request` or
    /// `notification`): at `info`, at most one line per second per
    /// listener generation and kind, like every refusal switchyard decides.
    fn log_refusal(&self, what: &str, method: &str, peer: Peer) {
        let Some(suppressed) = self.logs.admit(what) else {
            return;
        };
        tracing::info!(
            listener = %self.cfg.name,
            %peer,
            reason = DETAIL,
            method,
            suppressed,
            "{what} refused"
        );
    }
}
