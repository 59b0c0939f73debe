//! Client connections: WebSocket text frames or NDJSON lines, split into a
//! sending half and a receiving half so one connection can keep many
//! requests in flight.
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
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;
use tokio_util::codec::{FramedRead, FramedWrite, LinesCodec};

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
    /// WebSocket text frames.
    Ws(SplitSink<WebSocketStream<TcpStream>, Message>),
    /// NDJSON lines.
    Line(FramedWrite<OwnedWriteHalf, LinesCodec>),
}

/// The receiving half of a connection.
#[derive(Debug)]
pub(crate) enum Rx {
    /// WebSocket text frames.
    Ws(SplitStream<WebSocketStream<TcpStream>>),
    /// NDJSON lines.
    Line(FramedRead<OwnedReadHalf, LinesCodec>),
}

/// One received text.
#[derive(Debug)]
pub(crate) enum Text {
    /// A WebSocket text frame.
    Frame(Utf8Bytes),
    /// An NDJSON line.
    Line(String),
}

// === impl Endpoint ===

impl Endpoint {
    /// Opens one client connection.
    pub(crate) async fn connect(&self, buffers: Buffers) -> io::Result<(Tx, Rx)> {
        match self {
            Endpoint::Ws { addr, url } => {
                let tcp = TcpStream::connect(addr).await?;
                tcp.set_nodelay(true)?;
                let (ws, _) =
                    tokio_tungstenite::client_async_with_config(url, tcp, Some(ws_config(buffers)))
                        .await
                        .map_err(io::Error::other)?;
                let (sink, stream) = ws.split();
                Ok((Tx::Ws(sink), Rx::Ws(stream)))
            }
            Endpoint::Unix(path) => {
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
    /// Queues one text without flushing.
    pub(crate) async fn feed(&mut self, text: String) -> io::Result<()> {
        match self {
            Tx::Ws(sink) => sink
                .feed(Message::Text(text.into()))
                .await
                .map_err(io::Error::other),
            Tx::Line(sink) => sink.feed(text).await.map_err(io::Error::other),
        }
    }

    /// Writes everything queued.
    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        match self {
            Tx::Ws(sink) => sink.flush().await.map_err(io::Error::other),
            Tx::Line(sink) => SinkExt::<String>::flush(sink)
                .await
                .map_err(io::Error::other),
        }
    }
}

// === impl Rx ===

impl Rx {
    /// The next text; `None` when the connection ended (or sent a close or
    /// binary frame). Pings and pongs are skipped.
    pub(crate) async fn recv(&mut self) -> Option<io::Result<Text>> {
        match self {
            Rx::Ws(stream) => loop {
                match stream.next().await? {
                    Ok(Message::Text(t)) => return Some(Ok(Text::Frame(t))),
                    Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                    Ok(Message::Close(_) | Message::Binary(_)) => return None,
                    Err(e) => return Some(Err(io::Error::other(e))),
                }
            },
            Rx::Line(lines) => Some(
                lines
                    .next()
                    .await?
                    .map(Text::Line)
                    .map_err(io::Error::other),
            ),
        }
    }
}

// === impl Text ===

impl Text {
    /// The text.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Text::Frame(t) => t.as_str(),
            Text::Line(s) => s,
        }
    }
}
