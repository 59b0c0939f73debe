//! The HTTP/1.1 WebSocket handshake (RFC 6455 §4.2), done here rather
//! than by axum's `WebSocketUpgrade` so that the connection is
//! tokio-tungstenite's own socket: replies go out as raw text frames of
//! bytes switchyard rendered (no UTF-8 check of each reply, which axum's
//! text messages need), without axum's message conversions in between.
//!
//! Refusals are those axum's extractor gives, status and body alike, in
//! the same order: a request that is not HTTP/1.1 `405` ("Request method
//! must be `CONNECT`": switchyard serves no HTTP/2 WebSocket), no
//! `Connection: upgrade` `400`, no `Upgrade: websocket` `400`, no
//! `Sec-WebSocket-Key` `400`, a `Sec-WebSocket-Version` other than 13
//! `400`, and a connection hyper cannot upgrade `426`.

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::request::Parts;
use axum::http::{StatusCode, Version};
use axum::response::{IntoResponse, Response};
use hyper::upgrade::OnUpgrade;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

/// A request that asked for a valid upgrade: what the 101 and the
/// upgraded connection need.
pub(super) struct Upgrade {
    /// `Sec-WebSocket-Key`, answered in `Sec-WebSocket-Accept`.
    key: HeaderValue,
    /// The connection, once hyper has sent the 101.
    pub(super) on_upgrade: OnUpgrade,
}

/// A refusal of a bad upgrade: its status and body.
pub(super) struct Refusal(StatusCode, &'static str);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

/// The request's upgrade, or its refusal (the method is checked before).
pub(super) fn check(parts: &mut Parts) -> Result<Upgrade, Refusal> {
    if parts.version > Version::HTTP_11 {
        return Err(refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "Request method must be `CONNECT`",
        ));
    }
    if !header_contains(&parts.headers, header::CONNECTION, "upgrade") {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "Connection header did not include 'upgrade'",
        ));
    }
    if !header_eq(&parts.headers, header::UPGRADE, "websocket") {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "`Upgrade` header did not include 'websocket'",
        ));
    }
    let Some(key) = parts.headers.get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "`Sec-WebSocket-Key` header missing",
        ));
    };
    if !header_eq(&parts.headers, header::SEC_WEBSOCKET_VERSION, "13") {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "`Sec-WebSocket-Version` header did not include '13'",
        ));
    }
    let Some(on_upgrade) = parts.extensions.remove::<OnUpgrade>() else {
        return Err(refuse(
            StatusCode::UPGRADE_REQUIRED,
            "WebSocket request couldn't be upgraded since no upgrade state was present",
        ));
    };
    Ok(Upgrade { key, on_upgrade })
}

/// The subprotocols the client offers (`Sec-WebSocket-Protocol`, every
/// header, comma-separated), trimmed.
pub(super) fn offered(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .filter_map(|p| std::str::from_utf8(p.trim_ascii()).ok())
}

impl Upgrade {
    /// The `101 Switching Protocols` answer, naming `protocol` if chosen.
    pub(super) fn switching(&self, protocol: Option<&str>) -> Response {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        // Base64: always a valid header value.
        if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(self.key.as_bytes())) {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        }
        if let Some(p) = protocol.and_then(|p| HeaderValue::from_str(p).ok()) {
            headers.insert(header::SEC_WEBSOCKET_PROTOCOL, p);
        }
        response
    }
}

fn refuse(status: StatusCode, body: &'static str) -> Refusal {
    Refusal(status, body)
}

/// `key` is `value`, ignoring ASCII case.
fn header_eq(headers: &HeaderMap, key: HeaderName, value: &str) -> bool {
    headers
        .get(&key)
        .is_some_and(|h| h.as_bytes().eq_ignore_ascii_case(value.as_bytes()))
}

/// `key` contains `value` (lower case), ignoring ASCII case.
fn header_contains(headers: &HeaderMap, key: HeaderName, value: &str) -> bool {
    headers
        .get(&key)
        .and_then(|h| std::str::from_utf8(h.as_bytes()).ok())
        .is_some_and(|h| h.to_ascii_lowercase().contains(value))
}
