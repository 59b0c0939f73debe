//! Reference WebSocket upstream servers: the targets of switchyard's
//! WebSocket *client* side in tests, benches and demos. Nothing in the
//! gateway's data path depends on them.
//!
//! One [`WsDaemon`] listens on TCP and serves one [`WsDialect`] at path
//! `/rpc`:
//! - [`WsDialect::JsonRpc`]: strict JSON-RPC 2.0 (`jsonrpc-ws.md` §1–§5):
//!   raw id echo, batches, notifications never answered; subprotocol
//!   `jsonrpc` selected when offered.
//! - [`WsDialect::Holon`]: a strict holon-rpc server (`holon-rpc.md` §1–§8):
//!   string ids only, six envelope keys, protocol errors close 1002,
//!   `rpc.heartbeat`; subprotocol `holon-rpc` selected when offered.
//!
//! Both accept clients that offer no subprotocol, run each request of a
//! connection concurrently, write through one writer task per connection with
//! a bounded outbox, accept text frames only (binary → close 1003), answer
//! WebSocket pings and close 1009 above [`MAX_MESSAGE`] bytes.
//!
//! Methods: those of the NDJSON daemon ([`super::methods`]) except
//! `Subscribe`, plus `whoami`, `callback`, `push` and `close_me` (see
//! [`calls`]), which exercise per-client upstream connections,
//! server-initiated requests and upstream-link loss.
//!
//! Layout, each file importing only those below it: this file owns the
//! listener and handshake; `driver` one connection's reader and writer loops;
//! `jsonrpc` and `holon` the dialects; `calls` the methods; `conn` the state
//! one connection shares with all of them.

mod calls;
mod conn;
mod driver;
mod holon;
mod jsonrpc;

#[cfg(test)]
mod tests;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::server::{
    Callback, ErrorResponse, Request, Response,
};
use tokio_tungstenite::tungstenite::http::{header, HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Which WebSocket dialect the reference server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsDialect {
    /// JSON-RPC 2.0 over WebSocket (`jsonrpc-ws.md`), subprotocol `jsonrpc`.
    JsonRpc,
    /// holon-rpc (`holon-rpc.md`), subprotocol `holon-rpc`.
    Holon,
}

/// A running reference WebSocket server. Dropping it without
/// [`WsDaemon::stop`] also stops it, without waiting.
#[derive(Debug)]
pub struct WsDaemon {
    addr: SocketAddr,
    /// Cancels the accept loop, every connection and every request task.
    cancel: CancellationToken,
    /// Every task the server spawned, so `stop` can wait for all of them.
    tracker: TaskTracker,
    counters: Arc<Counters>,
}

/// Connection counts shared with the accept loop and the connections.
#[derive(Debug, Default)]
struct Counters {
    /// WebSocket connections currently open.
    open: AtomicUsize,
    /// WebSocket connections accepted since start.
    accepted: AtomicUsize,
}

/// What the accept loop hands to every connection.
#[derive(Debug, Clone)]
struct ServerCtx {
    dialect: WsDialect,
    cancel: CancellationToken,
    tracker: TaskTracker,
    counters: Arc<Counters>,
}

/// The opening handshake's check: answers 404 off [`PATH`] and selects the
/// dialect's subprotocol when the client offers it (echoing the client's
/// spelling); clients offering nothing are accepted.
struct Negotiate(WsDialect);

/// Decrements the open-connection count when a connection ends.
struct OpenGuard(Arc<Counters>);

/// The largest message accepted; above it the connection closes 1009
/// (`holon-rpc.md` §7, `jsonrpc-ws.md` §1).
pub const MAX_MESSAGE: usize = 1024 * 1024;
/// The path the server answers on; any other gets HTTP 404.
const PATH: &str = "/rpc";
/// How long a client may take to complete the opening handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed `accept` (such as EMFILE) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Runs a reference WebSocket daemon on `addr` until SIGINT/SIGTERM (for
/// `switchyard daemon --ws-listen`).
pub async fn run_until_signal(addr: SocketAddr, dialect: WsDialect) -> io::Result<()> {
    let daemon = WsDaemon::start(addr, dialect).await?;
    tracing::info!(address = %daemon.url(), "ws daemon listening");
    crate::shutdown::signal().await;
    tracing::info!("ws daemon stopping");
    daemon.stop().await;
    Ok(())
}

// === impl WsDialect ===

impl WsDialect {
    /// The subprotocol token the dialect selects when a client offers it.
    pub fn subprotocol(self) -> &'static str {
        match self {
            WsDialect::JsonRpc => "jsonrpc",
            WsDialect::Holon => "holon-rpc",
        }
    }
}

// === impl WsDaemon ===

impl WsDaemon {
    /// Binds `addr` (e.g. `127.0.0.1:0`) and serves `dialect` at path `/rpc`
    /// in background tasks.
    pub async fn start(addr: SocketAddr, dialect: WsDialect) -> io::Result<WsDaemon> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let ctx = ServerCtx {
            dialect,
            cancel: CancellationToken::new(),
            tracker: TaskTracker::new(),
            counters: Arc::default(),
        };
        let daemon = WsDaemon {
            addr,
            cancel: ctx.cancel.clone(),
            tracker: ctx.tracker.clone(),
            counters: ctx.counters.clone(),
        };
        daemon.tracker.spawn(accept_loop(listener, ctx));
        Ok(daemon)
    }

    /// The URL clients connect to: `ws://127.0.0.1:PORT/rpc`.
    pub fn url(&self) -> String {
        format!("ws://{}{PATH}", self.addr)
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// WebSocket connections currently open.
    pub fn connections(&self) -> usize {
        self.counters.open.load(Ordering::Acquire)
    }

    /// WebSocket connections accepted since start.
    pub fn accepted(&self) -> usize {
        self.counters.accepted.load(Ordering::Acquire)
    }

    /// Stops abruptly, like a killed process: the listener and every
    /// connection are dropped at once (TCP closed, no close frame, no replies
    /// to in-flight calls). Returns when all tasks are gone.
    pub async fn stop(self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

impl Drop for WsDaemon {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts TCP connections until cancelled; each is served in a tracked task.
async fn accept_loop(listener: TcpListener, ctx: ServerCtx) {
    loop {
        let accepted = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                ctx.tracker.spawn(handshake(stream, ctx.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "ws daemon: accept failed");
                tokio::select! {
                    () = ctx.cancel.cancelled() => return,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
            }
        }
    }
}

/// Completes the opening handshake, then serves the connection.
async fn handshake(stream: TcpStream, ctx: ServerCtx) {
    // Replies are small and latency matters more than packet count here.
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "ws daemon: cannot set TCP_NODELAY");
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    let negotiate = Negotiate(ctx.dialect);
    let upgrade = tokio_tungstenite::accept_hdr_async_with_config(stream, negotiate, Some(config));
    let ws = tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => return,
        ws = tokio::time::timeout(HANDSHAKE_TIMEOUT, upgrade) => ws,
    };
    let ws = match ws {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => return tracing::debug!(error = %e, "ws daemon: handshake failed"),
        Err(_) => return tracing::debug!("ws daemon: handshake timed out"),
    };
    let number = ctx.counters.accepted.fetch_add(1, Ordering::AcqRel) + 1;
    ctx.counters.open.fetch_add(1, Ordering::AcqRel);
    let _open = OpenGuard(ctx.counters.clone());
    driver::serve(ws, number, &ctx).await;
}

// === impl Negotiate ===

impl Callback for Negotiate {
    fn on_request(self, req: &Request, mut resp: Response) -> Result<Response, ErrorResponse> {
        if req.uri().path() != PATH {
            let body = format!("no WebSocket endpoint here; use {PATH}");
            let mut refused = ErrorResponse::new(Some(body));
            *refused.status_mut() = StatusCode::NOT_FOUND;
            return Err(refused);
        }
        let wanted = self.0.subprotocol();
        let offered = req
            .headers()
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .find(|token| token.eq_ignore_ascii_case(wanted));
        if let Some(token) = offered.and_then(|t| HeaderValue::from_str(t).ok()) {
            resp.headers_mut()
                .insert(header::SEC_WEBSOCKET_PROTOCOL, token);
        }
        Ok(resp)
    }
}
