//! Floor M: a minimal multiplexing gateway, the yardstick the performance
//! targets (docs/performance.md) are set against.
//!
//! What a straightforward correct design costs: WebSocket JSON-RPC clients
//! onto a pool of [`POOL`] shared NDJSON connections to one daemon, ids
//! rewritten both ways, every message fully validated by serde_json
//! (borrowed `RawValue`s), a mutex-guarded map of pending calls per
//! connection, unbounded channels between tasks, writes coalesced. Nothing
//! more: no limits, metrics, logs, batches, timeouts or reconnects.
//!
//! It is correct, and only that: each reply goes to the client that asked,
//! with the client's own id; a reply for an unknown id is dropped; a client
//! leaving drops its pending ids. A message that is not a JSON-RPC request
//! object gets one "invalid request" error with a null id.
//!
//! Tasks: per client, a reader (parses, rewrites the id, records the call,
//! hands the line to a connection) and a writer (coalesces the replies
//! queued for it into one flush); per upstream connection, a writer
//! (coalesces the lines queued for it into one `write_all`) and a reader
//! (parses each reply, takes its call out of the map, renders the reply
//! with the client's id and queues it to the client). Calls go round robin
//! over the connections, per client.
//!
//! The WebSocket is tokio-tungstenite's with the default `WebSocketConfig`
//! a new user takes: its read buffer is 128 KiB per connection, and each
//! read first zero-fills the part of it that the read may use.
//! `MINIMAL_READ_BUFFER=BYTES` in the environment sets another read size
//! (8192 is switchyard's), to compare the designs with the same buffer.
//!
//! One file, shared by two benches: `loadgen` runs it as a process of its
//! own (`--minimal-listen`, floor M) and `benches/allocs.rs` runs it on its
//! counted thread (the "minimal gateway" case). The channels are unbounded
//! on purpose (the issue's design; the reference has no limits): this is a
//! bench, not the product.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// Upstream connections shared by every client.
const POOL: usize = 2;

/// The reply to a message that is not a JSON-RPC request object.
const INVALID: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}"#;

/// A client's request; every field borrowed from the message.
#[derive(Deserialize)]
struct Request<'a> {
    jsonrpc: &'a str,
    #[serde(borrow)]
    method: &'a RawValue,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
}

/// The daemon's reply to one of our ids.
#[derive(Deserialize)]
struct Reply<'a> {
    id: Option<u64>,
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// A member that is there, even as `null`, is `Some` (serde maps a `null`
/// to `None` otherwise: `"result": null` is a result).
fn present<'de, 'a, D>(d: D) -> Result<Option<&'a RawValue>, D::Error>
where
    'de: 'a,
    D: Deserializer<'de>,
{
    <&'a RawValue>::deserialize(d).map(Some)
}

/// A call waiting for its reply at one upstream connection.
struct Pending {
    /// Which client asked.
    client: u64,
    /// Where its replies go.
    tx: UnboundedSender<String>,
    /// Its own id, as JSON text.
    id: Box<str>,
}

/// One shared upstream connection.
struct Link {
    /// The next id written to the daemon.
    next: AtomicU64,
    /// Calls written and not yet answered, by our id.
    pending: Mutex<HashMap<u64, Pending>>,
    /// Lines for the connection's writer.
    tx: UnboundedSender<String>,
}

/// Serves WebSocket clients on `listener`, forwarding to the NDJSON daemon
/// at `daemon`, until accepting fails.
pub(crate) async fn serve(listener: TcpListener, daemon: PathBuf) -> io::Result<()> {
    let mut config = WebSocketConfig::default();
    if let Some(bytes) = std::env::var("MINIMAL_READ_BUFFER")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config = config.read_buffer_size(bytes);
    }
    let mut links = Vec::with_capacity(POOL);
    for _ in 0..POOL {
        links.push(connect(&daemon).await?);
    }
    let links: Arc<[Arc<Link>]> = links.into();
    let mut clients = 0u64;
    loop {
        let (stream, _) = listener.accept().await?;
        // As any gateway does (switchyard too): replies go out at once,
        // not held back by Nagle's algorithm until the last one is acked.
        stream.set_nodelay(true)?;
        clients += 1;
        tokio::spawn(client(stream, clients, Arc::clone(&links), config));
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Opens one upstream connection with its reader and writer tasks.
async fn connect(daemon: &Path) -> io::Result<Arc<Link>> {
    let (read, write) = UnixStream::connect(daemon).await?.into_split();
    let (tx, rx) = unbounded_channel();
    let link = Arc::new(Link {
        next: AtomicU64::new(1),
        pending: Mutex::new(HashMap::new()),
        tx,
    });
    tokio::spawn(write_lines(write, rx));
    tokio::spawn(read_replies(read, Arc::clone(&link)));
    Ok(link)
}

/// Writes every line queued by then in one `write_all`.
async fn write_lines(mut w: OwnedWriteHalf, mut rx: UnboundedReceiver<String>) {
    let mut buf = Vec::new();
    while let Some(line) = rx.recv().await {
        buf.extend_from_slice(line.as_bytes());
        while let Ok(line) = rx.try_recv() {
            buf.extend_from_slice(line.as_bytes());
        }
        if w.write_all(&buf).await.is_err() {
            return;
        }
        buf.clear();
    }
}

/// Routes each reply line to the client whose call it answers.
async fn read_replies(read: OwnedReadHalf, link: Arc<Link>) {
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Ok(reply) = serde_json::from_slice::<Reply<'_>>(&line) else {
            continue;
        };
        let Some(id) = reply.id else {
            continue;
        };
        let (member, value) = match (reply.result, reply.error) {
            (Some(result), None) => ("result", result),
            (None, Some(error)) => ("error", error),
            _ => continue,
        };
        // An unknown id (its client left, or never ours): dropped.
        let Some(call) = lock(&link.pending).remove(&id) else {
            continue;
        };
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":{},"{member}":{}}}"#,
            call.id,
            value.get()
        );
        // The client may have left meanwhile: nothing to deliver to.
        let _ = call.tx.send(text);
    }
    // The daemon went away: its calls will not be answered.
    lock(&link.pending).clear();
}

/// One WebSocket client, until it leaves.
async fn client(stream: TcpStream, me: u64, links: Arc<[Arc<Link>]>, config: WebSocketConfig) {
    let Ok(ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await else {
        return;
    };
    let (sink, mut stream) = ws.split();
    let (tx, rx) = unbounded_channel();
    let writer = tokio::spawn(write_messages(sink, rx));
    let mut turn = 0usize;
    while let Some(Ok(msg)) = stream.next().await {
        let text = match msg {
            Message::Text(text) => text,
            Message::Close(_) => break,
            _ => continue,
        };
        let request = match serde_json::from_str::<Request<'_>>(&text) {
            Ok(r) if r.jsonrpc == "2.0" && r.method.get().starts_with('"') => r,
            _ => {
                let _ = tx.send(INVALID.to_owned());
                continue;
            }
        };
        let link = &links[turn % links.len()];
        turn = turn.wrapping_add(1);
        let params = request
            .params
            .map_or_else(String::new, |p| format!(r#","params":{}"#, p.get()));
        let line = match request.id {
            Some(id) => {
                let ours = link.next.fetch_add(1, Ordering::Relaxed);
                let call = Pending {
                    client: me,
                    tx: tx.clone(),
                    id: id.get().into(),
                };
                lock(&link.pending).insert(ours, call);
                format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{ours},\"method\":{}{params}}}\n",
                    request.method.get()
                )
            }
            // A notification: no reply expected.
            None => format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":{}{params}}}\n",
                request.method.get()
            ),
        };
        let _ = link.tx.send(line);
    }
    for link in links.iter() {
        lock(&link.pending).retain(|_, call| call.client != me);
    }
    drop(tx);
    let _ = writer.await;
}

/// Sends every reply queued by then, then flushes once.
async fn write_messages(
    mut sink: SplitSink<WebSocketStream<TcpStream>, Message>,
    mut rx: UnboundedReceiver<String>,
) {
    while let Some(text) = rx.recv().await {
        if sink.feed(Message::text(text)).await.is_err() {
            return;
        }
        while let Ok(text) = rx.try_recv() {
            if sink.feed(Message::text(text)).await.is_err() {
                return;
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
    let _ = sink.close().await;
}
