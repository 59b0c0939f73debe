//! NDJSON over a Unix socket: dialing and line framing for a [`Link`].
//!
//! Reads are framed on `\n` with the upstream's response limit (a longer
//! line closes the connection and fails its calls); the read buffer holds
//! at most one line and shrinks back after a long one ([`crate::lines`]). A line that is not
//! UTF-8 leaves the framing intact: it is counted as a protocol error and
//! dropped, like a line that is not JSON, and the connection lives on.
//! Writes go through one writer task per connection, so lines never
//! interleave: it takes every line queued so far at once and writes them
//! with one vectored write, up to [`SLICES`] segments per call
//! (`outlet::LineQueue`).

use std::io::IoSlice;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use bytestring::ByteString;
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio_util::codec::{AnyDelimiterCodecError, FramedRead};
use tokio_util::sync::CancellationToken;

use super::error::LinkError;
use super::link::{Link, OwnerRef};
use super::outlet::{self, LineQueue, Outlet, Segments};
use super::UpstreamShared;
use crate::lines::Lines;
use crate::telemetry::metrics::ProtocolError;

/// Connects and starts the reader and writer tasks of a new link.
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
    let limit = super::hard_cap(shared.cfg.max_response_bytes);
    // A long reply's buffer is not kept for the link's life: `crate::lines`.
    let codec = Lines::new(limit);
    let counts = shared.clone();
    let lines = FramedRead::new(read, codec)
        .filter_map(move |line| std::future::ready(text_line(line, limit, &counts)));
    let link = Link::new(Outlet::Lines(queue.clone()), shared, owner);
    tokio::spawn(write_lines(write, queue, link.clone()));
    tokio::spawn(link.clone().run_reader(lines, shutdown));
    link
}

/// One line as text, a trailing `\r` stripped; `None` for a blank line
/// (skipped) and for one that is not UTF-8 (counted and dropped).
fn text_line(
    line: Result<Bytes, AnyDelimiterCodecError>,
    limit: usize,
    shared: &UpstreamShared,
) -> Option<Result<ByteString, LinkError>> {
    let bytes = match line {
        Ok(bytes) => bytes,
        Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
            return Some(Err(LinkError::TooLarge { limit }))
        }
        Err(AnyDelimiterCodecError::Io(e)) => return Some(Err(LinkError::Read(e))),
    };
    let bytes = match bytes.strip_suffix(b"\r") {
        Some(stripped) => bytes.slice(..stripped.len()),
        None => bytes,
    };
    // Checked in place: the line's text shares the read buffer (no copy).
    match ByteString::try_from(bytes) {
        Ok(text) if text.trim().is_empty() => None,
        Ok(text) => Some(Ok(text)),
        Err(e) => {
            tracing::debug!(upstream = %shared.cfg.name, error = %e, "line from upstream is not UTF-8; dropped");
            shared.count_protocol_error(ProtocolError::InvalidMessage);
            None
        }
    }
}

/// Writes queued lines, every line queued so far at once, until the link
/// closes.
async fn write_lines<W>(mut write: W, queue: Arc<LineQueue>, link: Arc<Link>)
where
    W: AsyncWrite + Unpin,
{
    let closed = link.closed.clone();
    let closed = closed.cancelled();
    tokio::pin!(closed);
    let mut batch = Segments::new();
    'write: loop {
        tokio::select! {
            biased;
            () = queue.take(&mut batch) => {}
            () = &mut closed => break,
        }
        if let Err(e) = write_segments(&mut write, &batch).await {
            tracing::debug!(error = %e, "upstream write failed");
            link.fail_all(&LinkError::WriteFailed);
            break 'write;
        }
        while let Some(segment) = batch.pop_front() {
            queue.recycle(segment);
        }
    }
    // Nothing queued from now on would be written: refused instead.
    queue.close();
    // Closing the write half ends the connection for the daemon too; the
    // error (if the peer is already gone) changes nothing.
    let _ = write.shutdown().await;
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
