//! WebSocket listeners (axum): upgrade routes and the per-connection driver.
//!
//! Listeners that share an address are served by one HTTP server, each on
//! its own path; the path picks the dialect, never the offered subprotocol,
//! and an unknown path gets 404. Each connection runs one reader loop (this
//! task) and one writer task joined by the session's bounded outbox; both
//! are in `frames`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Extension};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::StreamExt;
use tokio::net::TcpListener;
use tracing::Instrument;

mod frames;

use self::frames::{read_loop, write_loop, End};
use super::accept::Place;
use super::session::Session;
use super::{Outgoing, Serve};
use crate::close::CloseCode;
use crate::dialect::Dialect;
use crate::limits::origin::Refusal;
use crate::limits::rate::PRUNE_INTERVAL;
use crate::router::Route;
use crate::telemetry::metrics::RejectReason;
use crate::telemetry::trace::connection_span;

/// Room above the configured message limit given to the WebSocket library,
/// so that switchyard sees an oversize message first and can answer it in
/// the dialect before closing with 1009.
const LIBRARY_HEADROOM: usize = 64 * 1024;

/// WebSocket read chunk per connection (allocated up front: an idle
/// connection's main cost).
const READ_BUFFER: usize = 8 * 1024;

/// Frames are written to the socket once this much is buffered (or the
/// outbox runs empty). The buffer itself grows only as frames arrive.
const WRITE_THRESHOLD: usize = 64 * 1024;

/// How long a closing connection's writer has to send what is queued.
const WRITER_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves every WebSocket listener bound to `listener` until shutdown.
/// With `tls`, every connection is `wss://` (see [`super::tls`]); caps and
/// timeouts before the upgrade are in [`super::accept`]. Also prunes each
/// listener's per-IP rate state.
pub(crate) async fn serve(
    listener: TcpListener,
    routes: Vec<Arc<Route>>,
    ctx: Serve,
    tls: Option<super::tls::Acceptor>,
) -> std::io::Result<()> {
    let Some(http) = super::accept::Http::of(&routes) else {
        return Ok(());
    };
    for route in &routes {
        route
            .rate
            .start_pruning(PRUNE_INTERVAL, ctx.shutdown.clone());
    }
    let mut app = axum::Router::new();
    for route in routes {
        let ListenAddrPath(path) = ListenAddrPath::of(&route);
        let ctx = ctx.clone();
        app = app.route(
            &path,
            get(
                move |headers: HeaderMap,
                      uri: Uri,
                      ConnectInfo(peer): ConnectInfo<SocketAddr>,
                      place: Option<Extension<Place>>,
                      ws: WebSocketUpgrade| {
                    let (route, ctx) = (route.clone(), ctx.clone());
                    async move {
                        if let Err(refused) = check_upgrade(&route, &headers, &uri, peer.ip()) {
                            return *refused;
                        }
                        // No longer pending: the session counts from here,
                        // before the client can see the 101.
                        if let Some(Extension(place)) = place {
                            place.release();
                        }
                        upgrade(ws, &headers, route, ctx, peer.ip())
                    }
                },
            ),
        );
    }
    super::accept::serve(listener, app, tls, http, &ctx).await
}

struct ListenAddrPath(String);

impl ListenAddrPath {
    fn of(route: &Route) -> Self {
        match &route.cfg.addr {
            crate::config::ListenAddr::Ws { path, .. } => ListenAddrPath(path.clone()),
            crate::config::ListenAddr::Unix { .. } => ListenAddrPath(String::from("/")),
        }
    }
}

/// Accepts the upgrade; the connection runs in a span whose OpenTelemetry
/// parent is the request's `traceparent`, if any (see `telemetry::trace`).
fn upgrade(
    ws: WebSocketUpgrade,
    headers: &HeaderMap,
    route: Arc<Route>,
    ctx: Serve,
    peer: IpAddr,
) -> Response {
    let limit = route.cfg.max_message_bytes.saturating_add(LIBRARY_HEADROOM);
    // Small initial buffers (they grow on demand): an idle connection then
    // costs a few KiB instead of the library's 128 KiB read buffer.
    let ws = ws
        .max_message_size(limit)
        .max_frame_size(limit)
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_THRESHOLD);
    let ws = select_subprotocol(ws, route.cfg.dialect);
    let span = connection_span(headers, &route.cfg.name, route.cfg.dialect.as_str());
    let sessions = ctx.sessions.clone();
    ws.on_upgrade(move |socket| {
        sessions.track_future(run(socket, route, ctx, peer).instrument(span))
    })
}

/// Echoes the listener's subprotocol when the client offers it (no offer
/// is fine too). holon-rpc matches the offer case-insensitively and echoes
/// the client's spelling, as WebBridge does: browsers fail the connection
/// unless the echo is exactly one of their offers (holon-rpc.md §1, §10).
/// The other dialects' notes name their exact token.
fn select_subprotocol(mut ws: WebSocketUpgrade, dialect: Dialect) -> WebSocketUpgrade {
    match dialect {
        Dialect::JsonRpc => ws.protocols(["jsonrpc"]),
        Dialect::Sideband => ws.protocols(["sideband.v1"]),
        Dialect::Holon => {
            let offered = ws
                .requested_protocols()
                .find(|p| p.as_bytes().eq_ignore_ascii_case(b"holon-rpc"))
                .cloned();
            if let Some(spelling) = offered {
                ws.set_selected_protocol(spelling);
            }
            ws
        }
        Dialect::Ndjson => ws,
    }
}

/// Browser safety before the upgrade: Host and Origin allow-lists and the
/// bearer token. A refusal is HTTP 403/401 with a short reason, counted.
fn check_upgrade(
    route: &Route,
    headers: &HeaderMap,
    uri: &Uri,
    peer: IpAddr,
) -> Result<(), Box<Response>> {
    let header = |name| headers.get(name).map(axum::http::HeaderValue::as_bytes);
    let verdict = route.upgrade_policy().check(
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
        route
            .metrics()
            .count_rejected_connection(&route.cfg.name, reason);
        route.log_refused_upgrade(refusal.as_str(), peer);
        let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::FORBIDDEN);
        Box::new((status, refusal.reason()).into_response())
    })
}

/// Drives one client connection to its end.
async fn run(mut socket: WebSocket, route: Arc<Route>, ctx: Serve, peer: IpAddr) {
    let name = route.cfg.name.clone();
    let Some(_permit) = route.conns.admit(peer) else {
        // Upgraded first, so that a browser can read the reason.
        route
            .metrics()
            .count_rejected_connection(&name, RejectReason::Limit);
        let frame = CloseFrame {
            code: CloseCode::PolicyViolation.as_u16(),
            reason: "max connections exceeded".into(),
        };
        // The peer may be gone already; it is refused either way.
        let _ = socket.send(WsMessage::Close(Some(frame))).await;
        return;
    };
    let _open = super::OpenConnection::count(&route);
    let (sink, stream) = socket.split();
    let sent = route.metrics().frame_counter(
        route.cfg.dialect,
        crate::error::Side::Client,
        crate::telemetry::metrics::Direction::Out,
    );
    let (session, rx) = Session::new(route.clone(), ctx.grace_over.clone());
    let session = session.with_peer(peer);
    let mut writer = tokio::spawn(write_loop(sink, rx, sent));
    let tx = session.outbox().clone();
    if let Some(hello) = session.greeting() {
        // Sideband: both sides send their handshake at once.
        tx.send_frame(hello).await;
    }
    let end = read_loop(stream, &session, &route, &ctx).await;
    match end {
        End::Gone | End::Closing => session.abort().await,
        End::Shutdown => {
            session.drain().await;
            if route.cfg.dialect == Dialect::Sideband {
                tx.send_frame(Outgoing::Binary(
                    crate::dialect::sideband::session::Sbp::close_frame("shutdown"),
                ))
                .await;
            }
            tx.close(CloseCode::GoingAway, "going away").await;
        }
        End::UpstreamLost => {
            session.drain().await;
            tx.close(CloseCode::GoingAway, "upstream connection lost")
                .await;
        }
    }
    drop(session);
    drop(tx);
    // Closing: the writer sends and flushes what is queued (the close frame
    // last), within the writer timeout; a client that does not read is cut
    // off then.
    if matches!(end, End::Gone) {
        writer.abort();
    } else if tokio::time::timeout(WRITER_TIMEOUT, &mut writer)
        .await
        .is_err()
    {
        writer.abort();
        tracing::debug!(listener = %name, "writer did not finish closing in time");
    }
}
