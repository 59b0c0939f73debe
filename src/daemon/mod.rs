//! The bundled reference NDJSON daemon: JSON-RPC 2.0 over a Unix stream
//! socket, one compact JSON text per `\n`-terminated line.
//!
//! It is the demo's upstream and the target of tests and benches, not part of
//! the gateway's data path: nothing in the gateway depends on it.
//!
//! Two personalities ([`DaemonOptions::hld_quirks`]):
//! - **standard**: strict JSON-RPC 2.0. Requests on a connection run
//!   concurrently and are answered as they complete; notifications are never
//!   answered; batches are supported; ids are echoed as the exact raw token.
//! - **hld quirks**: behaves like the HumanLayer daemon (`ndjson-unix.md`
//!   §1–§6): sequential FIFO replies, notifications run and answered with
//!   `"id":null`, batches refused with -32700, hld's error texts and codes,
//!   ids echoed after a Go float64 round trip.
//!
//! Both serve the methods of the JSON-RPC 2.0 specification's examples (`sum`,
//! `subtract`, `get_data`, `update`, `notify_hello`, `notify_sum`), the test
//! devices `echo`, `sleep` and `fail`, and hld's streaming `Subscribe`.
//!
//! Layout: `conn` owns sockets and framing, `request` turns one line into
//! reply bytes, `methods` computes results, `subscribe` streams events.

mod conn;
mod gojson;
mod item;
mod methods;
mod request;
mod subscribe;
pub mod tap;
pub mod ws;

#[cfg(test)]
mod tests;

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::conn::ConnCtx;
use self::tap::Tap;

/// How the daemon behaves.
#[derive(Debug, Clone, Default)]
pub struct DaemonOptions {
    /// Mimic the HumanLayer daemon's deviations from JSON-RPC 2.0 instead of
    /// following the specification strictly.
    pub hld_quirks: bool,
}

/// A running daemon. Dropping it without [`Daemon::stop`] also stops it
/// (without waiting) and removes its socket file.
#[derive(Debug)]
pub struct Daemon {
    path: PathBuf,
    /// Cancels the accept loop, every connection and every request task.
    cancel: CancellationToken,
    /// Every task the daemon spawned, so `stop` can wait for all of them.
    tracker: TaskTracker,
    /// Set by `stop`, which already cleaned up.
    stopped: bool,
    streams: Arc<StreamCounters>,
}

/// How many `Subscribe` streams the daemon served: tests check that a
/// gateway opens one stream for many subscribers, and closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscribeStreams {
    /// Streams started (confirmed or not) since the daemon started.
    pub started: u64,
    /// Streams running now; one ends when its client goes.
    pub open: u64,
}

/// The counters behind [`SubscribeStreams`], shared with the connections.
#[derive(Debug, Default)]
pub(crate) struct StreamCounters {
    started: AtomicU64,
    open: AtomicU64,
}

/// Counts one stream as open until dropped.
#[derive(Debug)]
pub(crate) struct OpenStream(Arc<StreamCounters>);

/// Pause after a failed `accept` (such as EMFILE) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Runs a daemon until SIGINT/SIGTERM (for the `switchyard daemon` subcommand).
pub async fn run_until_signal(path: &Path, opts: DaemonOptions) -> io::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let daemon = Daemon::start(path, opts).await?;
    let address = format!("unix://{}", path.display());
    tracing::info!(%address, "daemon listening");
    let signalled = tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = terminate.recv() => Ok(()),
    };
    tracing::info!("daemon stopping");
    daemon.stop().await;
    signalled
}

/// Serves one connection on stdin and stdout (`switchyard daemon
/// --stdio`: a process upstream) until stdin closes or SIGINT/SIGTERM;
/// logs go to stderr. Requests still running then are not answered.
pub async fn serve_stdio(opts: DaemonOptions) -> io::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let ctx = ConnCtx {
        hld: opts.hld_quirks,
        tap: None,
        cancel: CancellationToken::new(),
        tracker: TaskTracker::new(),
        streams: Arc::default(),
    };
    let cancel = ctx.cancel.clone();
    let served = conn::serve_halves(tokio::io::stdin(), tokio::io::stdout(), ctx);
    tokio::select! {
        () = served => tracing::debug!("daemon: stdin closed"),
        r = tokio::signal::ctrl_c() => r?,
        _ = terminate.recv() => tracing::info!("daemon: terminated"),
    }
    cancel.cancel();
    Ok(())
}

// === impl Daemon ===

impl Daemon {
    /// Binds `path` (a stale socket file nobody answers on is removed first;
    /// parent dirs created), chmod 0600, serves in background tokio tasks.
    ///
    /// Fails with `AddrInUse` if a daemon already answers on `path`, and with
    /// `AlreadyExists` if `path` is not a socket: other files are never removed.
    pub async fn start(path: &Path, opts: DaemonOptions) -> io::Result<Daemon> {
        Self::serve(path, opts, None).await
    }

    /// Like [`start`](Self::start), recording every line read and written
    /// in `tap` (the demo's playground shows them).
    pub async fn start_tapped(
        path: &Path,
        opts: DaemonOptions,
        tap: Arc<Tap>,
    ) -> io::Result<Daemon> {
        Self::serve(path, opts, Some(tap)).await
    }

    async fn serve(path: &Path, opts: DaemonOptions, tap: Option<Arc<Tap>>) -> io::Result<Daemon> {
        prepare_path(path).await?;
        let listener = UnixListener::bind(path)?;
        // No authentication on the socket: only its owner may connect.
        if let Err(e) =
            tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).await
        {
            drop(listener);
            // Best effort: the bind is being abandoned anyway.
            let _ = tokio::fs::remove_file(path).await;
            return Err(e);
        }
        let ctx = ConnCtx {
            hld: opts.hld_quirks,
            tap,
            cancel: CancellationToken::new(),
            tracker: TaskTracker::new(),
            streams: Arc::default(),
        };
        let streams = ctx.streams.clone();
        let (cancel, tracker) = (ctx.cancel.clone(), ctx.tracker.clone());
        tracker.spawn(accept_loop(listener, ctx));
        Ok(Daemon {
            path: path.to_owned(),
            cancel,
            tracker,
            stopped: false,
            streams,
        })
    }

    /// The `Subscribe` streams served so far and running now.
    pub fn subscribe_streams(&self) -> SubscribeStreams {
        SubscribeStreams {
            started: self.streams.started.load(Ordering::SeqCst),
            open: self.streams.open.load(Ordering::SeqCst),
        }
    }

    /// The socket path the daemon listens on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops abruptly, like a killed process: closes the listener and EVERY
    /// open connection at once without answering in-flight requests, removes
    /// the socket file; returns when all tasks are gone.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
        remove_socket(&self.path);
        self.stopped = true;
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.stopped {
            self.cancel.cancel();
            remove_socket(&self.path);
        }
    }
}

// === impl StreamCounters ===

impl StreamCounters {
    /// Counts a stream that starts now; it stays open while the guard lives.
    pub(crate) fn open(self: &Arc<Self>) -> OpenStream {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.open.fetch_add(1, Ordering::SeqCst);
        OpenStream(self.clone())
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Creates the parent directory (0700) and clears a stale socket file.
async fn prepare_path(path: &Path) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        tokio::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .await?;
    }
    let meta = match tokio::fs::symlink_metadata(path).await {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            ),
        ));
    }
    match UnixStream::connect(path).await {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("daemon already running at {}", path.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::debug!(path = %path.display(), "removing stale socket file");
            tokio::fs::remove_file(path).await
        }
        Err(e) => Err(e),
    }
}

/// Removes the socket file; a file already gone is fine.
fn remove_socket(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "daemon: cannot remove socket file");
        }
    }
}

/// Accepts connections until cancelled; each is served in a tracked task.
async fn accept_loop(listener: UnixListener, ctx: ConnCtx) {
    loop {
        let accepted = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                ctx.tracker.spawn(conn::serve(stream, ctx.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "daemon: accept failed");
                tokio::select! {
                    () = ctx.cancel.cancelled() => return,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
            }
        }
    }
}
