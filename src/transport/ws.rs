//! WebSocket listeners: the upgrade of a request that the address's
//! server ([`super::address`]) hands over, and each connection's frames in
//! and out for the connection driver.
//!
//! The path picks the dialect, never the offered subprotocol. Each
//! connection runs one reader loop (this task) and one writer task joined by
//! the session's bounded outbox, both in [`super::driver`].
//!
//! The handshake is done here ([`upgrade`]) on hyper's upgrade, and the
//! socket is tokio-tungstenite's, with a read buffer of [`READ_BUFFER`]
//! bytes per connection (allocated with the connection: an idle
//! connection's main cost). The library zero-fills what is left of that
//! buffer before every read; a smaller read size with a buffer of
//! switchyard's own under it would shrink the fill, but frames still held
//! (a call parked at a busy upstream keeps its request's bytes) then make
//! the library allocate a new buffer every few requests, where an 8 KiB one
//! lasts a dozen.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{
    CloseCode as WsCloseCode, Data, OpCode,
};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};
use tokio_tungstenite::WebSocketStream;
use tracing::Instrument;

pub(super) mod admit;
mod upgrade;

use self::admit::check_upgrade;
use super::accept::Place;
use super::driver::{self, Fixed, FrameSink, Incoming};
use super::paths::Entry;
use super::session::Session;
use super::{Listener, ListenerCell, Outgoing, Serve};
use crate::close::CloseCode;
use crate::dialect::subprotocol;
use crate::dialect::Dialect;
use crate::limits::identity::Identity;
use crate::telemetry::metrics::RejectReason;
use crate::telemetry::trace::connection_span;
use crate::telemetry::Peer;

/// Room above the configured message limit given to the WebSocket library,
/// so that switchyard sees an oversize message first and can answer it in
/// the dialect before closing with 1009.
const LIBRARY_HEADROOM: usize = 64 * 1024;

/// The library's read buffer per connection, and the most it reads (and
/// zero-fills) at once; it grows to hold a larger message while it is
/// read.
const READ_BUFFER: usize = 8 * 1024;

/// Frames are written to the socket once this much is buffered (or the
/// outbox runs empty). The buffer itself grows only as frames arrive.
const WRITE_THRESHOLD: usize = 64 * 1024;

/// A client's upgraded connection.
type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// A request for a WebSocket listener's path (see [`super::address`]): a
/// `GET` with a valid upgrade that passes the listener's Host, Origin and
/// token checks is upgraded; anything else gets its refusal.
pub(super) async fn answer(
    mut parts: axum::http::request::Parts,
    Entry { cell, ctx }: Entry,
    peer: SocketAddr,
    place: Option<Place>,
) -> Response {
    if parts.method != Method::GET {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let ws = match upgrade::check(&mut parts) {
        Ok(ws) => ws,
        Err(refused) => return refused.into_response(),
    };
    let listener = cell.load();
    let who = match check_upgrade(&listener, &parts.headers, &parts.uri, peer.ip()) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    // No longer pending: the session counts from here, before the client
    // can see the 101.
    if let Some(place) = place {
        place.release();
    }
    accept(ws, &parts.headers, &listener, cell, ctx, (peer.ip(), who))
}

/// Accepts the upgrade; the connection runs in a span whose OpenTelemetry
/// parent is the request's `traceparent`, if any (see `telemetry::trace`).
fn accept(
    ws: upgrade::Upgrade,
    headers: &HeaderMap,
    listener: &Listener,
    cell: Arc<ListenerCell>,
    ctx: Serve,
    (peer, who): (IpAddr, Identity),
) -> Response {
    let limit = listener
        .cfg()
        .max_message_bytes
        .saturating_add(LIBRARY_HEADROOM);
    // Small initial buffers (they grow on demand): an idle connection then
    // costs a few KiB instead of the library's 128 KiB read buffer.
    let config = WebSocketConfig::default()
        .max_message_size(Some(limit))
        .max_frame_size(Some(limit))
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_THRESHOLD);
    let chosen = select_subprotocol(headers, listener.dialect());
    let response = ws.switching(chosen);
    let span = connection_span(headers, listener.name(), listener.dialect().as_str());
    span.record("switchyard.client", who.label());
    let sessions = ctx.sessions.clone();
    let on_upgrade = ws.on_upgrade;
    tokio::spawn(async move {
        // The client went away before the upgrade: nothing to run.
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let io = TokioIo::new(upgraded);
        // Split at once: the connection's task holds its two halves (the
        // socket itself is shared behind them), never the socket inline.
        let (sink, stream) = WebSocketStream::from_raw_socket(io, Role::Server, Some(config))
            .await
            .split();
        sessions
            .track_future(run((WsSink(sink), stream), cell, ctx, peer, who).instrument(span))
            .await;
    });
    response
}

/// The listener's subprotocol when the client offers it (no offer is fine
/// too), spelled as offered: see [`subprotocol`].
fn select_subprotocol(headers: &HeaderMap, dialect: Dialect) -> Option<&str> {
    subprotocol(dialect, upgrade::offered(headers))
}

/// Drives one client connection to its end.
///
/// Its future is the connection task's state for the connection's life:
/// what only an opening or a closing connection awaits (a refusal, the
/// Sideband greeting, [`driver::finish`]) is boxed when it comes, so that
/// an idle connection does not carry room for it.
async fn run(
    (sink, stream): (WsSink, SplitStream<Socket>),
    cell: Arc<ListenerCell>,
    ctx: Serve,
    peer: IpAddr,
    who: Identity,
) {
    // Read once for what is fixed for the connection's life (its outbox,
    // its counters); requests read the cell themselves.
    let listener = cell.load();
    let Some(_permit) = listener.conns().admit(peer) else {
        // Upgraded first, so that a browser can read the reason.
        return Box::pin(refuse(sink, &listener, peer)).await;
    };
    let Ok(_client_permit) = listener.admit_client(&who) else {
        // A named client at its own `max_connections`.
        return Box::pin(refuse(sink, &listener, peer)).await;
    };
    let _open = super::OpenConnection::count(&listener);
    let _client_open = who.client().map(|name| {
        let gauge = listener
            .metrics()
            .client_connections_open
            .with_label_values(&[listener.name(), name]);
        gauge.inc();
        super::OpenClientConnection(gauge)
    });
    let sent = listener.metrics().frame_counter(
        listener.dialect(),
        crate::error::Side::Client,
        crate::telemetry::metrics::Direction::Out,
    );
    let (session, rx) = Session::new(cell.clone(), ctx.grace_over.clone(), Some(peer));
    let expires = who.expires();
    session.identify(who);
    // Closes the connection (1008) if a reload revokes its credential
    // ("credential revoked") or when its JWT expires ("credential
    // expired"); stops with the connection (a connection with neither
    // has no such task, nor its token).
    let revoked = _client_permit.as_ref().map(|p| p.revoked().clone());
    let _done = (revoked.is_some() || expires.is_some()).then(|| {
        let done = tokio_util::sync::CancellationToken::new();
        let guard = done.clone().drop_guard();
        let outbox = session.outbox().clone();
        // The cell, not this generation's listener: that one is not kept
        // for the connection's life.
        let cell = cell.clone();
        tokio::spawn(async move {
            let revoked = async {
                match revoked {
                    Some(r) => r.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            let expired = async {
                match expires {
                    Some(at) => {
                        let left = at
                            .duration_since(std::time::SystemTime::now())
                            .unwrap_or_default();
                        tokio::time::sleep(left).await;
                    }
                    None => std::future::pending().await,
                }
            };
            let reason = tokio::select! {
                () = revoked => "credential revoked",
                () = expired => "credential expired",
                () = done.cancelled() => return,
            };
            cell.load()
                .log_closed(CloseCode::PolicyViolation, reason, Peer(Some(peer)));
            outbox.try_close(CloseCode::PolicyViolation, reason);
        });
        guard
    });
    let writer = tokio::spawn(driver::write_loop(sink, rx, sent));
    if let Some(hello) = session.greeting() {
        // Sideband: both sides send their handshake at once.
        Box::pin(session.outbox().send_frame(hello)).await;
    }
    let cfg = listener.cfg();
    let fixed = Fixed::of(&listener, Some((cfg.ping_interval, cfg.pong_timeout)));
    // Not held while the connection lives: the listener (and router) of a
    // past generation goes as soon as its last request is answered.
    drop(listener);
    let end = driver::read_loop(stream.map(incoming), &session, &cell, &ctx, &fixed).await;
    Box::pin(driver::finish(end, session, writer)).await;
}

/// Refuses a connection over `max_connections` (the listener's, per IP,
/// or its named client's): counted, logged, closed 1008.
async fn refuse(mut sink: WsSink, listener: &Listener, peer: IpAddr) {
    listener.count_rejected(RejectReason::Limit);
    let reason = "max connections exceeded";
    listener.log_closed(CloseCode::PolicyViolation, reason, Peer(Some(peer)));
    // The peer may be gone already; it is refused either way.
    sink.close(Outgoing::Close(CloseCode::PolicyViolation, reason.into()))
        .await;
}

/// A WebSocket message as the driver sees it.
fn incoming(msg: Result<WsMessage, tungstenite::Error>) -> Incoming {
    match msg {
        // Checked as UTF-8 by the library: kept as its `Utf8Bytes`.
        Ok(WsMessage::Text(text)) => Incoming::Text(text.into()),
        Ok(WsMessage::Binary(bytes)) => Incoming::Binary(bytes),
        // A raw frame is never read (the library hands over messages).
        Ok(WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_)) => Incoming::Control,
        Ok(WsMessage::Close(frame)) => Incoming::Close(frame.map_or(1005, |f| u16::from(f.code))),
        Err(e) if library_too_large(&e) => Incoming::TooLarge,
        Err(e) => match broken(&e) {
            Some((code, reason)) => {
                tracing::debug!(error = %e, "websocket protocol violation");
                Incoming::Broken(code, reason)
            }
            None => {
                tracing::debug!(error = %e, "websocket read failed");
                Incoming::Gone
            }
        },
    }
}

/// True when the library refused a message above even its (larger) limit.
fn library_too_large(e: &tungstenite::Error) -> bool {
    use tokio_tungstenite::tungstenite::error::{CapacityError, Error};
    matches!(e, Error::Capacity(CapacityError::MessageTooLong { .. }))
}

/// The close code and reason for a read error that is the peer breaking
/// the WebSocket protocol: 1007 for a text message that is not UTF-8,
/// 1002 for any other violation.
fn broken(e: &tungstenite::Error) -> Option<(CloseCode, &'static str)> {
    use tokio_tungstenite::tungstenite::error::Error;
    match e {
        Error::Utf8(_) => Some((CloseCode::InvalidPayload, "invalid UTF-8")),
        Error::Protocol(_) => Some((CloseCode::ProtocolError, "protocol error")),
        _ => None,
    }
}

/// The client's socket, written frame by frame (coalesced by the library
/// up to its write buffer, flushed when the outbox runs empty).
struct WsSink(SplitSink<Socket, WsMessage>);

impl FrameSink for WsSink {
    async fn feed(&mut self, out: Outgoing) -> Result<(), ()> {
        let msg = match out {
            Outgoing::Text(text) => WsMessage::Text(text),
            // switchyard's own rendering, UTF-8 by construction (see
            // `Outgoing::Rendered`): a text frame of those bytes as they
            // are, not checked again.
            Outgoing::Rendered(bytes) => {
                WsMessage::Frame(Frame::message(bytes, OpCode::Data(Data::Text), true))
            }
            Outgoing::Binary(bytes) => WsMessage::Binary(bytes),
            Outgoing::Ping => WsMessage::Ping(Default::default()),
            Outgoing::Close(..) => return Ok(()),
        };
        self.0.feed(msg).await.map_err(drop)
    }

    async fn flush(&mut self) -> Result<(), ()> {
        self.0.flush().await.map_err(drop)
    }

    async fn close(&mut self, out: Outgoing) {
        let Outgoing::Close(code, reason) = out else {
            return;
        };
        let frame = CloseFrame {
            code: WsCloseCode::from(code.as_u16()),
            reason: reason.into_owned().into(),
        };
        // The peer may be gone already; we are closing either way. After
        // the peer's own close the library refuses a second one; the flush
        // still sends the echo it queued.
        if self.0.send(WsMessage::Close(Some(frame))).await.is_err() {
            let _ = self.0.flush().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio_tungstenite::tungstenite::Utf8Bytes;

    use super::*;
    use crate::envelope::Text;

    /// The size of the future `f` returns, without calling it.
    fn returned_size<A, B, C, D, E, F>(_: impl FnOnce(A, B, C, D, E) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A connection's task keeps `run`'s future for the connection's life,
    /// most of what an idle connection holds: only what every frame needs
    /// is inline, and what a closing connection or a request's slow path
    /// awaits is boxed when it comes. (In the test build it is about
    /// 1.3 KiB; with the session's slow path inline it was 3.4 KiB, and
    /// with the connection's finish inline about 2 KiB.)
    #[test]
    fn a_connection_keeps_no_room_for_its_slow_paths() {
        let size = returned_size(run);
        assert!(size <= RUN_FUTURE_MAX, "run's future is {size} bytes");
    }

    /// See [`a_connection_keeps_no_room_for_its_slow_paths`].
    const RUN_FUTURE_MAX: usize = 1536;

    /// A client's text frame goes on as the library's `Utf8Bytes`, which
    /// the library checked as UTF-8: its bytes are not checked again.
    #[test]
    fn a_text_frame_goes_on_as_the_library_handed_it_over() {
        let frame = Utf8Bytes::from(r#"{"jsonrpc":"2.0","id":1,"method":"é"}"#);
        let Incoming::Text(Text::Frame(text)) = incoming(Ok(WsMessage::Text(frame.clone()))) else {
            panic!("a text frame, kept as the library's");
        };
        assert_eq!(text, frame);
        assert_eq!(text.as_ptr(), frame.as_ptr(), "no copy");
    }
}
