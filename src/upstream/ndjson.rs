//! NDJSON over a Unix socket: dialing, and lines in and out for the link
//! driver (`driver`).
//!
//! Reads are framed on `\n` with the upstream's response limit (a longer
//! line closes the connection and fails its calls); the read buffer holds
//! at most one line and shrinks back after a long one ([`crate::lines`]).
//! [`LineReader`] takes the lines straight out of that buffer, which it
//! fills from the socket itself (no `FramedRead` and stream adaptors
//! between the socket and the driver). A line that is not
//! UTF-8 leaves the framing intact: the driver counts it as a protocol
//! error and drops it, like a line that is not JSON, and the connection
//! lives on. Writes go through the link's one writer, so lines never
//! interleave: it takes every line queued so far at once and writes them
//! with one vectored write, up to [`SLICES`] segments per call
//! (`outlet::LineQueue`).

use std::io::IoSlice;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use bytestring::ByteString;
use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio_util::codec::{AnyDelimiterCodecError, Decoder};
use tokio_util::sync::CancellationToken;

use super::driver::{self, FrameSink, Incoming, Outgoing, Source};
use super::error::LinkError;
use super::link::Link;
use super::outlet::{self, LineQueue, Outlet, Segments};
use super::owner::OwnerRef;
use super::shared::{hard_cap, UpstreamShared};
use crate::dialect::link::Farewell;
use crate::lines::Lines;

/// Connects and starts the link's driver.
pub(super) async fn connect(
    path: &Path,
    shared: Arc<UpstreamShared>,
    owner: Option<OwnerRef>,
    shutdown: CancellationToken,
) -> Result<Arc<Link>, LinkError> {
    let stream = UnixStream::connect(path)
        .await
        .map_err(LinkError::Connect)?;
    let (read, write) = stream.into_split();
    Ok(start(read, write, shared, owner, shutdown))
}

/// Starts the reader and writer tasks of a link over `read` and `write`:
/// a socket's halves, or a child process's stdout and stdin.
pub(super) fn start<R, W>(
    read: R,
    write: W,
    shared: Arc<UpstreamShared>,
    owner: Option<OwnerRef>,
    shutdown: CancellationToken,
) -> Arc<Link>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let queue = LineQueue::new(outlet::capacity(shared.cfg.max_in_flight_per_connection));
    // Lines up to twice the limit are read whole so that an oversize reply
    // fails only its own call; longer ones close the connection.
    let limit = hard_cap(shared.cfg.max_response_bytes);
    // A long reply's buffer is not kept for the link's life: `crate::lines`.
    let lines = LineReader::new(read, limit);
    let codec = shared.codec();
    let link = Link::new(Outlet::Lines(queue.clone()), codec, shared, owner);
    let sink = LineSink(write);
    driver::spawn(&link, lines, sink, Source::Lines(queue), shutdown);
    link
}

/// The lines of an NDJSON upstream as the driver reads them: the framing
/// of `FramedRead` over [`Lines`] (the same read buffer, its bound and
/// every error), with each line turned into [`Incoming`] and blank lines
/// skipped, in one `poll_next`.
///
/// Bound: the read buffer is [`Lines`]'s (at most `limit + 1` bytes while a
/// line is read, back to [`crate::lines::INITIAL`] after a long one).
/// After an error (a line over the limit, a failed read) the stream ends.
struct LineReader<R> {
    read: R,
    buf: BytesMut,
    lines: Lines,
    limit: usize,
    /// The buffer may hold a line: decode before reading more.
    readable: bool,
    /// The socket reached EOF: what is left is the last line.
    eof: bool,
    /// EOF or an error was returned: nothing more comes.
    done: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(read: R, limit: usize) -> Self {
        LineReader {
            read,
            buf: BytesMut::with_capacity(crate::lines::INITIAL),
            lines: Lines::new(limit),
            limit,
            readable: false,
            eof: false,
            done: false,
        }
    }
}

impl<R: AsyncRead + Unpin> Stream for LineReader<R> {
    type Item = Incoming;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Incoming>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if this.readable {
                let line = match this.eof {
                    false => this.lines.decode(&mut this.buf),
                    true => this.lines.decode_eof(&mut this.buf),
                };
                match line {
                    Ok(Some(line)) => match incoming(Ok(line), this.limit) {
                        Some(next) => return Poll::Ready(Some(next)),
                        // A blank line: the next one.
                        None => continue,
                    },
                    Ok(None) if this.eof => {
                        this.done = true;
                        return Poll::Ready(None);
                    }
                    Ok(None) => this.readable = false,
                    Err(e) => {
                        this.done = true;
                        return Poll::Ready(incoming(Err(e), this.limit));
                    }
                }
            }
            // Room for at least one byte, so that a read of 0 means EOF.
            this.buf.reserve(1);
            let read = ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut this.read),
                cx,
                &mut this.buf
            ));
            match read {
                Ok(n) => {
                    this.eof = n == 0;
                    this.readable = true;
                }
                Err(e) => {
                    this.done = true;
                    return Poll::Ready(incoming(Err(e.into()), this.limit));
                }
            }
        }
    }
}

/// One line as the driver sees it, a trailing `\r` stripped; `None` for
/// a blank line (skipped).
fn incoming(line: Result<Bytes, AnyDelimiterCodecError>, limit: usize) -> Option<Incoming> {
    let bytes = match line {
        Ok(bytes) => bytes,
        Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
            return Some(Incoming::Failed(LinkError::TooLarge { limit }))
        }
        Err(AnyDelimiterCodecError::Io(e)) => return Some(Incoming::Failed(LinkError::Read(e))),
    };
    let bytes = match bytes.strip_suffix(b"\r") {
        Some(stripped) => bytes.slice(..stripped.len()),
        None => bytes,
    };
    // Checked in place: the line's text shares the read buffer (no copy).
    match ByteString::try_from(bytes) {
        Ok(text) if text.trim().is_empty() => None,
        Ok(text) => Some(Incoming::Text(text)),
        Err(_) => Some(Incoming::NotUtf8),
    }
}

/// The writing half of an NDJSON link: a socket's, or a process's stdin.
struct LineSink<W>(W);

impl<W: AsyncWrite + Unpin + Send> FrameSink for LineSink<W> {
    async fn write(&mut self, out: Outgoing<'_>) -> Result<(), ()> {
        match out {
            Outgoing::Lines(batch) => write_segments(&mut self.0, batch).await.map_err(|e| {
                tracing::debug!(error = %e, "upstream write failed");
            }),
            // Frames, pings and heartbeats are WebSocket's.
            Outgoing::Frame(_) | Outgoing::Ping | Outgoing::Heartbeat(_) => Err(()),
        }
    }

    async fn flush(&mut self) -> Result<(), ()> {
        // Each batch is written by vectored writes: nothing is buffered.
        Ok(())
    }

    async fn close(mut self, _: Option<Farewell>) {
        // Closing the write half ends the connection for the daemon too;
        // the error (if the peer is already gone) changes nothing.
        let _ = self.0.shutdown().await;
    }
}

/// The most segments handed to one vectored write (Linux takes 1,024).
const SLICES: usize = 64;

/// Writes every segment of `batch`, in order: one vectored write for up to
/// [`SLICES`] segments, continued where a partial write stopped.
pub(super) async fn write_segments<W>(write: &mut W, batch: &Segments) -> std::io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    let mut segments = batch.iter();
    loop {
        let mut slices = [IoSlice::new(&[]); SLICES];
        let mut filled = 0;
        for segment in segments.by_ref().filter(|s| !s.is_empty()) {
            slices[filled] = IoSlice::new(segment.as_bytes());
            filled += 1;
            if filled == SLICES {
                break;
            }
        }
        if filled == 0 {
            return Ok(());
        }
        let mut left = &mut slices[..filled];
        while !left.is_empty() {
            match write.write_vectored(left).await? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => IoSlice::advance_slices(&mut left, n),
            }
        }
    }
}

#[cfg(test)]
mod tests;
