//! WebSocket upstreams (JSON-RPC 2.0, holon-rpc and Sideband): dialing,
//! framing and liveness for a [`Link`].
//!
//! - holon-rpc: offers exactly `holon-rpc` and refuses a 101 without it
//!   (close 1002 `missing holon-rpc subprotocol`); liveness by `rpc.heartbeat`
//!   requests `h<N>`, a missed one closes 4000 `heartbeat timeout`.
//! - JSON-RPC: offers `jsonrpc` only when configured; liveness by WebSocket
//!   pings, a link silent for a ping interval plus the pong timeout is closed.
//!
//! `wss://` URLs are dialed over TLS with the upstream's client
//! configuration (`tls.rs`: its `ca_file`, else the system's roots).
//!
//! Text frames only, except Sideband (binary SBP frames; its handshake and
//! goodbyes are in `sideband.rs`): a binary frame from a JSON upstream closes
//! the link (1003). Every close fails the calls in flight on the link with
//! `unavailable`.

use std::sync::Arc;
use std::time::Duration;

use bytestring::ByteString;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::header::{ORIGIN, SEC_WEBSOCKET_PROTOCOL};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode as WsCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;

use super::error::LinkError;
use super::link::{Link, OwnerRef, Wire};
use super::outlet::{self, FrameQueue, Outlet};
use super::sideband::{self, Farewell};
use super::UpstreamShared;
use crate::close::CloseCode;
use crate::dialect::Dialect;
use crate::telemetry::metrics::ProtocolError;

pub(super) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Most a link reads from its socket at once. The WebSocket library
/// zero-fills this much before every read, so its 128 KiB default costs
/// more than the read itself when replies are small; a longer frame still
/// arrives whole (the buffer grows to the frame's length).
const READ_BUFFER: usize = 16 * 1024;

/// The holon-rpc subprotocol token.
const HOLON: &str = "holon-rpc";

/// Connects and starts the reader and writer tasks of a new link.
pub(super) async fn connect(
    url: &str,
    shared: Arc<UpstreamShared>,
    owner: Option<OwnerRef>,
    shutdown: CancellationToken,
) -> Result<Arc<Link>, LinkError> {
    let mut request = url
        .into_client_request()
        .map_err(|e| LinkError::Url(Box::new(e)))?;
    let offer = match shared.cfg.dialect {
        Dialect::Holon => Some(HOLON),
        Dialect::JsonRpc => shared.cfg.offer_subprotocol.then_some("jsonrpc"),
        Dialect::Ndjson | Dialect::Sideband | Dialect::JsonRpcHttp => None,
    };
    if let Some(token) = offer {
        request
            .headers_mut()
            .insert(SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(token));
    }
    if let Some(origin) = &shared.cfg.origin {
        let value = HeaderValue::from_str(origin).map_err(LinkError::Origin)?;
        request.headers_mut().insert(ORIGIN, value);
    }
    let limit = super::hard_cap(shared.cfg.max_response_bytes);
    let config = WebSocketConfig::default()
        .max_message_size(Some(limit))
        .max_frame_size(Some(limit))
        .read_buffer_size(READ_BUFFER);
    let connector = match &shared.tls {
        Some(Ok(tls)) => Some(super::tls::connector(tls)),
        Some(Err(e)) => return Err(LinkError::TlsSetup(e.clone())),
        None => None,
    };
    let (mut ws, response) =
        tokio_tungstenite::connect_async_tls_with_config(request, Some(config), true, connector)
            .await
            .map_err(LinkError::dial)?;
    let echoed = response
        .headers()
        .get(SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok());
    if shared.cfg.dialect == Dialect::Holon
        && !echoed.is_some_and(|p| p.eq_ignore_ascii_case(HOLON))
    {
        let frame = CloseFrame {
            code: WsCode::Protocol,
            reason: "missing holon-rpc subprotocol".into(),
        };
        // The link is refused either way; the close frame is a courtesy.
        let _ = ws.close(Some(frame)).await;
        return Err(LinkError::Subprotocol);
    }
    let sbp = match shared.cfg.dialect {
        Dialect::Sideband => Some(sideband::handshake(&mut ws).await?),
        Dialect::JsonRpc | Dialect::Ndjson | Dialect::Holon | Dialect::JsonRpcHttp => None,
    };
    let (sink, stream) = ws.split();
    let (tx, rx) = mpsc::channel(outlet::capacity(shared.cfg.max_in_flight_per_connection));
    let last_rx = Arc::new(Mutex::new(Instant::now()));
    let sideband = sbp.is_some();
    let link = Link::with_sideband(Outlet::Frames(FrameQueue::new(tx)), shared, owner, sbp);
    // Tracked, so that shutdown waits for every link's goodbye.
    link.shared
        .writers
        .spawn(write_loop(sink, rx, link.clone(), last_rx.clone()));
    if sideband {
        tokio::spawn(read_frames(stream, link.clone(), last_rx, shutdown, limit));
    } else {
        let texts = texts(stream, link.clone(), last_rx, limit);
        tokio::spawn(link.clone().run_reader(texts, shutdown));
    }
    Ok(link)
}

/// Reads Sideband frames until the link closes, then fails what is pending.
async fn read_frames(
    mut stream: SplitStream<Ws>,
    link: Arc<Link>,
    last_rx: Arc<Mutex<Instant>>,
    shutdown: CancellationToken,
    limit: usize,
) {
    let closed = link.closed.clone();
    let (closed, shutdown) = (closed.cancelled(), shutdown.cancelled());
    tokio::pin!(closed, shutdown);
    loop {
        let frame = tokio::select! {
            biased;
            frame = stream.next() => frame,
            () = &mut closed => break,
            () = &mut shutdown => break,
        };
        *last_rx.lock() = Instant::now();
        match frame {
            Some(Ok(WsMessage::Binary(bytes))) => {
                if !link.on_frame(&bytes) {
                    break;
                }
                // Events the store's queue had no room for: read on only
                // once it took them (back-pressure, `Link::run_reader`).
                if !link.backlog.is_empty() {
                    tokio::select! {
                        biased;
                        () = link.shared.hand_off(&link.backlog) => {}
                        () = &mut closed => break,
                        () = &mut shutdown => break,
                    }
                }
            }
            Some(Ok(WsMessage::Text(_))) => {
                link.shared.count_protocol_error(ProtocolError::TextFrame);
                break;
            }
            Some(Ok(WsMessage::Close(frame))) => {
                if sideband::refuses(frame.as_ref()) {
                    link.mark_refused();
                }
                link.shared
                    .count_close(frame.map_or(1005, |f| u16::from(f.code)));
                break;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                link.read_failed(&LinkError::read(e, limit));
                break;
            }
            None => break,
        }
    }
    link.fail_all(&LinkError::Lost);
    link.hand_off_rest().await;
}

/// The upstream's text frames; a binary frame or a close ends the stream.
fn texts(
    stream: SplitStream<Ws>,
    link: Arc<Link>,
    last_rx: Arc<Mutex<Instant>>,
    limit: usize,
) -> impl futures_util::Stream<Item = Result<ByteString, LinkError>> + Unpin {
    stream
        .map(move |frame| {
            *last_rx.lock() = Instant::now();
            match frame {
                // UTF-8 already: the check cannot fail (about 1 ns per 64
                // bytes; this crate uses no `unsafe`).
                Ok(WsMessage::Text(text)) => match ByteString::try_from(bytes::Bytes::from(text)) {
                    Ok(text) => Some(Ok(text)),
                    Err(_) => None,
                },
                Ok(WsMessage::Binary(_)) => {
                    link.shared.count_protocol_error(ProtocolError::BinaryFrame);
                    Some(Err(LinkError::BinaryFrame))
                }
                Ok(WsMessage::Close(frame)) => {
                    let code = frame.map_or(1005, |f| u16::from(f.code));
                    link.shared.count_close(code);
                    Some(Err(LinkError::Closed { code }))
                }
                Ok(_) => None,
                Err(e) => Some(Err(LinkError::read(e, limit))),
            }
        })
        .filter_map(std::future::ready)
        .boxed()
}

/// Writes queued texts; sends pings (JSON-RPC) or heartbeats (holon) and
/// closes the link when the upstream stops answering.
async fn write_loop(
    mut sink: SplitSink<Ws, WsMessage>,
    mut rx: mpsc::Receiver<Wire>,
    link: Arc<Link>,
    last_rx: Arc<Mutex<Instant>>,
) {
    let cfg = &link.shared.cfg;
    let holon = cfg.dialect == Dialect::Holon;
    let (interval, timeout) = if holon {
        (cfg.heartbeat_interval, cfg.heartbeat_timeout)
    } else {
        (cfg.ping_interval, cfg.pong_timeout)
    };
    let mut tick =
        tokio::time::interval((interval.min(timeout) / 4).max(Duration::from_millis(10)));
    let mut next_beat = Instant::now() + interval;
    let mut beats = 0u64;
    let close = loop {
        tokio::select! {
            wire = rx.recv() => {
                let frame = match wire {
                    Some(Wire::Text(text)) => WsMessage::Text(text.into()),
                    Some(Wire::Shared(text)) => WsMessage::Text(text),
                    Some(Wire::Binary(bytes)) => WsMessage::Binary(bytes),
                    None => break None,
                };
                if sink.feed(frame).await.is_err() {
                    break None;
                }
                if rx.is_empty() && sink.flush().await.is_err() {
                    break None;
                }
            }
            _ = tick.tick() => {
                link.out.tidy();
                if holon && link.heartbeat_overdue(timeout) {
                    break Some(Farewell::plain(CloseCode::HeartbeatTimeout, "heartbeat timeout"));
                }
                if !holon && last_rx.lock().elapsed() > interval + timeout {
                    break Some(Farewell::plain(CloseCode::GoingAway, "pong timeout"));
                }
                if Instant::now() < next_beat {
                    continue;
                }
                next_beat = Instant::now() + interval;
                let frame = if holon {
                    beats += 1;
                    link.heartbeat_frame(beats).map(|t| WsMessage::Text(t.into()))
                } else {
                    Some(WsMessage::Ping(Default::default()))
                };
                if let Some(frame) = frame {
                    if sink.send(frame).await.is_err() {
                        break None;
                    }
                }
            }
            () = link.closed.cancelled() => break Some(link.farewell()),
        }
    };
    let why = match close {
        Some(bye) => {
            if !bye.code.is_orderly() {
                tracing::warn!(upstream = %cfg.name, code = bye.code.as_u16(), reason = %bye.reason, "closing upstream link");
            }
            if let Some(last) = bye.frame {
                // The upstream may be gone already; we are closing either way.
                let _ = sink.send(WsMessage::Binary(last.into())).await;
            }
            let frame = CloseFrame {
                code: WsCode::from(bye.code.as_u16()),
                reason: bye.reason.to_string().into(),
            };
            // The upstream may be gone already; we are closing either way.
            let _ = sink.send(WsMessage::Close(Some(frame))).await;
            LinkError::Farewell { reason: bye.reason }
        }
        None => LinkError::WriteFailed,
    };
    link.fail_all(&why);
}
