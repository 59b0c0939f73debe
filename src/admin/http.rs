//! The HTTP layers (tower-http) around every admin route: request
//! tracing, a time limit, gzip for the text answers, and security headers
//! on every response, errors and 404s included.
//!
//! The Content-Security-Policy allows only same-origin scripts, styles and
//! fetches, no inline script or style, no framing, no forms. The one
//! exception is `connect-src`: it also names the gateway's own WebSocket
//! listeners, which the demo's playground (served here) connects to.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::Router;
use tower_http::compression::CompressionLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use super::{Gateway, View};
use crate::config::ListenAddr;

/// How long one admin request may take before it is answered `503`. The
/// handlers only read in-process state; this bounds a slow client instead.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Wraps `router` in the admin layers; the gateway's current WebSocket
/// listeners (read per answer: a reload may add some) are those the CSP
/// lets pages connect to.
pub(super) fn layers(router: Router, view: View) -> Router {
    let csp = move |_: &axum::response::Response| {
        let value = HeaderValue::from_str(&content_security_policy(&view.load()));
        // Listener addresses are IPs and ports: always a valid header value.
        Some(value.unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'")))
    };
    // The first layer added is the innermost: headers are set on every
    // answer, the timeout's `503` included.
    router
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

/// The policy: same-origin only, plus the WebSocket listeners' origins in
/// `connect-src`.
pub(super) fn content_security_policy(gw: &Gateway) -> String {
    let mut connect = String::from("'self'");
    for l in &gw.cfg.listeners {
        if let ListenAddr::Ws { addr, .. } = &l.addr {
            let bound = gw.addrs.get(&l.name).copied().unwrap_or(*addr);
            let scheme = if l.tls.is_some() { "wss" } else { "ws" };
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
