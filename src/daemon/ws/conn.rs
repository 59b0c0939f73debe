//! One WebSocket connection's shared state: its bounded outbox and the
//! bookkeeping of server-initiated `s<K>` requests, used by the dialects, the
//! methods and the connection's loops ([`super::driver`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::WsDialect;

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

/// Queued frames per connection; a full outbox makes the reader wait.
const OUTBOX: usize = 128;

// === impl Conn ===

impl Conn {
    /// A connection's state and the receiving end of its outbox, for the
    /// writer loop.
    pub(super) fn new(
        number: usize,
        dialect: WsDialect,
        cancel: CancellationToken,
        tracker: TaskTracker,
    ) -> (Self, mpsc::Receiver<Out>) {
        let (outbox, rx) = mpsc::channel(OUTBOX);
        let conn = Conn {
            number,
            dialect,
            outbox,
            waiting: Mutex::default(),
            last_id: AtomicU64::new(0),
            cancel,
            tracker,
        };
        (conn, rx)
    }

    /// Cancelled when the connection ends or the daemon stops; the loops
    /// cancel it when either of them ends.
    pub(super) fn token(&self) -> &CancellationToken {
        &self.cancel
    }

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
