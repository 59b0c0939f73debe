//! The text connection of a JSON-RPC or holon-rpc watch: WebSocket text
//! frames, or NDJSON lines on a Unix socket (each read of at most
//! [`MAX_REPLY_BYTES`]).

use std::path::Path;

use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use crate::client::connect::Ws;
use crate::client::error::MAX_REPLY_BYTES;
use crate::client::ClientError;

/// Opens the Unix socket of an NDJSON listener.
pub(super) async fn unix(path: &Path) -> Result<Conn, ClientError> {
    let stream = UnixStream::connect(path)
        .await
        .map_err(|source| ClientError::Connect {
            path: path.display().to_string(),
            source,
        })?;
    let (rd, wr) = stream.into_split();
    let lines = FramedRead::new(rd, LinesCodec::new_with_max_length(MAX_REPLY_BYTES));
    Ok(Conn::Unix { lines, wr })
}

/// A text connection: WebSocket text frames or NDJSON lines.
pub(super) enum Conn {
    /// Boxed: one per watch, and far larger than the Unix variant.
    Ws(Box<Ws>),
    Unix {
        lines: FramedRead<OwnedReadHalf, LinesCodec>,
        wr: OwnedWriteHalf,
    },
}

/// One thing read from a [`Conn`].
pub(super) enum Read {
    Text(String),
    /// The server closed the connection, for this reason.
    Closed(String),
}

impl Conn {
    pub(super) async fn send(&mut self, text: String) -> Result<(), ClientError> {
        match self {
            Conn::Ws(ws) => Ok(ws.send(Message::text(text)).await?),
            Conn::Unix { wr, .. } => {
                let mut line = text.into_bytes();
                line.push(b'\n');
                Ok(wr.write_all(&line).await?)
            }
        }
    }

    pub(super) async fn recv(&mut self) -> Result<Read, ClientError> {
        match self {
            Conn::Ws(ws) => loop {
                match ws.next().await {
                    None => return Ok(Read::Closed(String::new())),
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(Message::Text(text))) => return Ok(Read::Text(text.to_string())),
                    Some(Ok(Message::Close(frame))) => {
                        let why = frame.map_or_else(String::new, |f| {
                            format!("{} {}", u16::from(f.code), f.reason)
                        });
                        return Ok(Read::Closed(why));
                    }
                    Some(Ok(_)) => {}
                }
            },
            Conn::Unix { lines, .. } => match lines.next().await {
                None => Ok(Read::Closed(String::new())),
                Some(Ok(mut line)) => {
                    if line.ends_with('\r') {
                        line.pop();
                    }
                    Ok(Read::Text(line))
                }
                Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                    Err(ClientError::ReplyTooLarge)
                }
                Some(Err(LinesCodecError::Io(e))) => Err(e.into()),
            },
        }
    }

    /// Says goodbye (a WebSocket close); best effort.
    pub(super) async fn close(&mut self) {
        match self {
            // The watch is over either way.
            Conn::Ws(ws) => drop(WebSocketStream::close(ws, None).await),
            Conn::Unix { wr, .. } => drop(wr.shutdown().await),
        }
    }
}
