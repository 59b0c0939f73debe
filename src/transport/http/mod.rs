//! The `jsonrpc-http` listener: JSON-RPC 2.0 in `POST` bodies, on the
//! address and path of a listener like the WebSocket ones (the address's
//! server, [`super::accept`], speaks HTTP/1.1 with keep-alive and HTTP/2:
//! h2c by prior knowledge, ALPN `h2` over TLS).
//!
//! Each `POST` is served by a session of its own ([`Session`]): the body is
//! one inbound text, decoded, admitted (rate limits, method policy,
//! `max_in_flight` over a batch's items) and routed exactly as a WebSocket
//! frame; once every reply is queued in the session's outbox, the one
//! reply frame (or none, for notifications) is the response. What HTTP
//! decides itself (statuses, CORS) is in [`crate::dialect::jsonrpc_http`].
//!
//! Checked before anything is read: shutdown (`503`, also once the body is
//! in: a request that arrives while shutting down is not started), the method (`405`),
//! Host, Origin and token as on a WebSocket upgrade (`403`, `401`), the
//! content type (`415`) and the declared length (`413`); a body that grows
//! past `max_message_bytes` is `413` without reading further.
//!
//! `GET <path>/events?topic=…` is the listener's Server-Sent Events
//! stream ([`events`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use bytestring::ByteString;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tracing::Instrument;

mod events;

use super::accept::Place;
use super::paths::{Entry, Paths};
use super::session::Session;
use super::{Listener, ListenerCell, Outgoing};
use crate::close::CloseCode;
use crate::config::ListenAddr;
use crate::dialect::jsonrpc_http::{self as wire, sse};
use crate::limits::identity::Identity;
use crate::telemetry::metrics::{Limit, RejectReason};
use crate::telemetry::trace::connection_span;

/// Serves one HTTP request to the `jsonrpc-http` listener of `entry`.
pub(crate) async fn handle(
    entry: Entry,
    method: Method,
    mut headers: HeaderMap,
    uri: Uri,
    peer: SocketAddr,
    body: Body,
    place: Option<Place>,
) -> Response {
    // HTTP/2 carries the host as `:authority` (in the URI), not `Host`: the
    // Host check judges whichever the client sent.
    if !headers.contains_key(header::HOST) {
        let authority = uri.authority().map(|a| HeaderValue::from_str(a.as_str()));
        if let Some(Ok(host)) = authority {
            headers.insert(header::HOST, host);
        }
    }
    let listener = entry.cell.load();
    if entry.ctx.shutdown.is_cancelled() {
        listener.count_rejected(RejectReason::Draining);
        return plain(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    }
    let cors = allowed_origin(&listener, &headers);
    let own_path =
        matches!(&listener.cfg().addr, ListenAddr::Ws { path, .. } if path == uri.path());
    let mut response = match method {
        Method::OPTIONS => preflight(&listener, &headers, peer.ip()),
        Method::GET if !own_path => {
            let topics = sse::topics(uri.query());
            match check(&listener, &headers, &uri, peer.ip()) {
                Err(refused) => *refused,
                Ok(_) if topics.is_empty() => plain(
                    StatusCode::BAD_REQUEST,
                    "at least one topic parameter is required",
                ),
                Ok(who) => {
                    drop(listener);
                    events::stream(entry, topics, (peer.ip(), who), place).await
                }
            }
        }
        _ if !own_path => not_allowed(wire::ALLOW_EVENTS),
        _ => match_post(method, entry, listener, headers, uri, peer, body).await,
    };
    if let Some(origin) = cors {
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// The listener serving `path` as its event stream (`<its path>/events`),
/// if that listener is a `jsonrpc-http` one.
pub(crate) fn events_entry(paths: &Paths, path: &str) -> Option<Entry> {
    let base = path.strip_suffix(wire::EVENTS_SUFFIX)?;
    let entry = paths.get(if base.is_empty() { "/" } else { base })?;
    entry.cell.load().dialect().is_http().then_some(entry)
}

/// `405` with the methods of the resource.
fn not_allowed(allow: &'static str) -> Response {
    let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// Host, Origin and token, as on a WebSocket upgrade: who the client is
/// (the identity its credential names), or `403`, or `401` with the
/// bearer challenge.
fn check(
    listener: &Listener,
    headers: &HeaderMap,
    uri: &Uri,
    peer: IpAddr,
) -> Result<Identity, Box<Response>> {
    super::ws::admit::check_upgrade(listener, headers, uri, peer).map_err(|mut refused| {
        if refused.status() == StatusCode::UNAUTHORIZED {
            refused.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(wire::CHALLENGE),
            );
        }
        refused
    })
}

/// The listener's own path: `POST`, or `405`.
async fn match_post(
    method: Method,
    entry: Entry,
    listener: Arc<Listener>,
    headers: HeaderMap,
    uri: Uri,
    peer: SocketAddr,
    body: Body,
) -> Response {
    if method != Method::POST {
        return not_allowed(wire::ALLOW);
    }
    let request = Request {
        headers,
        uri,
        peer: peer.ip(),
    };
    post(listener, entry, request, body).await
}

/// What `post` needs of the request besides its body.
struct Request {
    headers: HeaderMap,
    uri: Uri,
    peer: IpAddr,
}

/// A `POST`: checks, the body read within the limit, then [`dispatch`].
async fn post(listener: Arc<Listener>, entry: Entry, req: Request, body: Body) -> Response {
    let who = match check(&listener, &req.headers, &req.uri, req.peer) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    let json = req
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| wire::is_json(v.as_bytes()));
    if !json {
        listener.count_rejected(RejectReason::Handshake);
        return plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let max = listener.cfg().max_message_bytes;
    let declared = req
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return too_large(&listener, max);
    }
    let bytes = match Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => return too_large(&listener, max),
        Err(e) => {
            tracing::debug!(error = %e, "request body not received");
            return plain(StatusCode::BAD_REQUEST, "request body not received");
        }
    };
    // Shutdown may have begun while the body arrived: nothing new starts.
    if entry.ctx.shutdown.is_cancelled() {
        listener.count_rejected(RejectReason::Draining);
        return plain(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    }
    let span = connection_span(&req.headers, listener.name(), listener.dialect().as_str());
    drop(listener);
    let Entry { cell, ctx } = entry;
    // A task of the listener's tracker: shutdown waits for it (within the
    // grace period) even if the client's connection is gone.
    let task = dispatch(cell.clone(), ctx.grace_over.clone(), (req.peer, who), bytes);
    let task = task.instrument(span);
    match ctx.sessions.spawn(task).await {
        Ok(out) => answer(out),
        Err(e) => {
            tracing::warn!(error = %e, "HTTP request task failed");
            plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
        }
    }
}

/// Runs `body` through a session of its own, as one inbound text, until
/// every reply is queued; returns what was queued.
async fn dispatch(
    cell: Arc<ListenerCell>,
    grace_over: tokio_util::sync::CancellationToken,
    (peer, who): (IpAddr, Identity),
    body: Bytes,
) -> Vec<Outgoing> {
    let (session, mut rx) = Session::new(cell, grace_over, Some(peer));
    // The named client's method and topic policy apply to the request.
    session.identify(who);
    match ByteString::try_from(body) {
        Ok(text) => session.on_text(&text.into()).await,
        Err(_) => session.not_utf8().await,
    };
    session.drain().await;
    let mut out = Vec::new();
    // Every reply is queued once the session is drained; nothing else is
    // waited for (a subscription made over POST ends with the request).
    while !rx.is_empty() {
        match rx.recv().await {
            Some(frame) => out.push(frame),
            None => break,
        }
    }
    session.abort().await;
    out
}

/// The response for what a request's session queued: nothing (`204`),
/// the reply (`200`, or `429` for the rate limit's error), or the close of
/// an abusive client (`429`).
fn answer(out: Vec<Outgoing>) -> Response {
    let mut reply = None;
    let mut closed = None;
    for frame in out {
        match frame.checked() {
            Outgoing::Text(text) if reply.is_none() => reply = Some(text),
            Outgoing::Close(code, _) => closed = Some(code),
            Outgoing::Text(_) | Outgoing::Rendered(_) | Outgoing::Binary(_) | Outgoing::Ping => {}
        }
    }
    match (reply, closed) {
        (Some(text), _) => {
            let status = StatusCode::from_u16(wire::reply_status(&text)).unwrap_or(StatusCode::OK);
            // The reply's bytes become the body as they are (no copy).
            let mut r = (status, Body::from(Bytes::from(text))).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            if status == StatusCode::TOO_MANY_REQUESTS {
                retry_after(&mut r);
            }
            r
        }
        (None, Some(CloseCode::PolicyViolation)) => {
            let mut r = plain(StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded");
            retry_after(&mut r);
            r
        }
        (None, Some(_)) => plain(StatusCode::BAD_REQUEST, "bad request"),
        (None, None) => StatusCode::NO_CONTENT.into_response(),
    }
}

/// A CORS preflight: `204` with the allowed methods and headers when the
/// Host and Origin pass (the token is not asked for: browsers send none
/// with a preflight); a refused one gets `403` and no CORS headers.
fn preflight(listener: &Listener, headers: &HeaderMap, peer: IpAddr) -> Response {
    let header = |name| headers.get(name).map(HeaderValue::as_bytes);
    let verdict =
        listener
            .upgrade_policy()
            .check(header(header::HOST), header(header::ORIGIN), None, None);
    if let Err(refusal) = verdict.or_else(|r| match r {
        crate::limits::origin::Refusal::Token => Ok(()),
        other => Err(other),
    }) {
        listener.count_rejected(RejectReason::Origin);
        listener.log_refused_upgrade(refusal.as_str(), peer);
        return plain(StatusCode::FORBIDDEN, refusal.reason());
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    h.insert(header::ALLOW, HeaderValue::from_static(wire::ALLOW));
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(wire::CORS_METHODS),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(wire::CORS_HEADERS),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from(wire::CORS_MAX_AGE_SECS),
    );
    r
}

/// The request's `Origin`, to echo in `Access-Control-Allow-Origin`, when
/// it is present and passes the listener's Host and Origin checks.
fn allowed_origin(listener: &Listener, headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    let host = headers.get(header::HOST).map(HeaderValue::as_bytes);
    let verdict = listener
        .upgrade_policy()
        .check(host, Some(origin.as_bytes()), None, None);
    match verdict {
        Ok(()) | Err(crate::limits::origin::Refusal::Token) => Some(origin.clone()),
        Err(_) => None,
    }
}

/// `413`, counted as the message-size limit.
fn too_large(listener: &Listener, max: usize) -> Response {
    listener.count_limit(Limit::MaxMessageBytes);
    let mut r = plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("request body exceeds maximum of {max} bytes"),
    );
    // The rest of the body is not read: the connection cannot be reused.
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

fn retry_after(r: &mut Response) {
    r.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(wire::RETRY_AFTER_SECS),
    );
}

/// A short plain-text answer.
fn plain(status: StatusCode, text: &str) -> Response {
    (status, text.to_owned()).into_response()
}
