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
//! without buffering the rest; invalid UTF-8 or JSON gets -32700 and the
//! connection stays open. After the client half-closes, pending calls are
//! answered, then the connection is closed.

use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::outbox::{Outbox, OutboxReader};
use futures_util::StreamExt;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, FramedRead};

use super::session::{Session, Verdict};
use super::{Outgoing, Serve};
use crate::dialect::errors;
use crate::dialect::render::{render, Style};
use crate::dialect::Dialect;
use crate::envelope::{Message, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::router::Route;
use crate::telemetry::metrics::RejectReason;

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
pub(crate) async fn serve(listener: UnixListener, path: PathBuf, route: Arc<Route>, ctx: Serve) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = ctx.shutdown.cancelled() => break,
        };
        match accepted {
            Ok((stream, _)) => {
                let Some(permit) = route.conns.admit(IpAddr::V4(Ipv4Addr::UNSPECIFIED)) else {
                    ctx.sessions.spawn(refuse(stream, route.clone()));
                    continue;
                };
                let (route, ctx2) = (route.clone(), ctx.clone());
                ctx.sessions.spawn(async move {
                    run(stream, route, ctx2).await;
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!(listener = %route.cfg.name, error = %e, "accept failed");
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
async fn refuse(mut stream: UnixStream, route: Arc<Route>) {
    route
        .metrics()
        .count_rejected_connection(&route.cfg.name, RejectReason::Limit);
    let err = GatewayError::with_detail(ErrorKind::ResourceExhausted, "max connections exceeded");
    let reply = Message::error(Some(WireId::null()), errors::render(&err, Dialect::Ndjson));
    if let Ok(mut line) = render(&reply, Style::Line) {
        line.push('\n');
        // Refused either way; the line is a courtesy.
        let _ = stream.write_all(line.as_bytes()).await;
    }
    let _ = stream.shutdown().await;
}

/// How the reader loop ended.
enum End {
    /// EOF or a read error: answer what is pending, then close.
    Eof,
    /// switchyard closes the connection.
    Closing,
    /// Graceful shutdown.
    Shutdown,
}

async fn run(stream: UnixStream, route: Arc<Route>, ctx: Serve) {
    let name = route.cfg.name.clone();
    let _open = super::OpenConnection::count(&route);
    let (read, write) = stream.into_split();
    let sent = route.metrics().frame_counter(
        Dialect::Ndjson,
        crate::error::Side::Client,
        crate::telemetry::metrics::Direction::Out,
    );
    let (session, rx) = Session::new(route.clone(), ctx.grace_over.clone());
    let writer = tokio::spawn(write_lines(write, rx, sent));
    let codec = AnyDelimiterCodec::new_with_max_length(
        vec![b'\n'],
        vec![b'\n'],
        route.cfg.max_message_bytes,
    );
    let mut lines = FramedRead::new(read, codec);
    let (lost, slow) = (session.upstream_lost(), session.slow_consumer());
    let opened = tokio::time::Instant::now();
    let mut last_rx = opened;
    // Made once, not per line: each registers a waiter or a timer.
    let (lost, slow, shutdown) = (lost.cancelled(), slow.cancelled(), ctx.shutdown.cancelled());
    let expired = tokio::time::sleep_until(expiry(&route.cfg.protection, opened, last_rx));
    tokio::pin!(lost, slow, shutdown, expired);
    let end = loop {
        let next = tokio::select! {
            // Lines first: the other branches are polled only when no line
            // is ready.
            biased;
            next = lines.next() => next,
            // Idle too long, or lived too long: answer what is pending, close.
            // (The timer is moved on only when it fires, not per line.)
            () = &mut expired => {
                let due = expiry(&route.cfg.protection, opened, last_rx);
                if due <= tokio::time::Instant::now() {
                    break End::Eof;
                }
                expired.as_mut().reset(due);
                continue;
            }
            // Pending calls on the lost link fail at once; answer, then close.
            () = &mut lost => break End::Eof,
            () = &mut slow => {
                route.count_protocol_error("slow_consumer");
                route.metrics().count_limit(&route.cfg.name, crate::telemetry::metrics::Limit::SlowConsumer);
                break End::Closing;
            }
            () = &mut shutdown => break End::Shutdown,
        };
        last_rx = tokio::time::Instant::now();
        match next {
            Some(Ok(line)) => {
                let line = line.strip_suffix(b"\r").unwrap_or(&line);
                if line.is_empty() {
                    continue;
                }
                if let Verdict::Close(..) = on_line(&session, line).await {
                    break End::Closing;
                }
            }
            Some(Err(AnyDelimiterCodecError::MaxChunkLengthExceeded)) => {
                line_too_long(&route, session.outbox()).await;
                break End::Closing;
            }
            Some(Err(e)) => {
                tracing::debug!(listener = %name, error = %e, "read failed");
                break End::Eof;
            }
            None => break End::Eof,
        }
    };
    match end {
        End::Closing => session.abort().await,
        End::Eof | End::Shutdown => session.drain().await,
    }
    drop(session);
    let mut writer = writer;
    if tokio::time::timeout(std::time::Duration::from_secs(2), &mut writer)
        .await
        .is_err()
    {
        // A client that does not read keeps the writer stuck: cut it off.
        writer.abort();
        tracing::debug!(listener = %name, "writer did not finish in time");
    }
}

/// When the connection must close: idle timeout after the last line, or
/// the connection lifetime (far in the future when neither is set).
fn expiry(
    p: &crate::config::Protection,
    opened: tokio::time::Instant,
    last_rx: tokio::time::Instant,
) -> tokio::time::Instant {
    let never = opened + std::time::Duration::from_secs(100 * 365 * 24 * 3600);
    let idle = p.idle_timeout.map_or(never, |t| last_rx + t);
    let life = p.max_connection_lifetime.map_or(never, |t| opened + t);
    idle.min(life)
}

/// One line: JSON-RPC if it is UTF-8, else a parse error.
async fn on_line(session: &Session, line: &[u8]) -> Verdict {
    match std::str::from_utf8(line) {
        Ok(text) => session.on_text(text).await,
        Err(_) => {
            let err = errors::render(&GatewayError::new(ErrorKind::ParseError), Dialect::Ndjson);
            session
                .send(&Message::error(Some(WireId::null()), err))
                .await;
            Verdict::Continue
        }
    }
}

async fn line_too_long(route: &Route, outbox: &Outbox) {
    route.count_protocol_error("message_too_large");
    route.metrics().count_limit(
        &route.cfg.name,
        crate::telemetry::metrics::Limit::MaxMessageBytes,
    );
    let limit = route.cfg.max_message_bytes;
    let err = GatewayError::with_detail(
        ErrorKind::InvalidRequest,
        format!("Line exceeds maximum of {limit} bytes"),
    );
    let reply = Message::error(Some(WireId::null()), errors::render(&err, Dialect::Ndjson));
    if let Ok(text) = render(&reply, Style::Line) {
        outbox.send_frame(Outgoing::Text(text)).await;
    }
}

/// Writes queued lines until the outbox is dropped or a close is queued.
async fn write_lines(
    write: OwnedWriteHalf,
    mut rx: OutboxReader,
    sent: crate::telemetry::metrics::FrameCounter,
) {
    let mut out = BufWriter::new(write);
    while let Some(item) = rx.recv().await {
        let Outgoing::Text(line) = item else {
            if matches!(item, Outgoing::Close(..)) {
                break;
            }
            continue;
        };
        sent.count(line.len());
        let written = async {
            out.write_all(line.as_bytes()).await?;
            out.write_all(b"\n").await
        };
        if written.await.is_err() {
            return;
        }
        if rx.is_empty() && out.flush().await.is_err() {
            return;
        }
    }
    // Best effort: the client may be gone already.
    let _ = out.flush().await;
    let _ = out.shutdown().await;
}
