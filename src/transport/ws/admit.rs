//! Browser safety before a WebSocket upgrade or a `jsonrpc-http`
//! request: Host and Origin allow-lists and the credential, which names
//! the client (its [`Identity`]).

use std::net::IpAddr;

use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use super::super::Listener;
use crate::limits::identity::Identity;
use crate::limits::origin::Refusal;
use crate::telemetry::metrics::RejectReason;

/// Browser safety before the upgrade: Host and Origin allow-lists and the
/// bearer token. A refusal is HTTP 403/401 with a short reason, counted.
pub(crate) fn check_upgrade(
    listener: &Listener,
    headers: &HeaderMap,
    uri: &Uri,
    peer: IpAddr,
) -> Result<Identity, Box<Response>> {
    let header = |name| headers.get(name).map(axum::http::HeaderValue::as_bytes);
    let verdict = listener.upgrade_policy().admit(
        header(axum::http::header::HOST),
        header(axum::http::header::ORIGIN),
        header(axum::http::header::AUTHORIZATION),
        uri.query(),
    );
    verdict.map_err(|refusal| {
        let reason = match refusal {
            Refusal::Host => RejectReason::Host,
            Refusal::NullOrigin | Refusal::Origin => RejectReason::Origin,
            Refusal::Token => RejectReason::Token,
        };
        listener.count_rejected(reason);
        listener.log_refused_upgrade(refusal.as_str(), peer);
        let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::FORBIDDEN);
        Box::new((status, refusal.reason()).into_response())
    })
}
