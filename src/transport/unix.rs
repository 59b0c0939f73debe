//! NDJSON listeners: local programs speak JSON-RPC to switchyard over a
//! Unix socket, one compact JSON text per line.
//!
//! The socket is created with its configured mode (0600 by default) and no
//! window: it is bound inside a private 0700 directory, chmodded, then
//! renamed into place. A stale socket file is removed only if nothing
//! answers on it; any other file at the path is left alone and startup
//! fails. The file is removed on shutdown.
//!
//! Lines: split on `\n`, one trailing `\r` stripped, empty lines skipped, a
//! final unterminated line processed at EOF. A line over the limit gets
//! -32600 `Line exceeds maximum of N bytes` and the connection is closed
//! without buffering the rest (the read buffer never holds more than one
//! line, and shrinks back to 8 KiB after a long one: [`crate::lines`]);
//! invalid UTF-8 or JSON gets -32700 and the
//! connection stays open. After the client half-closes, pending calls are
//! answered, then the connection is closed.

use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytestring::ByteString;
use futures_util::StreamExt;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio_util::codec::{AnyDelimiterCodecError, FramedRead};

use super::driver::{self, Fixed, FrameSink, Incoming};
use super::session::Session;
use super::{Listener, ListenerCell, Outgoing, Serve};
use crate::close::CloseCode;
use crate::dialect::errors;
use crate::dialect::jsonrpc::{render, Style};
use crate::envelope::{Message, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::lines::Lines;
use crate::telemetry::metrics::RejectReason;
use crate::telemetry::Peer;

/// Binds `path` with `mode`, handling stale sockets as the module explains.
pub(crate) fn bind(path: &Path, mode: u32) -> io::Result<UnixListener> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    remove_stale(path)?;
    let private = tempfile::Builder::new()
        .prefix(".switchyard-")
        .tempdir_in(parent)?;
    let tmp = private.path().join("sock");
    let listener = std::os::unix::net::UnixListener::bind(&tmp)?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
    fs::rename(&tmp, path)?;
    listener.set_nonblocking(true)?;
    UnixListener::from_std(listener)
}

fn remove_stale(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(meta) if !meta.file_type().is_socket() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; refusing to remove it",
                path.display()
            ),
        )),
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("already running at {}", path.display()),
            )),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => fs::remove_file(path),
            Err(e) => Err(e),
        },
    }
}

/// Accepts NDJSON clients until shutdown, then removes the socket file.
pub(crate) async fn serve(
    listener: UnixListener,
    path: PathBuf,
    cell: Arc<ListenerCell>,
    ctx: Serve,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = ctx.shutdown.cancelled() => break,
        };
        match accepted {
            Ok((stream, _)) => {
                let served = cell.load();
                let Some(permit) = served.conns().admit(IpAddr::V4(Ipv4Addr::UNSPECIFIED)) else {
                    ctx.sessions.spawn(refuse(stream, served));
                    continue;
                };
                let (cell, ctx2) = (cell.clone(), ctx.clone());
                ctx.sessions.spawn(async move {
                    run(stream, cell, ctx2).await;
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!(listener = %cell.load().name(), error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    if let Err(e) = fs::remove_file(&path) {
        tracing::debug!(path = %path.display(), error = %e, "socket file not removed");
    }
}

/// Over the connection cap: one error line, then close.
async fn refuse(mut stream: UnixStream, listener: Arc<Listener>) {
    listener.count_rejected(RejectReason::Limit);
    let reason = "max connections exceeded";
    listener.log_closed(CloseCode::PolicyViolation, reason, Peer(None));
    let err = GatewayError::with_detail(ErrorKind::ResourceExhausted, reason);
    let reply = Message::error(
        Some(WireId::null()),
        errors::render(&err, listener.dialect()),
    );
    if let Ok(mut line) = render(&reply, Style::Line) {
        line.push('\n');
        // Refused either way; the line is a courtesy.
        let _ = stream.write_all(line.as_bytes()).await;
    }
    let _ = stream.shutdown().await;
}

async fn run(stream: UnixStream, cell: Arc<ListenerCell>, ctx: Serve) {
    // Read once for what is fixed for the connection's life (its outbox,
    // line limit and timers); requests read the cell themselves, and the
    // listener is not held (a reload may replace it).
    let listener = cell.load();
    let _open = super::OpenConnection::count(&listener);
    let (read, write) = stream.into_split();
    let sent = listener.metrics().frame_counter(
        listener.dialect(),
        crate::error::Side::Client,
        crate::telemetry::metrics::Direction::Out,
    );
    let (session, rx) = Session::new(cell.clone(), ctx.grace_over.clone(), None);
    let writer = tokio::spawn(driver::write_loop(
        LineSink(BufWriter::new(write)),
        rx,
        sent,
    ));
    // The read buffer holds at most one line (`max_message_bytes` + 1
    // bytes) and shrinks back after a long one: see `crate::lines`.
    let codec = Lines::new(listener.cfg().max_message_bytes);
    // Empty lines (after one trailing `\r` is stripped) are skipped.
    let lines = FramedRead::new(read, codec)
        .map(incoming)
        .filter(|line| std::future::ready(!matches!(line, Incoming::Text(l) if l.is_empty())))
        // The end of input (a half-close): answer what is pending, then close.
        .chain(futures_util::stream::once(std::future::ready(
            Incoming::Eof,
        )));
    let lines = std::pin::pin!(lines);
    let fixed = Fixed::of(&listener, None);
    drop(listener);
    let end = driver::read_loop(lines, &session, &cell, &ctx, &fixed).await;
    // Boxed when the connection ends: see `driver::finish`.
    Box::pin(driver::finish(end, session, writer)).await;
}

/// A line as the driver sees it (without its `\r`).
fn incoming(line: Result<bytes::Bytes, AnyDelimiterCodecError>) -> Incoming {
    match line {
        Ok(mut line) => {
            if line.ends_with(b"\r") {
                line.truncate(line.len() - 1);
            }
            match ByteString::try_from(line) {
                Ok(line) => Incoming::Text(line.into()),
                Err(_) => Incoming::NotUtf8,
            }
        }
        // Not buffered beyond the limit: the rest of it is never read.
        Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => Incoming::TooLarge,
        Err(e) => {
            tracing::debug!(error = %e, "read failed");
            Incoming::Eof
        }
    }
}

/// The client's socket, written line by line through a buffer flushed
/// when the outbox runs empty.
struct LineSink(BufWriter<OwnedWriteHalf>);

impl FrameSink for LineSink {
    async fn feed(&mut self, out: Outgoing) -> Result<(), ()> {
        // NDJSON has no binary frames and no pings.
        let line = match &out {
            Outgoing::Text(line) => line.as_bytes(),
            Outgoing::Rendered(line) => line,
            _ => return Ok(()),
        };
        self.0.write_all(line).await.map_err(drop)?;
        self.0.write_all(b"\n").await.map_err(drop)
    }

    async fn flush(&mut self) -> Result<(), ()> {
        self.0.flush().await.map_err(drop)
    }

    async fn close(&mut self, _: Outgoing) {
        // Best effort: the client may be gone already.
        let _ = self.0.flush().await;
        let _ = self.0.shutdown().await;
    }
}
