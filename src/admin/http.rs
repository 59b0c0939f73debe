//! The HTTP layers (tower-http) around every admin route: request
//! tracing, a time limit, gzip for the text answers, security headers on
//! every response, errors and 404s included, and innermost the `Host`
//! check: the listener answers only requests whose `Host` is an IP
//! address, a loopback name or one of `[admin] allowed_hosts` (else
//! `403`), so that a page on another site cannot read it through DNS
//! rebinding.
//!
//! The Content-Security-Policy allows only same-origin scripts, styles and
//! fetches, no inline script or style, no framing, no forms. The one
//! exception is `connect-src`: it also names the gateway's own WebSocket
//! listeners, which the demo's playground (served here) connects to.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower_http::compression::CompressionLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use super::{Gateway, View};
use crate::config::ListenAddr;
use crate::limits::origin;

/// How long one admin request may take before it is answered `503`. The
/// handlers only read in-process state; this bounds a slow client instead.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Wraps `router` in the admin layers; the gateway's current WebSocket
/// listeners (read per answer: a reload may add some) are those the CSP
/// lets pages connect to.
pub(super) fn layers(router: Router, view: View) -> Router {
    let hosts = view.clone();
    let csp = move |_: &axum::response::Response| {
        let value = HeaderValue::from_str(&content_security_policy(&view.load()));
        // Listener addresses are IPs and ports: always a valid header value.
        Some(value.unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'")))
    };
    let host_check = axum::middleware::from_fn(move |request: Request, next: Next| {
        let view = hosts.clone();
        async move { check_host(&view, request, next).await }
    });
    // The first layer added is the innermost: headers are set on every
    // answer, the timeout's `503` and the Host check's `403` included.
    router
        .layer(host_check)
        .layer(CompressionLayer::new())
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            REQUEST_TIMEOUT,
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            csp,
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(TraceLayer::new_for_http())
}

/// Answers `403` unless the request's `Host` passes
/// [`origin::admin_host`] with the current `[admin] allowed_hosts`.
async fn check_host(view: &View, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .map(HeaderValue::as_bytes);
    let allowed = origin::admin_host(host, &view.load().cfg.admin.allowed_hosts);
    match allowed {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::debug!(host = ?host.map(String::from_utf8_lossy), "admin request refused: Host not allowed");
            let body = format!("{}\n", refusal.reason());
            (StatusCode::FORBIDDEN, body).into_response()
        }
    }
}

/// The policy: same-origin only, plus the WebSocket listeners' origins
/// (and the `jsonrpc-http` ones') in `connect-src`.
pub(super) fn content_security_policy(gw: &Gateway) -> String {
    let mut connect = String::from("'self'");
    for l in &gw.cfg.listeners {
        if let ListenAddr::Ws { addr, .. } = &l.addr {
            let bound = gw.addrs.get(&l.name).copied().unwrap_or(*addr);
            // `jsonrpc-http` listeners are reached with fetch/EventSource.
            let scheme = match (l.dialect.is_http(), l.tls.is_some()) {
                (true, true) => "https",
                (true, false) => "http",
                (false, true) => "wss",
                (false, false) => "ws",
            };
            // Bound to every interface: the page reaches it under whatever
            // host name it was loaded from.
            let source = if bound.ip().is_unspecified() {
                format!(" {scheme}://*:{}", bound.port())
            } else {
                format!(" {scheme}://{bound}")
            };
            if !connect.contains(&source) {
                connect.push_str(&source);
            }
        }
    }
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src {connect}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}
