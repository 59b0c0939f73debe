//! WebSocket upstreams (JSON-RPC 2.0, holon-rpc and Sideband): dialing,
//! the subprotocol and handshake the link's codec asks for, and frames in
//! and out for the link driver (`driver`).
//!
//! The codec says which subprotocol to offer (holon-rpc: exactly
//! `holon-rpc`, and a 101 without it is refused with close 1002
//! `missing holon-rpc subprotocol`; JSON-RPC: `jsonrpc` only when
//! configured) and whether a session handshake comes first (Sideband:
//! no message frame may go out before it). `wss://` URLs are dialed over
//! TLS with the upstream's client configuration (`tls.rs`: its `ca_file`,
//! else the system's roots).
//!
//! The link's socket is read through a [`BufReader`] of [`READ_CHUNK`]
//! bytes (under TLS, when there is TLS), and the library asks for at most
//! [`LIBRARY_READ`] bytes per read: the library zero-fills what it asks
//! for before every read, so a small ask keeps that fill small while
//! system calls still read up to `READ_CHUNK` at once. Read buffers per
//! link: `READ_CHUNK + LIBRARY_READ` = 16 KiB.

use std::sync::Arc;

use bytestring::ByteString;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::UrlError;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::http::header::{ORIGIN, SEC_WEBSOCKET_PROTOCOL};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode as WsCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;

use super::driver::{self, FrameSink, Incoming, Outgoing, Source};
use super::error::{LinkError, Refuser};
use super::link::Link;
use super::outlet::{self, FrameQueue, Outlet, Wire};
use super::owner::OwnerRef;
use super::shared::{hard_cap, UpstreamShared};
use crate::dialect::link::{Farewell, Handshake};
use crate::dialect::UpstreamCodec;

type Ws = WebSocketStream<MaybeTlsStream<BufReader<TcpStream>>>;

/// Most a link reads from its socket at once: the buffer under the
/// library (and under TLS), allocated once with the link.
const READ_CHUNK: usize = 15 * 1024;

/// The library's own read buffer, and the most it asks for (and
/// zero-fills) per read. A longer frame still arrives whole: the buffer
/// grows to the frame's length, read in pieces of this size out of
/// [`READ_CHUNK`] (one copy more of its bytes than a direct read).
const LIBRARY_READ: usize = 1024;

/// Connects, negotiates, and starts the link's driver.
pub(super) async fn connect(
    url: &str,
    shared: Arc<UpstreamShared>,
    owner: Option<OwnerRef>,
    shutdown: CancellationToken,
) -> Result<Arc<Link>, LinkError> {
    let codec = shared.codec();
    let mut request = url
        .into_client_request()
        .map_err(|e| LinkError::Url(Box::new(e)))?;
    if let Some(token) = codec.subprotocol() {
        request
            .headers_mut()
            .insert(SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(token));
    }
    if let Some(origin) = &shared.cfg.origin {
        let value = HeaderValue::from_str(origin).map_err(LinkError::Origin)?;
        request.headers_mut().insert(ORIGIN, value);
    }
    let limit = hard_cap(shared.cfg.max_response_bytes);
    let config = WebSocketConfig::default()
        .max_message_size(Some(limit))
        .max_frame_size(Some(limit))
        .read_buffer_size(LIBRARY_READ);
    let connector = match &shared.tls {
        Some(Ok(tls)) => Some(super::tls::connector(tls)),
        Some(Err(e)) => return Err(LinkError::TlsSetup(e.clone())),
        None => None,
    };
    let socket = dial(&request).await.map_err(LinkError::dial)?;
    let (mut ws, response) =
        tokio_tungstenite::client_async_tls_with_config(request, socket, Some(config), connector)
            .await
            .map_err(LinkError::dial)?;
    if let Some((token, reason)) = codec.required_subprotocol() {
        let echoed = response
            .headers()
            .get(SEC_WEBSOCKET_PROTOCOL)
            .and_then(|v| v.to_str().ok());
        if !echoed.is_some_and(|p| p.eq_ignore_ascii_case(token)) {
            // The link is refused either way; the close frame is a courtesy.
            let _ = ws.close(Some(close_frame(WsCode::Protocol, reason))).await;
            return Err(LinkError::Subprotocol);
        }
    }
    if let Some(hello) = codec.hello() {
        handshake(&mut ws, &codec, hello).await?;
    }
    let (sink, stream) = ws.split();
    let (tx, rx) = mpsc::channel(outlet::capacity(shared.cfg.max_in_flight_per_connection));
    let link = Link::new(Outlet::Frames(FrameQueue::new(tx)), codec, shared, owner);
    let incoming = stream.map(move |frame| incoming(frame, limit));
    driver::spawn(&link, incoming, WsSink(sink), Source::Frames(rx), shutdown);
    Ok(link)
}

/// The TCP connection to `request`'s host and port (80 for `ws://`, 443
/// for `wss://`, when the URL names none), without Nagle's delay, under
/// its read buffer; as tokio-tungstenite's `connect_async` dials, with the
/// same errors.
async fn dial(request: &Request) -> Result<BufReader<TcpStream>, tungstenite::Error> {
    let uri = request.uri();
    let domain = match uri.host() {
        // As the library passes it on to rustls: an IPv6 address without
        // its brackets.
        Some(d) if d.starts_with('[') && d.ends_with(']') => &d[1..d.len() - 1],
        Some(d) => d,
        None => return Err(tungstenite::Error::Url(UrlError::NoHostName)),
    };
    let port = uri
        .port_u16()
        .or(match uri.scheme_str() {
            Some("wss") => Some(443),
            Some("ws") => Some(80),
            _ => None,
        })
        .ok_or(tungstenite::Error::Url(UrlError::UnsupportedUrlScheme))?;
    let socket = TcpStream::connect(format!("{domain}:{port}"))
        .await
        .map_err(tungstenite::Error::Io)?;
    socket.set_nodelay(true)?;
    Ok(BufReader::with_capacity(READ_CHUNK, socket))
}

/// One WebSocket message as the driver sees it.
fn incoming(
    frame: Result<WsMessage, tokio_tungstenite::tungstenite::Error>,
    limit: usize,
) -> Incoming {
    match frame {
        // UTF-8 already: the check cannot fail (about 1 ns per 64
        // bytes; this crate uses no `unsafe`).
        Ok(WsMessage::Text(text)) => match ByteString::try_from(bytes::Bytes::from(text)) {
            Ok(text) => Incoming::Text(text),
            Err(_) => Incoming::Control,
        },
        Ok(WsMessage::Binary(bytes)) => Incoming::Binary(bytes),
        Ok(WsMessage::Close(frame)) => match frame {
            Some(f) => Incoming::Close(u16::from(f.code), f.reason.to_string()),
            None => Incoming::Close(1005, String::new()),
        },
        Ok(WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_)) => Incoming::Control,
        Err(e) => Incoming::Failed(LinkError::read(e, limit)),
    }
}

/// Sends our handshake and reads the upstream's: no message frame may go
/// out before it (Sideband: the envelope encoding depends on it).
async fn handshake(ws: &mut Ws, codec: &UpstreamCodec, hello: Vec<u8>) -> Result<(), LinkError> {
    ws.send(WsMessage::Binary(hello.into()))
        .await
        .map_err(|e| LinkError::WebSocket(Box::new(e)))?;
    loop {
        match ws.next().await {
            Some(Ok(WsMessage::Binary(bytes))) => match codec.on_handshake(&bytes) {
                Handshake::Ready => return Ok(()),
                Handshake::More => continue,
                Handshake::Refused(bye) => {
                    let refused = codec.refuses(bye.code.as_u16(), &bye.reason);
                    let reason = bye.reason.clone();
                    say_goodbye(ws, bye).await;
                    return Err(if refused {
                        LinkError::NegotiationFailed { by: Refuser::Us }
                    } else {
                        LinkError::Handshake { reason }
                    });
                }
            },
            Some(Ok(WsMessage::Text(_))) => {
                // Failing anyway; the close frame is a courtesy.
                let frame = close_frame(WsCode::Unsupported, "Text frames not supported");
                let _ = ws.close(Some(frame)).await;
                return Err(LinkError::TextFrame);
            }
            Some(Ok(WsMessage::Close(Some(frame))))
                if codec.refuses(u16::from(frame.code), &frame.reason) =>
            {
                return Err(LinkError::NegotiationFailed {
                    by: Refuser::Upstream,
                });
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(LinkError::WebSocket(Box::new(e))),
            None => return Err(LinkError::HandshakeClosed),
        }
    }
}

/// A last frame, if any, then the close frame; the upstream may be gone
/// already, and we are closing either way.
async fn say_goodbye<S>(ws: &mut S, bye: Farewell)
where
    S: futures_util::Sink<WsMessage> + Unpin,
{
    if let Some(last) = bye.frame {
        let _ = ws.send(WsMessage::Binary(last.into())).await;
    }
    let frame = close_frame(WsCode::from(bye.code.as_u16()), bye.reason.to_string());
    let _ = ws.send(WsMessage::Close(Some(frame))).await;
}

fn close_frame(code: WsCode, reason: impl Into<String>) -> CloseFrame {
    CloseFrame {
        code,
        reason: reason.into().into(),
    }
}

/// The sending half of a WebSocket link.
struct WsSink(SplitSink<Ws, WsMessage>);

impl FrameSink for WsSink {
    async fn write(&mut self, out: Outgoing<'_>) -> Result<(), ()> {
        let frame = match out {
            Outgoing::Frame(Wire::Text(text)) => WsMessage::Text(text.into()),
            Outgoing::Frame(Wire::Shared(text)) => WsMessage::Text(text),
            Outgoing::Frame(Wire::Binary(bytes)) => WsMessage::Binary(bytes),
            Outgoing::Heartbeat(text) => WsMessage::Text(text.into()),
            Outgoing::Ping => WsMessage::Ping(Default::default()),
            // Lines are NDJSON's; a WebSocket link never queues them.
            Outgoing::Lines(_) => return Err(()),
        };
        self.0.feed(frame).await.map_err(drop)
    }

    async fn flush(&mut self) -> Result<(), ()> {
        self.0.flush().await.map_err(drop)
    }

    async fn close(mut self, farewell: Option<Farewell>) {
        if let Some(bye) = farewell {
            say_goodbye(&mut self.0, bye).await;
        }
    }
}
