//! One WebSocket connection's frames: the reader loop (client frames into
//! the session, pings, idle and lifetime limits, oversize messages
//! answered in the dialect) and the writer task (the outbox onto the
//! socket, coalesced and flushed when the outbox runs empty).

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message as WsMessage, WebSocket};
use futures_util::{SinkExt, StreamExt};
use tokio::time::Instant;

use super::super::session::{Session, Verdict};
use super::super::Serve;
use crate::close::CloseCode;
use crate::dialect::errors;
use crate::dialect::render::{render, Style};
use crate::dialect::Dialect;
use crate::envelope::{Message, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::outbox::{Outbox, OutboxReader, Outgoing};
use crate::router::Route;
use crate::telemetry::metrics::FrameCounter;

/// How long a Sideband client has to send its handshake.
const SIDEBAND_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// How the reader loop ended.
pub(super) enum End {
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

pub(super) async fn read_loop(
    mut stream: futures_util::stream::SplitStream<WebSocket>,
    session: &Session,
    route: &Route,
    ctx: &Serve,
) -> End {
    let cfg = &route.cfg;
    let tx = session.outbox();
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
                tx.try_close(CloseCode::PolicyViolation, "slow consumer");
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
                    tx.close(CloseCode::GoingAway, reason).await;
                    return End::Closing;
                }
                if session.negotiating() && opened.elapsed() >= SIDEBAND_HANDSHAKE_TIMEOUT {
                    tx.close(CloseCode::Normal, "negotiation_failed").await;
                    return End::Closing;
                }
                if ping_sent.is_some_and(|t| t.elapsed() >= cfg.pong_timeout) {
                    tracing::debug!(listener = %cfg.name, "peer missed its pong; dropping it");
                    return End::Gone;
                }
                if ping_sent.is_none() && last_rx.elapsed() >= cfg.ping_interval {
                    tx.try_ping();
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
                tx.close(CloseCode::Unsupported, "Text frames not supported")
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
                tx.close(CloseCode::Unsupported, "binary frames are not supported")
                    .await;
                return End::Closing;
            }
            Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => {}
            Some(Ok(WsMessage::Close(frame))) => {
                let code = frame.map_or(1005, |f| f.code);
                let m = route.metrics();
                m.count_ws_close(cfg.dialect, crate::error::Side::Client, code);
                // Complete the closing handshake: the library has queued
                // the echo of the client's close; the writer flushes it. A
                // full outbox (a client that closes without reading) is
                // not waited for.
                return if tx.try_close(CloseCode::Normal, "") {
                    End::Closing
                } else {
                    End::Gone
                };
            }
            None => return End::Gone,
            Some(Err(e)) if library_too_large(&e) => {
                // The library stopped at the frame header: answer like any
                // oversize message, and let the writer send it all.
                too_large(route, tx).await;
                return End::Closing;
            }
            Some(Err(e)) => {
                tracing::debug!(listener = %cfg.name, error = %e, "websocket read failed");
                return End::Gone;
            }
        }
    }
}

/// The dialect's answer to an oversize message, then close 1009.
async fn too_large(route: &Route, tx: &Outbox) {
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
        let reply = Message::error(
            Some(WireId::null()),
            errors::render(&err, route.cfg.dialect),
        );
        if let Ok(text) = render(&reply, Style::Frame) {
            tx.send_frame(Outgoing::Text(text)).await;
        }
    }
    let reason = if route.cfg.dialect == Dialect::Sideband {
        "Message too large"
    } else {
        "message too large"
    };
    tx.close(CloseCode::TooBig, reason).await;
}

/// True when the library refused a message above even its (larger) limit:
/// tungstenite's capacity error, under axum's error.
fn library_too_large(e: &axum::Error) -> bool {
    use tokio_tungstenite::tungstenite::error::{CapacityError, Error};
    std::error::Error::source(e)
        .and_then(|inner| inner.downcast_ref::<Error>())
        .is_some_and(|inner| matches!(inner, Error::Capacity(CapacityError::MessageTooLong { .. })))
}

/// Drains the outbox into the socket until a close is sent or the outbox
/// is dropped.
pub(super) async fn write_loop(
    mut sink: futures_util::stream::SplitSink<WebSocket, WsMessage>,
    mut rx: OutboxReader,
    sent: FrameCounter,
) {
    while let Some(out) = rx.recv().await {
        let result = match out {
            Outgoing::Text(text) => {
                sent.count(text.len());
                sink.feed(WsMessage::Text(text.into())).await
            }
            Outgoing::Binary(bytes) => {
                sent.count(bytes.len());
                sink.feed(WsMessage::Binary(bytes.into())).await
            }
            Outgoing::Ping => sink.feed(WsMessage::Ping(Default::default())).await,
            Outgoing::Close(code, reason) => {
                let frame = CloseFrame {
                    code: code.as_u16(),
                    reason: reason.into_owned().into(),
                };
                // The peer may be gone already; we are closing either way.
                // After the peer's own close the library refuses a second
                // one; the flush still sends the echo it queued.
                if sink.send(WsMessage::Close(Some(frame))).await.is_err() {
                    let _ = sink.flush().await;
                }
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
