//! The listener's method and topic policy (`allow_methods` /
//! `deny_methods`, see [`crate::limits::policy`]; `allow_topics`), applied
//! before routing: what the policy refuses. The router answers a refused
//! request `unauthorized` and drops a refused notification, both counted
//! and logged (throttled), and neither reaches an upstream (`Router::routed`
//! refuses them too, for the paths that route without `Router::handle`).

use std::sync::Arc;

use super::settings::RouterSettings;
use crate::config::RouteTable;
use crate::upstream::Upstream;

/// The detail of the `unauthorized` error: the policy, not the token.
pub(super) const DETAIL: &str = "forbidden by policy";

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
pub(super) fn forbidden(cfg: &RouterSettings, method: &str, who: Option<&str>) -> bool {
    let own = method.starts_with("rpc.")
        && !crate::pubsub::methods::is_pubsub(method)
        && !crate::persist::methods::is_persistent(method);
    let Some(policy) = cfg.methods_of(who) else {
        return true;
    };
    if policy.is_open() || own {
        return false;
    }
    !policy.permits(method)
}

/// True when the client's topic policy does not admit one of `patterns`.
/// Invalid patterns are left to the method, which answers them -32602.
pub(super) fn topics_refused(cfg: &RouterSettings, patterns: &[String], who: Option<&str>) -> bool {
    let policy = cfg.topics_of(who);
    patterns.iter().any(|p| {
        crate::pubsub::topic::validate_pattern(p).is_ok()
            && !policy.is_some_and(|policy| policy.admits(p))
    })
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
