//! WebSocket listeners (axum): upgrade routes and the per-connection driver.
//!
//! Listeners that share an address are served by one HTTP server, each on
//! its own path; the path picks the dialect, never the offered subprotocol,
//! and an unknown path gets 404. Each connection runs one reader loop (this
//! task) and one writer task joined by the session's bounded outbox.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use super::session::{Session, Verdict};
use super::{Outgoing, Serve};
use crate::dialect::render::{render, Style};
use crate::dialect::Dialect;
use crate::envelope::{Message, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::limits::origin::Refusal;
use crate::router::Route;
use crate::telemetry::metrics::RejectReason;
use crate::telemetry::trace::connection_span;

/// Room above the configured message limit given to the WebSocket library,
/// so that switchyard sees an oversize message first and can answer it in
/// the dialect before closing with 1009.
const LIBRARY_HEADROOM: usize = 64 * 1024;

/// Why a connection must close now: idle too long, or lived too long.
fn expired(
    p: &crate::config::Protection,
    opened: Instant,
    last_rx: Instant,
) -> Option<&'static str> {
    if p.idle_timeout.is_some_and(|t| last_rx.elapsed() >= t) {
        return Some("idle timeout");
    }
    if p.max_connection_lifetime
        .is_some_and(|t| opened.elapsed() >= t)
    {
        return Some("connection lifetime reached");
    }
    None
}

/// WebSocket read chunk per connection (allocated up front: an idle
/// connection's main cost).
const READ_BUFFER: usize = 8 * 1024;

/// Frames are written to the socket once this much is buffered (or the
/// outbox runs empty). The buffer itself grows only as frames arrive.
const WRITE_THRESHOLD: usize = 64 * 1024;

/// How long a Sideband client has to send its handshake.
const SIDEBAND_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// How the reader loop ended.
enum End {
    /// The client left or the link failed.
    Gone,
    /// switchyard closes the connection (the close frame is queued).
    Closing,
    /// Graceful shutdown.
    Shutdown,
    /// A dedicated upstream link dropped: finish what is pending (it fails
    /// with `unavailable` at once), then close 1001.
    UpstreamLost,
}

/// Serves every WebSocket listener bound to `listener` until shutdown.
/// With `tls`, every connection is `wss://` (see [`super::tls`]).
pub(crate) async fn serve(
    listener: TcpListener,
    routes: Vec<Arc<Route>>,
    ctx: Serve,
    tls: Option<super::tls::Acceptor>,
) -> std::io::Result<()> {
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
                      ws: WebSocketUpgrade| {
                    let (route, ctx) = (route.clone(), ctx.clone());
                    async move {
                        if let Err(refused) = check_upgrade(&route, &headers, &uri) {
                            return *refused;
                        }
                        upgrade(ws, &headers, route, ctx, peer.ip())
                    }
                },
            ),
        );
    }
    if let Some(acceptor) = tls {
        return super::tls::serve(listener, app, acceptor, &ctx).await;
    }
    let stop = ctx.shutdown.clone();
    // Replies are small and latency-bound: no Nagle delay on client sockets.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move { stop.cancelled().await })
    .await
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
    let ws = match route.cfg.dialect {
        Dialect::JsonRpc => ws.protocols(["jsonrpc"]),
        Dialect::Holon => ws.protocols(["holon-rpc"]),
        Dialect::Sideband => ws.protocols(["sideband.v1"]),
        Dialect::Ndjson => ws,
    };
    let span = connection_span(headers, &route.cfg.name, route.cfg.dialect.as_str());
    let sessions = ctx.sessions.clone();
    ws.on_upgrade(move |socket| {
        sessions.track_future(run(socket, route, ctx, peer).instrument(span))
    })
}

/// Browser safety before the upgrade: Host and Origin allow-lists and the
/// bearer token. A refusal is HTTP 403/401 with a short reason, counted.
fn check_upgrade(route: &Route, headers: &HeaderMap, uri: &Uri) -> Result<(), Box<Response>> {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
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
        tracing::debug!(listener = %route.cfg.name, refusal = refusal.as_str(), "upgrade refused");
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
            code: 1008,
            reason: "max connections exceeded".into(),
        };
        // The peer may be gone already; it is refused either way.
        let _ = socket.send(WsMessage::Close(Some(frame))).await;
        return;
    };
    let _open = super::OpenConnection::count(&route);
    let (sink, stream) = socket.split();
    let (tx, rx) = mpsc::channel(route.cfg.outbox_capacity);
    let writer = tokio::spawn(write_loop(sink, rx));
    let session = Session::new(route.clone(), tx.clone(), ctx.grace_over.clone()).with_peer(peer);
    if let Some(hello) = session.greeting() {
        // Sideband: both sides send their handshake at once.
        let _ = tx.send(hello).await;
    }
    let end = read_loop(stream, &session, &route, &tx, &ctx).await;
    match end {
        End::Gone | End::Closing => session.abort().await,
        End::Shutdown => {
            session.drain().await;
            if route.cfg.dialect == Dialect::Sideband {
                let _ = tx
                    .send(Outgoing::Binary(crate::transport::sbp::Sbp::close_frame(
                        "shutdown",
                    )))
                    .await;
            }
            // The writer may already be gone with the client.
            let _ = tx.send(Outgoing::Close(1001, "going away".into())).await;
        }
        End::UpstreamLost => {
            session.drain().await;
            // The writer may already be gone with the client.
            let _ = tx
                .send(Outgoing::Close(1001, "upstream connection lost".into()))
                .await;
        }
    }
    drop(session);
    drop(tx);
    if matches!(end, End::Gone) {
        writer.abort();
    } else if tokio::time::timeout(Duration::from_secs(2), writer)
        .await
        .is_err()
    {
        tracing::debug!(listener = %name, "writer did not finish closing in time");
    }
}

async fn read_loop(
    mut stream: futures_util::stream::SplitStream<WebSocket>,
    session: &Session,
    route: &Route,
    tx: &mpsc::Sender<Outgoing>,
    ctx: &Serve,
) -> End {
    let cfg = &route.cfg;
    let limits = [
        cfg.protection.idle_timeout,
        cfg.protection.max_connection_lifetime,
    ];
    let period = limits
        .into_iter()
        .flatten()
        .fold(cfg.ping_interval.min(cfg.pong_timeout), Duration::min)
        / 4;
    let mut tick = tokio::time::interval(period.max(Duration::from_millis(10)));
    let mut last_rx = Instant::now();
    let mut ping_sent: Option<Instant> = None;
    let mut seen = false;
    let opened = Instant::now();
    let (lost, slow) = (session.upstream_lost(), session.slow_consumer());
    // Made once, not per frame: each `cancelled()` registers a waiter.
    let (lost, slow, shutdown) = (lost.cancelled(), slow.cancelled(), ctx.shutdown.cancelled());
    tokio::pin!(lost, slow, shutdown);
    loop {
        // Frames first: the cancellation branches are polled only when no
        // frame is ready (the runtime's budget makes that happen often).
        let frame = tokio::select! {
            biased;
            frame = stream.next() => frame,
            () = &mut lost => return End::UpstreamLost,
            () = &mut slow => {
                route.count_protocol_error("slow_consumer");
                route.metrics().count_limit(&cfg.name, crate::telemetry::metrics::Limit::SlowConsumer);
                // The outbox is full: the close frame may not fit; the socket goes anyway.
                let _ = tx.try_send(Outgoing::Close(1008, "slow consumer".into()));
                return End::Gone;
            }
            _ = tick.tick() => {
                // Frames since the last tick count as "now" (coarse, but no
                // clock read per frame).
                if std::mem::take(&mut seen) {
                    last_rx = Instant::now();
                    ping_sent = None;
                }
                if let Some(reason) = expired(&cfg.protection, opened, last_rx) {
                    let _ = tx.send(Outgoing::Close(1001, reason.into())).await;
                    return End::Closing;
                }
                if session.negotiating() && opened.elapsed() >= SIDEBAND_HANDSHAKE_TIMEOUT {
                    let _ = tx.send(Outgoing::Close(1000, "negotiation_failed".into())).await;
                    return End::Closing;
                }
                if ping_sent.is_some_and(|t| t.elapsed() >= cfg.pong_timeout) {
                    tracing::debug!(listener = %cfg.name, "peer missed its pong; dropping it");
                    return End::Gone;
                }
                if ping_sent.is_none() && last_rx.elapsed() >= cfg.ping_interval {
                    // A full outbox already shows the peer is slow; skip this ping.
                    let _ = tx.try_send(Outgoing::Ping);
                    ping_sent = Some(Instant::now());
                }
                continue;
            }
            () = &mut shutdown => return End::Shutdown,
        };
        seen = true;
        match frame {
            Some(Ok(WsMessage::Text(_))) if cfg.dialect == Dialect::Sideband => {
                route.count_protocol_error("text_frame");
                let _ = tx
                    .send(Outgoing::Close(1003, "Text frames not supported".into()))
                    .await;
                return End::Closing;
            }
            Some(Ok(WsMessage::Text(text))) => {
                if text.len() > cfg.max_message_bytes {
                    too_large(route, tx).await;
                    return End::Closing;
                }
                if let Verdict::Close(..) = session.on_text(text.as_str()).await {
                    return End::Closing;
                }
            }
            Some(Ok(WsMessage::Binary(bytes))) if cfg.dialect == Dialect::Sideband => {
                if bytes.len() > cfg.max_message_bytes {
                    too_large(route, tx).await;
                    return End::Closing;
                }
                if let Verdict::Close(..) = session.on_binary(&bytes).await {
                    return End::Closing;
                }
            }
            Some(Ok(WsMessage::Binary(_))) => {
                route.count_protocol_error("binary_frame");
                let _ = tx
                    .send(Outgoing::Close(
                        1003,
                        "binary frames are not supported".into(),
                    ))
                    .await;
                return End::Closing;
            }
            Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => {}
            Some(Ok(WsMessage::Close(_))) | None => return End::Gone,
            Some(Err(e)) => {
                tracing::debug!(listener = %cfg.name, error = %e, "websocket read failed");
                too_large_or_gone(route, tx, &e).await;
                return End::Gone;
            }
        }
    }
}

/// The dialect's answer to an oversize message, then close 1009.
async fn too_large(route: &Route, tx: &mpsc::Sender<Outgoing>) {
    route.count_protocol_error("message_too_large");
    route.metrics().count_limit(
        &route.cfg.name,
        crate::telemetry::metrics::Limit::MaxMessageBytes,
    );
    let limit = route.cfg.max_message_bytes;
    if route.cfg.dialect == Dialect::JsonRpc {
        let err = GatewayError::with_detail(
            ErrorKind::InvalidRequest,
            format!("Message size exceeds maximum of {limit} bytes"),
        );
        let reply = Message::error(Some(WireId::null()), err.to_object(route.cfg.dialect));
        if let Ok(text) = render(&reply, Style::Frame) {
            // Closing anyway; a gone writer changes nothing.
            let _ = tx.send(Outgoing::Text(text)).await;
        }
    }
    let reason = if route.cfg.dialect == Dialect::Sideband {
        "Message too large"
    } else {
        "message too large"
    };
    let _ = tx.send(Outgoing::Close(1009, reason.into())).await;
}

/// The library refused a message above even its (larger) limit.
async fn too_large_or_gone(route: &Route, tx: &mpsc::Sender<Outgoing>, e: &axum::Error) {
    let text = e.to_string();
    if text.contains("too long") || text.contains("too big") || text.contains("Space limit") {
        too_large(route, tx).await;
    }
}

/// Drains the outbox into the socket until a close is sent or the outbox
/// is dropped.
async fn write_loop(
    mut sink: futures_util::stream::SplitSink<WebSocket, WsMessage>,
    mut rx: mpsc::Receiver<Outgoing>,
) {
    while let Some(out) = rx.recv().await {
        let result = match out {
            Outgoing::Text(text) => sink.feed(WsMessage::Text(text.into())).await,
            Outgoing::Binary(bytes) => sink.feed(WsMessage::Binary(bytes.into())).await,
            Outgoing::Ping => sink.feed(WsMessage::Ping(Default::default())).await,
            Outgoing::Close(code, reason) => {
                let frame = CloseFrame {
                    code,
                    reason: reason.into_owned().into(),
                };
                // The peer may be gone already; we are closing either way.
                let _ = sink.send(WsMessage::Close(Some(frame))).await;
                break;
            }
        };
        if result.is_err() {
            break;
        }
        if rx.is_empty() && sink.flush().await.is_err() {
            break;
        }
    }
}
