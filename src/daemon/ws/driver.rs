//! One WebSocket connection's two loops: a frame reader and a writer task
//! joined by the connection's bounded outbox ([`Conn`]).
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

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use super::conn::{Conn, Flow, Out};
use super::{holon, jsonrpc};
use super::{ServerCtx, WsDialect, MAX_MESSAGE};

type Ws = WebSocketStream<TcpStream>;

/// How long the reader waits for the peer's close after the server's.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Serves one upgraded connection until it closes, fails or is cancelled.
pub(super) async fn serve(ws: Ws, number: usize, ctx: &ServerCtx) {
    let (sink, stream) = ws.split();
    let (conn, rx) = Conn::new(
        number,
        ctx.dialect,
        ctx.cancel.child_token(),
        ctx.tracker.clone(),
    );
    let conn = Arc::new(conn);
    let closing = CancellationToken::new();
    tokio::join!(
        async {
            read_loop(stream, &conn, &closing).await;
            // When one side ends, so does the other, and every request task.
            conn.token().cancel();
        },
        async {
            write_loop(sink, rx, conn.token()).await;
            closing.cancel();
        },
    );
}

/// Reads and dispatches frames; after a close was queued or sent, drains.
async fn read_loop(mut stream: SplitStream<Ws>, conn: &Arc<Conn>, closing: &CancellationToken) {
    loop {
        let next = tokio::select! {
            biased;
            () = conn.token().cancelled() => return,
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
                WsDialect::JsonRpc => jsonrpc::on_text(conn, text.as_str()).await,
                WsDialect::Holon => holon::on_text(conn, text.as_str()).await,
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
    drain(stream, conn.token()).await;
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
            () = conn.token().cancelled() => {}
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
