//! `switchyard watch URL TOPIC…`: subscribes to topics on a switchyard
//! listener and prints one JSON line per event, until stopped or until the
//! server closes the connection (like `nats sub` or websocat).
//!
//! Every client dialect: JSON-RPC 2.0 over WebSocket (`ws://`) or NDJSON
//! (`unix://`), holon-rpc (whose event pushes are server requests, each
//! answered `{}`), and Sideband ([`sideband`]: `N` envelopes on `event`).
//! What is printed is the same in each: the event's params, minified,
//!
//! - `{"topic":…,"data":…}` for pub/sub (`rpc.subscribe`, or
//!   `rpc.subscribe.batch` for several topics);
//! - `{"subscription_id":…,"topic":…,"sequence_id":…,"timestamp":…,"data":…}`
//!   for a persistent subscription (`rpc.subscribe.persistent`, one topic),
//!   each delivery acknowledged (`rpc.acknowledge.persistent`) once its
//!   line is written, so what a crash or `| head` cut off comes again on
//!   the next watch with the same id.
//!
//! Bounds: one message of at most [`MAX_REPLY_BYTES`](super::error::MAX_REPLY_BYTES) at a time; nothing
//! is queued (a line is written before the next message is read, so a slow
//! stdout slows the reading, and the gateway's outbox does the rest).

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::args::{minify, parse_url, ws_only, Target};
use super::connect::ws_connect;
use super::error::ClientError;

mod conn;
mod sideband;

use self::conn::{unix, Conn, Read};

/// Which dialect `watch` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speak {
    /// JSON-RPC 2.0 (WebSocket text frames, or NDJSON on a Unix socket).
    JsonRpc,
    /// holon-rpc (WebSocket only).
    Holon,
    /// Sideband, JSON envelopes (WebSocket only).
    Sideband,
}

/// What to watch, and how.
#[derive(Debug, Clone)]
pub struct Watch {
    /// `ws://host:port/path`, or `unix:///path` (JSON-RPC only).
    pub url: String,
    /// The topics (patterns for pub/sub; one concrete topic when
    /// persistent).
    pub topics: Vec<String>,
    /// The persistent subscription id, if the subscription is persistent.
    pub persistent: Option<String>,
    /// The dialect.
    pub speak: Speak,
    /// Sent as `Authorization: Bearer` on the WebSocket upgrade.
    pub token: Option<String>,
    /// `wss://` only: trust only the CA certificates in this PEM file
    /// (else the system's roots).
    pub ca_file: Option<PathBuf>,
    /// How long the subscribe call may take (connecting included).
    pub timeout: Duration,
}

/// How a watch ended without an error of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The stop future completed (SIGINT or SIGTERM).
    Stopped,
    /// Nobody reads the output any more (`| head`).
    OutputClosed,
    /// The server closed the connection (the reason it gave, if any).
    ServerClosed(String),
}

/// Why a watch failed.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// Connecting, or the connection, failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The subscribe call was answered with this error reply.
    #[error("subscription refused: {0}")]
    Refused(String),
    /// `--persistent` takes exactly one topic; pub/sub at least one.
    #[error("{0}")]
    Usage(&'static str),
    /// Writing the output failed.
    #[error("cannot write to stdout: {0}")]
    Output(#[source] io::Error),
}

/// Where each event's line goes.
pub trait Output {
    /// Writes one line (the newline is the output's to add).
    ///
    /// # Errors
    ///
    /// The write error; a [`io::ErrorKind::BrokenPipe`] ends the watch
    /// as [`Ended::OutputClosed`].
    fn line(&mut self, text: &str) -> io::Result<()>;
}

impl<F: FnMut(&str) -> io::Result<()>> Output for F {
    fn line(&mut self, text: &str) -> io::Result<()> {
        self(text)
    }
}

/// Subscribes as `w` says and writes one line per event to `out` until
/// `stop` completes or the server closes the connection.
///
/// # Errors
///
/// [`WatchError`]: a bad argument, a failed connection, a refused
/// subscription, or an output that failed other than by closing.
pub async fn watch(
    w: &Watch,
    stop: impl Future<Output = ()>,
    out: &mut impl Output,
) -> Result<Ended, WatchError> {
    match (&w.persistent, w.topics.len()) {
        (_, 0) => return Err(WatchError::Usage("at least one TOPIC is required")),
        (Some(_), n) if n > 1 => {
            return Err(WatchError::Usage(
                "--persistent takes exactly one TOPIC (one subscription id, one topic)",
            ))
        }
        _ => {}
    }
    tokio::pin!(stop);
    let token = w.token.as_deref();
    let ca = w.ca_file.as_deref();
    let subscribe = subscribe_call(w);
    match w.speak {
        Speak::Sideband => {
            let url = ws_only(&w.url, ca)?;
            sideband::watch(url, token, w, subscribe, stop, out).await
        }
        Speak::Holon => {
            let url = ws_only(&w.url, ca)?;
            let ws = ws_connect(url, Some("holon-rpc"), token, ca);
            let conn = connect(w.timeout, ws, |ws| Conn::Ws(Box::new(ws))).await?;
            Session::new(conn, w, true).run(subscribe, stop, out).await
        }
        Speak::JsonRpc => {
            let conn = match parse_url(&w.url, ca)? {
                Target::Ws(url) => {
                    let ws = ws_connect(url, None, token, ca);
                    connect(w.timeout, ws, |ws| Conn::Ws(Box::new(ws))).await?
                }
                Target::Unix(path) => connect(w.timeout, unix(path), |c| c).await?,
                // A watch holds a connection open: not a POST.
                Target::Http(_) => return Err(ClientError::UnsupportedUrl(w.url.clone()).into()),
            };
            Session::new(conn, w, false).run(subscribe, stop, out).await
        }
    }
}

/// The subscribe call of `w`: method and params.
fn subscribe_call(w: &Watch) -> (&'static str, Value) {
    match (&w.persistent, w.topics.as_slice()) {
        (Some(id), [topic, ..]) => (
            "rpc.subscribe.persistent",
            json!({"subscription_id": id, "topic": topic}),
        ),
        (_, [topic]) => ("rpc.subscribe", json!({"topic": topic})),
        (_, topics) => ("rpc.subscribe.batch", json!({"topics": topics})),
    }
}

/// The acknowledgement of a persistent delivery whose params are
/// `params`, if it belongs to subscription `id`.
fn ack_params(params: &RawValue, id: &str) -> Option<Value> {
    #[derive(Deserialize)]
    struct Delivery<'a> {
        #[serde(borrow)]
        subscription_id: std::borrow::Cow<'a, str>,
        sequence_id: u64,
    }
    let d: Delivery<'_> = serde_json::from_str(params.get()).ok()?;
    (d.subscription_id == id).then(|| json!({"subscription_id": id, "sequence_id": d.sequence_id}))
}

/// Writes `text` as one line; `Ok(false)` when nobody reads any more.
fn emit(out: &mut impl Output, text: &str) -> Result<bool, WatchError> {
    match out.line(&minify(text)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(WatchError::Output(e)),
    }
}

/// Connects within `timeout`.
async fn connect<C, E: Into<ClientError>>(
    timeout: Duration,
    connecting: impl Future<Output = Result<C, E>>,
    wrap: impl FnOnce(C) -> Conn,
) -> Result<Conn, ClientError> {
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(c)) => Ok(wrap(c)),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(ClientError::Timeout(timeout)),
    }
}

/// A JSON-RPC or holon-rpc watch on one connection.
struct Session<'w> {
    conn: Conn,
    w: &'w Watch,
    /// holon-rpc: string ids, and every event push is answered.
    holon: bool,
    /// The id of the next call (the subscribe call is 1).
    next_id: u64,
    subscribed: bool,
}

/// A JSON-RPC or holon-rpc message, as much of it as the watch reads.
#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

impl<'w> Session<'w> {
    fn new(conn: Conn, w: &'w Watch, holon: bool) -> Self {
        Session {
            conn,
            w,
            holon,
            next_id: 1,
            subscribed: false,
        }
    }

    /// This dialect's form of call id `n`.
    fn id(&self, n: u64) -> Value {
        if self.holon {
            Value::from(n.to_string())
        } else {
            Value::from(n)
        }
    }

    async fn call(&mut self, method: &str, params: Value) -> Result<(), ClientError> {
        let id = self.id(self.next_id);
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.conn.send(request.to_string()).await
    }

    async fn run(
        mut self,
        (method, params): (&str, Value),
        mut stop: std::pin::Pin<&mut impl Future<Output = ()>>,
        out: &mut impl Output,
    ) -> Result<Ended, WatchError> {
        self.call(method, params).await?;
        let deadline = tokio::time::Instant::now() + self.w.timeout;
        loop {
            let read = tokio::select! {
                read = self.conn.recv() => read?,
                () = stop.as_mut() => {
                    self.conn.close().await;
                    return Ok(Ended::Stopped);
                }
                () = tokio::time::sleep_until(deadline), if !self.subscribed => {
                    return Err(ClientError::Timeout(self.w.timeout).into());
                }
            };
            let text = match read {
                Read::Text(text) => text,
                Read::Closed(why) => return Ok(Ended::ServerClosed(why)),
            };
            if !self.on_message(&text, out).await? {
                self.conn.close().await;
                return Ok(Ended::OutputClosed);
            }
        }
    }

    /// Handles one message; `Ok(false)` when the output is closed.
    async fn on_message(&mut self, text: &str, out: &mut impl Output) -> Result<bool, WatchError> {
        let Ok(msg) = serde_json::from_str::<Incoming<'_>>(text) else {
            return Ok(true);
        };
        let Some(method) = msg.method.as_deref() else {
            // A reply: to the subscribe call (id 1), or to an ack.
            let first = msg.id.as_ref() == Some(&self.id(1));
            match (first, msg.error) {
                (true, Some(_)) => return Err(WatchError::Refused(text.to_owned())),
                (true, None) => self.subscribed = true,
                (false, Some(_)) => eprintln!("switchyard watch: acknowledgement refused: {text}"),
                (false, None) => {}
            }
            return Ok(true);
        };
        let persistent = method == "rpc.notification.persistent";
        let (true, Some(params)) = (persistent || method == "rpc.notification", msg.params) else {
            return Ok(true);
        };
        if !emit(out, params.get())? {
            return Ok(false);
        }
        if let (true, Some(id)) = (self.holon, msg.id) {
            // The push is a server request: switchyard consumes the reply.
            let reply = json!({"jsonrpc": "2.0", "id": id, "result": {}});
            self.conn.send(reply.to_string()).await?;
        }
        let ack = match (persistent, &self.w.persistent) {
            (true, Some(id)) => ack_params(params, id),
            _ => None,
        };
        if let Some(ack) = ack {
            self.call("rpc.acknowledge.persistent", ack).await?;
        }
        Ok(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use super::*;

    fn w(topics: &[&str], persistent: Option<&str>) -> Watch {
        Watch {
            url: "ws://127.0.0.1:1/".into(),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            persistent: persistent.map(str::to_owned),
            speak: Speak::JsonRpc,
            token: None,
            ca_file: None,
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn one_topic_several_or_a_persistent_subscription() {
        let (m, p) = subscribe_call(&w(&["a.b"], None));
        assert_eq!((m, p), ("rpc.subscribe", json!({"topic": "a.b"})));
        let (m, p) = subscribe_call(&w(&["a.*", "b.>"], None));
        assert_eq!(
            (m, p),
            ("rpc.subscribe.batch", json!({"topics": ["a.*", "b.>"]}))
        );
        let (m, p) = subscribe_call(&w(&["a.b"], Some("p1")));
        assert_eq!(
            (m, p),
            (
                "rpc.subscribe.persistent",
                json!({"subscription_id": "p1", "topic": "a.b"})
            )
        );
    }

    #[test]
    fn only_our_own_deliveries_are_acknowledged() {
        let ours: Box<RawValue> = serde_json::from_str(
            r#"{"subscription_id":"p1","topic":"t","sequence_id":7,"timestamp":"x","data":1}"#,
        )
        .unwrap();
        assert_eq!(
            ack_params(&ours, "p1"),
            Some(json!({"subscription_id": "p1", "sequence_id": 7}))
        );
        assert_eq!(ack_params(&ours, "p2"), None);
    }

    #[tokio::test]
    async fn arguments_are_checked_before_connecting() {
        let mut sink = |_: &str| Ok(());
        let none = watch(&w(&[], None), std::future::pending(), &mut sink).await;
        assert!(matches!(none, Err(WatchError::Usage(_))));
        let two = watch(
            &w(&["a", "b"], Some("p")),
            std::future::pending(),
            &mut sink,
        )
        .await;
        assert!(matches!(two, Err(WatchError::Usage(_))));
    }
}
