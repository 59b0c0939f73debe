//! One WebSocket connection: a frame reader and a writer task joined by a
//! bounded outbox, plus the bookkeeping of server-initiated `s<K>` requests.
//!
//! The reader hands each text frame to its dialect ([`super::jsonrpc`] or
//! [`super::holon`]), which answers quick calls inline and runs slow ones
//! (`sleep`, `callback`) in tracked tasks, so a slow call never blocks later
//! ones. Whoever wants the connection closed queues [`Out::Close`]; the
//! writer sends the close frame and the reader then drains until the peer's
//! close (or [`CLOSE_GRACE`]).
//!
//! Every loop watches the connection's cancellation token, a child of the
//! daemon's: `WsDaemon::stop` drops sockets without a close frame.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ServerCtx, WsDialect, MAX_MESSAGE};

/// What the writer sends next.
#[derive(Debug)]
pub(super) enum Out {
    /// A text frame.
    Text(String),
    /// A close frame with this code and reason; nothing is written after it.
    Close(u16, Cow<'static, str>),
}

/// Flow control returned by a dialect for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// Keep reading frames.
    Continue,
    /// A close was queued: stop dispatching and drain.
    Close,
}

/// The reply a client sent to one of the server's `s<K>` requests.
#[derive(Debug)]
pub(super) enum Reply {
    /// The raw `result` value.
    Result(Box<RawValue>),
    /// The raw `error` value.
    Error(Box<RawValue>),
}

/// The state one connection shares with its request tasks.
#[derive(Debug)]
pub(super) struct Conn {
    /// This connection's accept number: 1, 2, ….
    pub(super) number: usize,
    /// The dialect served.
    pub(super) dialect: WsDialect,
    outbox: mpsc::Sender<Out>,
    /// Callers waiting for replies to `s<K>` requests, by id.
    waiting: Mutex<HashMap<String, oneshot::Sender<Reply>>>,
    /// The `K` of the last `s<K>` id handed out.
    last_id: AtomicU64,
    /// Cancelled when the connection ends or the daemon stops.
    cancel: CancellationToken,
    tracker: TaskTracker,
}

type Ws = WebSocketStream<TcpStream>;

/// Queued frames per connection; a full outbox makes the reader wait.
const OUTBOX: usize = 128;
/// How long the reader waits for the peer's close after the server's.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Serves one upgraded connection until it closes, fails or is cancelled.
pub(super) async fn serve(ws: Ws, number: usize, ctx: &ServerCtx) {
    let (sink, stream) = ws.split();
    let (outbox, rx) = mpsc::channel(OUTBOX);
    let conn = Arc::new(Conn {
        number,
        dialect: ctx.dialect,
        outbox,
        waiting: Mutex::default(),
        last_id: AtomicU64::new(0),
        cancel: ctx.cancel.child_token(),
        tracker: ctx.tracker.clone(),
    });
    let closing = CancellationToken::new();
    tokio::join!(
        async {
            read_loop(stream, &conn, &closing).await;
            // When one side ends, so does the other, and every request task.
            conn.cancel.cancel();
        },
        async {
            write_loop(sink, rx, &conn.cancel).await;
            closing.cancel();
        },
    );
}

/// Reads and dispatches frames; after a close was queued or sent, drains.
async fn read_loop(mut stream: SplitStream<Ws>, conn: &Arc<Conn>, closing: &CancellationToken) {
    loop {
        let next = tokio::select! {
            biased;
            () = conn.cancel.cancelled() => return,
            () = closing.cancelled() => break,
            next = stream.next() => next,
        };
        let message = match next {
            None => return,
            Some(Ok(message)) => message,
            Some(Err(e)) => return read_failed(e, conn, closing).await,
        };
        let flow = match message {
            Message::Text(text) => match conn.dialect {
                WsDialect::JsonRpc => super::jsonrpc::on_text(conn, text.as_str()).await,
                WsDialect::Holon => super::holon::on_text(conn, text.as_str()).await,
            },
            Message::Binary(_) => {
                conn.close(1003, "binary frames are not supported").await;
                Flow::Close
            }
            // Pings are answered by tungstenite; a close is answered by it
            // too, after which the stream ends.
            Message::Ping(_) | Message::Pong(_) | Message::Close(_) | Message::Frame(_) => {
                Flow::Continue
            }
        };
        if flow == Flow::Close {
            break;
        }
    }
    drain(stream, &conn.cancel).await;
}

/// Waits for the peer's close after the server's own, ignoring frames.
async fn drain(mut stream: SplitStream<Ws>, cancel: &CancellationToken) {
    let rest = async { while let Some(Ok(_)) = stream.next().await {} };
    tokio::select! {
        biased;
        () = cancel.cancelled() => {}
        _ = tokio::time::timeout(CLOSE_GRACE, rest) => {}
    }
}

/// Ends a connection whose stream failed; an oversized message closes 1009,
/// after a -32600 error in the JSON-RPC dialect (`jsonrpc-ws.md` §4).
async fn read_failed(e: WsError, conn: &Conn, closing: &CancellationToken) {
    tracing::debug!(error = %e, "ws daemon: read failed");
    if let WsError::Capacity(_) = e {
        if conn.dialect == WsDialect::JsonRpc {
            conn.send(format!(
                "{{\"jsonrpc\":\"2.0\",\"error\":{{\"code\":-32600,\"message\":\"Invalid Request\",\
                 \"data\":\"Message size exceeds maximum of {MAX_MESSAGE} bytes\"}},\"id\":null}}"
            ))
            .await;
        }
        conn.close(1009, "message too large").await;
        // Give the writer its chance to send the close frame.
        tokio::select! {
            biased;
            () = conn.cancel.cancelled() => {}
            () = closing.cancelled() => {}
            () = tokio::time::sleep(CLOSE_GRACE) => {}
        }
    }
}

/// Writes queued frames until a close frame, a write failure, or
/// cancellation.
async fn write_loop(
    mut sink: SplitSink<Ws, Message>,
    mut rx: mpsc::Receiver<Out>,
    cancel: &CancellationToken,
) {
    loop {
        let next = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            next = rx.recv() => next,
        };
        let Some(out) = next else {
            return;
        };
        let (message, last) = match out {
            Out::Text(text) => (Message::text(text), false),
            Out::Close(code, reason) => (close_frame(code, &reason), true),
        };
        let written = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            written = sink.send(message) => written,
        };
        if let Err(e) = written {
            tracing::debug!(error = %e, "ws daemon: write failed");
            return;
        }
        if last {
            return;
        }
    }
}

/// A close frame; the reason is cut to the 123 bytes a frame can carry.
fn close_frame(code: u16, reason: &str) -> Message {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason[..end].into(),
    }))
}

// === impl Conn ===

impl Conn {
    /// Queues a frame; `false` once the connection is gone.
    pub(super) async fn send(&self, text: String) -> bool {
        self.outbox.send(Out::Text(text)).await.is_ok()
    }

    /// Queues a close frame; nothing queued after it is sent.
    pub(super) async fn close(&self, code: u16, reason: impl Into<Cow<'static, str>>) {
        // A connection already gone needs no close frame.
        let _ = self.outbox.send(Out::Close(code, reason.into())).await;
    }

    /// Hands out the next server request id, `s1`, `s2`, ….
    pub(super) fn next_server_id(&self) -> String {
        format!("s{}", self.last_id.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// Registers interest in the reply to the server request `id`.
    pub(super) fn expect_reply(&self, id: &str) -> oneshot::Receiver<Reply> {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().insert(id.to_owned(), tx);
        rx
    }

    /// Stops waiting for the reply to `id`.
    pub(super) fn forget(&self, id: &str) {
        self.waiting.lock().remove(id);
    }

    /// Hands a client's reply to whoever waits for `id`; unknown ids are
    /// ignored.
    pub(super) fn deliver(&self, id: &str, reply: Reply) {
        let waiter = self.waiting.lock().remove(id);
        match waiter {
            // The caller may have timed out just now; nothing to do then.
            Some(tx) => drop(tx.send(reply)),
            None => tracing::debug!(id, "ws daemon: ignoring reply to unknown id"),
        }
    }

    /// Runs `fut` in a tracked task that ends with the connection.
    pub(super) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let cancel = self.cancel.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                biased;
                () = cancel.cancelled() => {}
                () = fut => {}
            }
        });
    }
}
