//! One daemon connection: a line reader and a writer joined by a bounded outbox.
//!
//! The reader splits the stream into lines ([`LineCodec`]), hands each to
//! [`request::process`] and queues the reply. Standard mode runs waiting
//! requests in tracked tasks so replies come back as they complete; hld mode
//! waits inline, so replies are FIFO and a slow call blocks the connection,
//! as in hld. The writer coalesces queued lines into few `write` calls.
//!
//! Every loop also watches the daemon's cancellation token: `Daemon::stop`
//! drops connections abruptly, answering nothing that is still in flight.

use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_util::codec::{Decoder, FramedRead};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::request::{self, LineOutcome};
use super::subscribe;
use super::tap::Tap;
use super::StreamCounters;

/// What a connection needs from its daemon.
#[derive(Debug, Clone)]
pub(super) struct ConnCtx {
    /// hld quirks mode.
    pub(super) hld: bool,
    /// Records lines for the demo's playground, when attached.
    pub(super) tap: Option<Arc<Tap>>,
    /// Cancelled by `Daemon::stop`.
    pub(super) cancel: CancellationToken,
    /// Tracks request tasks too, so `stop` returns only when all are gone.
    pub(super) tracker: TaskTracker,
    /// Counts `Subscribe` streams.
    pub(super) streams: Arc<StreamCounters>,
}

/// Splits a byte stream on `\n`, dropping one trailing `\r`, with a bound on
/// the line length so a peer cannot make the daemon buffer without limit.
#[derive(Debug)]
pub(super) struct LineCodec {
    max: usize,
    /// Where the next scan for `\n` starts, so long lines are scanned once.
    next_index: usize,
}

/// Why the line reader stopped.
#[derive(Debug, thiserror::Error)]
pub(super) enum LineError {
    /// A line (without its `\n`) exceeded the limit.
    #[error("line exceeds {0} bytes")]
    TooLong(usize),
    /// The socket failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Maximum line length, in bytes, without the `\n`.
pub(super) const MAX_LINE: usize = 16 * 1024 * 1024;
/// Queued reply lines per connection. Also bounds how many subscription
/// events wait for a slow reader before new ones are dropped (hld: 100).
pub(super) const OUTBOX: usize = 128;
/// The writer stops coalescing lines past this many bytes.
const COALESCE_BYTES: usize = 64 * 1024;

/// Serves one accepted connection until EOF, an error or cancellation.
pub(super) async fn serve(stream: UnixStream, ctx: ConnCtx) {
    let (rd, wr) = stream.into_split();
    serve_halves(rd, wr, ctx).await;
}

/// Serves one connection over a read and a write half (a socket's, or
/// stdin and stdout in `--stdio` mode).
pub(super) async fn serve_halves<R, W>(rd: R, wr: W, ctx: ConnCtx)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let (tx, rx) = mpsc::channel(OUTBOX);
    let lines = FramedRead::new(rd, LineCodec::new(MAX_LINE));
    let tap = ctx.tap.as_ref().map(|tap| (tap.clone(), tap.connection()));
    tokio::join!(
        read_loop(lines, tx, &ctx, tap.as_ref()),
        write_loop(wr, rx, &ctx.cancel, tap.as_ref())
    );
}

/// Reads lines and dispatches them; returns at EOF, on error, on
/// cancellation, or when a subscription on this connection ends.
async fn read_loop<R: AsyncRead + Unpin>(
    mut lines: FramedRead<R, LineCodec>,
    tx: mpsc::Sender<Vec<u8>>,
    ctx: &ConnCtx,
    tap: Option<&(Arc<Tap>, u64)>,
) {
    loop {
        let next = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return,
            next = lines.next() => next,
        };
        let line = match next {
            None => return,
            Some(Ok(line)) => line,
            Some(Err(e)) => return read_failed(e, &tx, ctx.hld).await,
        };
        if let Some((tap, conn)) = tap {
            tap.read(*conn, &line);
        }
        let queued = match request::process(&line, ctx.hld) {
            LineOutcome::Silent => true,
            LineOutcome::Reply(bytes) => tx.send(bytes).await.is_ok(),
            LineOutcome::Pending(pending) if ctx.hld => {
                let reply = tokio::select! {
                    biased;
                    () = ctx.cancel.cancelled() => return,
                    reply = pending.resolve() => reply,
                };
                tx.send(reply).await.is_ok()
            }
            LineOutcome::Pending(pending) => {
                spawn_pending(pending, tx.clone(), ctx);
                true
            }
            LineOutcome::Subscribe(params) => {
                let rd = lines.into_inner();
                let _open = ctx.streams.open();
                subscribe::run(rd, tx, params.as_deref(), &ctx.cancel).await;
                return;
            }
        };
        if !queued {
            return;
        }
    }
}

/// Ends a connection whose stream cannot be read on.
async fn read_failed(e: LineError, tx: &mpsc::Sender<Vec<u8>>, hld: bool) {
    tracing::debug!(error = %e, "daemon: closing connection");
    // hld closes without a word; standard mode explains an oversized line.
    if let (LineError::TooLong(max), false) = (&e, hld) {
        // The connection closes next whether or not this is queued.
        let _ = tx.send(request::too_long_line(*max)).await;
    }
}

/// Standard mode: waits for a slow reply in its own task.
fn spawn_pending(pending: request::Pending, tx: mpsc::Sender<Vec<u8>>, ctx: &ConnCtx) {
    let cancel = ctx.cancel.clone();
    ctx.tracker.spawn(async move {
        tokio::select! {
            biased;
            () = cancel.cancelled() => {}
            reply = pending.resolve() => {
                // The writer is gone only when the connection is; nobody to tell.
                let _ = tx.send(reply).await;
            }
        }
    });
}

/// Writes queued lines until every sender is gone, the peer stops reading,
/// or the daemon stops.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::Receiver<Vec<u8>>,
    cancel: &CancellationToken,
    tap: Option<&(Arc<Tap>, u64)>,
) {
    loop {
        let next = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            next = rx.recv() => next,
        };
        let Some(mut batch) = next else {
            return;
        };
        while batch.len() < COALESCE_BYTES {
            match rx.try_recv() {
                Ok(more) => batch.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if let Some((tap, conn)) = tap {
            tap.wrote(*conn, &batch);
        }
        let written = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            written = wr.write_all(&batch) => written,
        };
        if let Err(e) = written {
            tracing::debug!(error = %e, "daemon: write failed");
            return;
        }
    }
}

// === impl LineCodec ===

impl LineCodec {
    /// A codec refusing lines longer than `max` bytes (without the `\n`).
    pub(super) fn new(max: usize) -> Self {
        LineCodec { max, next_index: 0 }
    }

    fn take_line(&mut self, buf: &mut BytesMut, len: usize, consumed: usize) -> BytesMut {
        self.next_index = 0;
        let mut line = buf.split_to(consumed);
        line.truncate(len);
        if line.last() == Some(&b'\r') {
            line.truncate(len - 1);
        }
        line
    }
}

impl Decoder for LineCodec {
    type Item = BytesMut;
    type Error = LineError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<BytesMut>, LineError> {
        // A line of exactly `max` bytes has its `\n` at index `max`.
        let scan_end = buf.len().min(self.max + 1);
        let start = self.next_index.min(scan_end);
        if let Some(offset) = buf[start..scan_end].iter().position(|b| *b == b'\n') {
            let len = start + offset;
            return Ok(Some(self.take_line(buf, len, len + 1)));
        }
        if buf.len() > self.max {
            return Err(LineError::TooLong(self.max));
        }
        self.next_index = scan_end;
        Ok(None)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<BytesMut>, LineError> {
        if let Some(line) = self.decode(buf)? {
            return Ok(Some(line));
        }
        if buf.is_empty() {
            return Ok(None);
        }
        // A final line without `\n` is processed at EOF, as hld does.
        let len = buf.len();
        Ok(Some(self.take_line(buf, len, len)))
    }
}
