//! The listener's method policy (`allow_methods` / `deny_methods`, see
//! [`crate::limits::policy`]), applied before routing: a refused request
//! is answered `unauthorized` and a refused notification dropped, both
//! counted, and neither reaches an upstream ([`Router::routed`] refuses
//! them too, for the paths that route without [`Router::handle`]).

use super::Router;
use crate::envelope::{Message, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::telemetry::metrics::{DropReason, RequestOutcome};

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

    /// The reply to a request the policy refuses (counted), or `None`
    /// when it may go on.
    pub(super) fn refuse_request(&self, id: &WireId, method: &str) -> Option<Message> {
        if !self.forbidden(method) {
            return None;
        }
        // The client's doing: logged at debug, like every client fault.
        tracing::debug!(listener = %self.cfg.name, method, "request forbidden by policy");
        self.count_request("none", RequestOutcome::Forbidden);
        let err = GatewayError::with_detail(ErrorKind::Unauthorized, DETAIL);
        Some(self.error_reply(id.clone(), &err))
    }

    /// True (and counted as dropped) when the policy refuses a
    /// notification.
    pub(super) fn refuse_notification(&self, method: &str) -> bool {
        if !self.forbidden(method) {
            return false;
        }
        tracing::debug!(listener = %self.cfg.name, method, "notification forbidden by policy");
        self.count_dropped(DropReason::Forbidden);
        true
    }
}
