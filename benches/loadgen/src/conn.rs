//! Client connections: WebSocket frames (text or binary), NDJSON lines or
//! HTTP POSTs (`http`), split into a sending half and a receiving half so
//! one connection can keep many requests in flight.
//!
//! Opening a connection does what the [`Wire`] needs before its first
//! request: the `holon-rpc` subprotocol (checked in the 101 response), or
//! the Sideband handshake (see `wire::sideband`).
//!
//! Sending is `feed` + `flush`, so a writer with several requests ready puts
//! them into one socket write, as a real pipelining client would.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpStream, UnixStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{header, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Bytes, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;
use tokio_util::codec::{FramedRead, FramedWrite, LinesCodec};

use super::http::{self, HttpRx, HttpTx};
use super::wire::{sideband, Out, Wire, HOLON_SUBPROTOCOL};

/// Longest NDJSON line accepted from the daemon.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Where a target accepts client connections.
#[derive(Debug, Clone)]
pub(crate) enum Endpoint {
    /// A WebSocket URL on a loopback TCP address.
    Ws {
        /// The TCP address (always 127.0.0.1).
        addr: SocketAddr,
        /// `ws://addr/path`.
        url: String,
    },
    /// An NDJSON Unix stream socket.
    Unix(PathBuf),
    /// JSON-RPC over HTTP on a loopback TCP address.
    Http {
        /// The TCP address (always 127.0.0.1).
        addr: SocketAddr,
        /// `http://addr/path`, what is POSTed to.
        url: String,
    },
}

/// How much buffer a WebSocket client allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Buffers {
    /// The library's defaults (traffic).
    Default,
    /// Small buffers, for thousands of idle connections.
    Small,
}

/// The sending half of a connection.
#[derive(Debug)]
pub(crate) enum Tx {
    /// WebSocket frames.
    Ws(SplitSink<WebSocketStream<TcpStream>, Message>),
    /// NDJSON lines.
    Line(FramedWrite<OwnedWriteHalf, LinesCodec>),
    /// HTTP requests.
    Http(HttpTx),
}

/// The receiving half of a connection.
#[derive(Debug)]
pub(crate) enum Rx {
    /// WebSocket frames.
    Ws(SplitStream<WebSocketStream<TcpStream>>),
    /// NDJSON lines.
    Line(FramedRead<OwnedReadHalf, LinesCodec>),
    /// HTTP responses.
    Http(HttpRx),
}

/// One received message.
#[derive(Debug)]
pub(crate) enum Received {
    /// A WebSocket text frame.
    Frame(Utf8Bytes),
    /// An NDJSON line.
    Line(String),
    /// A WebSocket binary frame.
    Binary(Bytes),
    /// An HTTP response body.
    Body(bytes::Bytes),
}

// === impl Endpoint ===

impl Endpoint {
    /// Opens one client connection for `wire`.
    pub(crate) async fn connect(&self, wire: Wire, buffers: Buffers) -> io::Result<(Tx, Rx)> {
        match self {
            Endpoint::Ws { addr, url } => {
                let tcp = TcpStream::connect(addr).await?;
                tcp.set_nodelay(true)?;
                let mut request = url
                    .as_str()
                    .into_client_request()
                    .map_err(io::Error::other)?;
                if wire == Wire::Holon {
                    request.headers_mut().insert(
                        header::SEC_WEBSOCKET_PROTOCOL,
                        HeaderValue::from_static(HOLON_SUBPROTOCOL),
                    );
                }
                let (mut ws, response) = tokio_tungstenite::client_async_with_config(
                    request,
                    tcp,
                    Some(ws_config(buffers)),
                )
                .await
                .map_err(io::Error::other)?;
                if wire == Wire::Holon {
                    let selected = response.headers().get(header::SEC_WEBSOCKET_PROTOCOL);
                    if selected.and_then(|v| v.to_str().ok()) != Some(HOLON_SUBPROTOCOL) {
                        return Err(io::Error::other(format!(
                            "the server did not select the {HOLON_SUBPROTOCOL} subprotocol \
                             (got {selected:?})"
                        )));
                    }
                }
                if let Wire::Sideband(encoding) = wire {
                    sideband::handshake(&mut ws, encoding).await?;
                }
                let (sink, stream) = ws.split();
                Ok((Tx::Ws(sink), Rx::Ws(stream)))
            }
            Endpoint::Http { addr, url } => {
                let Wire::Http(version) = wire else {
                    return Err(io::Error::other(format!(
                        "{wire:?} is not spoken over HTTP"
                    )));
                };
                let (tx, rx) = http::connect(*addr, url, version).await?;
                Ok((Tx::Http(tx), Rx::Http(rx)))
            }
            Endpoint::Unix(path) => {
                if wire != Wire::JsonRpc {
                    return Err(io::Error::other(format!(
                        "{wire:?} is not spoken over NDJSON"
                    )));
                }
                let (rd, wr) = UnixStream::connect(path).await?.into_split();
                let codec = LinesCodec::new_with_max_length(MAX_LINE);
                Ok((
                    Tx::Line(FramedWrite::new(wr, codec.clone())),
                    Rx::Line(FramedRead::new(rd, codec)),
                ))
            }
        }
    }
}

/// Client-side WebSocket settings.
pub(crate) fn ws_config(buffers: Buffers) -> WebSocketConfig {
    let cfg = WebSocketConfig::default()
        .max_message_size(Some(MAX_LINE))
        .max_frame_size(Some(MAX_LINE));
    match buffers {
        Buffers::Default => cfg,
        Buffers::Small => cfg.read_buffer_size(4096).write_buffer_size(0),
    }
}

// === impl Tx ===

impl Tx {
    /// Queues one message without flushing.
    pub(crate) async fn feed(&mut self, out: Out) -> io::Result<()> {
        match (self, out) {
            (Tx::Ws(sink), Out::Text(text)) => sink
                .feed(Message::Text(text.into()))
                .await
                .map_err(io::Error::other),
            (Tx::Ws(sink), Out::Binary(bytes)) => sink
                .feed(Message::Binary(bytes.into()))
                .await
                .map_err(io::Error::other),
            (Tx::Line(sink), Out::Text(text)) => sink.feed(text).await.map_err(io::Error::other),
            (Tx::Line(_), Out::Binary(_)) => Err(io::Error::other("binary data on an NDJSON line")),
            // Sent at once: HTTP has nothing to coalesce across requests.
            (Tx::Http(http), Out::Text(text)) => http.send(text).await,
            (Tx::Http(_), Out::Binary(_)) => Err(io::Error::other("binary data in an HTTP body")),
        }
    }

    /// Writes everything queued.
    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        match self {
            Tx::Ws(sink) => sink.flush().await.map_err(io::Error::other),
            Tx::Line(sink) => SinkExt::<String>::flush(sink)
                .await
                .map_err(io::Error::other),
            Tx::Http(_) => Ok(()),
        }
    }
}

// === impl Rx ===

impl Rx {
    /// The next message; `None` when the connection ended (or sent a close
    /// frame). Pings and pongs are skipped.
    pub(crate) async fn recv(&mut self) -> Option<io::Result<Received>> {
        match self {
            Rx::Ws(stream) => loop {
                match stream.next().await? {
                    Ok(Message::Text(t)) => return Some(Ok(Received::Frame(t))),
                    Ok(Message::Binary(b)) => return Some(Ok(Received::Binary(b))),
                    Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                    Ok(Message::Close(_)) => return None,
                    Err(e) => return Some(Err(io::Error::other(e))),
                }
            },
            Rx::Line(lines) => Some(
                lines
                    .next()
                    .await?
                    .map(Received::Line)
                    .map_err(io::Error::other),
            ),
            Rx::Http(http) => http.recv().await,
        }
    }
}

// === impl Received ===

impl Received {
    /// The text of a text frame or line; `None` for binary data.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Received::Frame(t) => Some(t.as_str()),
            Received::Line(s) => Some(s),
            Received::Body(b) => std::str::from_utf8(b).ok(),
            Received::Binary(_) => None,
        }
    }

    /// The raw bytes, whatever the framing.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Received::Frame(t) => t.as_bytes(),
            Received::Line(s) => s.as_bytes(),
            Received::Body(b) => b,
            Received::Binary(b) => b,
        }
    }
}
