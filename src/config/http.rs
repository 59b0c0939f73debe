//! What a `jsonrpc-http` listener cannot serve, refused before anything is
//! bound: an HTTP client holds no connection switchyard could push to or
//! keep an upstream link for, so a route from it to a per-client upstream
//! is a configuration problem, not a run-time error. (A streaming method
//! called over HTTP gets its reply; its stream ends with the request.)

use super::problems::Problems;
use super::upstream::{UpstreamConfig, UpstreamMode};
use super::ListenerConfig;

/// Routes from HTTP listeners to upstreams they cannot use.
pub(super) fn check_http_routes(
    listeners: &[ListenerConfig],
    upstreams: &[UpstreamConfig],
    p: &mut Problems,
) {
    for l in listeners.iter().filter(|l| l.dialect.is_http()) {
        for name in l.routes.upstreams() {
            let Some(u) = upstreams.iter().find(|u| &u.name == name) else {
                continue;
            };
            if u.mode != UpstreamMode::PerClient {
                continue;
            }
            let msg = format!(
                "routes to upstreams.{name}, which is mode = \"per-client\": a jsonrpc-http client holds no connection for it"
            );
            p.push(format!("listeners.{}", l.name), msg);
        }
    }
}
