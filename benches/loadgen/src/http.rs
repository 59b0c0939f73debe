//! The HTTP client of the HTTP rows: JSON-RPC requests POSTed on one
//! hyper connection, HTTP/1.1 (keep-alive, one request at a time) or
//! HTTP/2 (h2c by prior knowledge, many streams at once).
//!
//! It has the same two halves as the other wires, so the drive code is
//! shared: [`HttpTx`] sends each request as soon as the connection takes it
//! and hands the response future to [`HttpRx`], which yields the response
//! bodies as they complete. A status other than 200 ends the connection
//! with an error (the run counts it).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::conn::Received;
use super::wire::HttpVersion;

/// A response on its way: its body, or why there is none.
type Reply = Pin<Box<dyn Future<Output = io::Result<Received>> + Send>>;

/// The sending half of an HTTP connection.
pub(crate) struct HttpTx {
    send: Sender,
    uri: Uri,
    host: String,
    /// To the reader. Unbounded, but never holds more than the requests in
    /// flight on this connection, which the writer's slots bound
    /// (`drive::Flight`).
    replies: mpsc::UnboundedSender<Reply>,
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// The receiving half: the responses of the requests sent, as they come.
pub(crate) struct HttpRx {
    sent: mpsc::UnboundedReceiver<Reply>,
    waiting: FuturesUnordered<Reply>,
    /// False once the sending half is gone.
    open: bool,
}

impl std::fmt::Debug for HttpTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTx").field("uri", &self.uri).finish()
    }
}

impl std::fmt::Debug for HttpRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpRx")
            .field("waiting", &self.waiting.len())
            .finish()
    }
}

/// Opens one connection to `addr` for `POST url`.
pub(crate) async fn connect(
    addr: SocketAddr,
    url: &str,
    version: HttpVersion,
) -> io::Result<(HttpTx, HttpRx)> {
    let uri: Uri = url.parse().map_err(io::Error::other)?;
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let io = TokioIo::new(tcp);
    // The connection tasks end when both halves are dropped (or the server
    // closes); a failure shows as an error on the pending responses.
    let send = match version {
        HttpVersion::H1 => {
            let (send, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(io::Error::other)?;
            tokio::spawn(conn);
            Sender::H1(send)
        }
        HttpVersion::H2 => {
            let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(io::Error::other)?;
            tokio::spawn(conn);
            Sender::H2(send)
        }
    };
    let (replies, sent) = mpsc::unbounded_channel();
    let tx = HttpTx {
        send,
        uri,
        host: addr.to_string(),
        replies,
    };
    let rx = HttpRx {
        sent,
        waiting: FuturesUnordered::new(),
        open: true,
    };
    Ok((tx, rx))
}

// === impl HttpTx ===

impl HttpTx {
    /// Sends one JSON-RPC request as soon as the connection takes it
    /// (HTTP/1.1: the previous response is in; HTTP/2: a stream is free).
    pub(crate) async fn send(&mut self, body: String) -> io::Result<()> {
        let request = Request::post(self.uri.clone())
            .header(HOST, self.host.as_str())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(io::Error::other)?;
        let response: Reply = match &mut self.send {
            Sender::H1(send) => {
                send.ready().await.map_err(io::Error::other)?;
                Box::pin(read(send.send_request(request)))
            }
            Sender::H2(send) => {
                send.ready().await.map_err(io::Error::other)?;
                Box::pin(read(send.send_request(request)))
            }
        };
        self.replies
            .send(response)
            .map_err(|_| io::Error::other("the reading half is gone"))
    }
}

/// The body of a `200` response.
async fn read(
    response: impl Future<Output = hyper::Result<hyper::Response<hyper::body::Incoming>>>,
) -> io::Result<Received> {
    let response = response.await.map_err(io::Error::other)?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(io::Error::other)?
        .to_bytes();
    if status != StatusCode::OK {
        return Err(io::Error::other(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )));
    }
    Ok(Received::Body(body))
}

// === impl HttpRx ===

impl HttpRx {
    /// The next response body, in completion order; `None` when the
    /// sending half is gone and every response is in. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Option<io::Result<Received>> {
        loop {
            tokio::select! {
                biased;
                Some(reply) = self.waiting.next(), if !self.waiting.is_empty() => return Some(reply),
                sent = self.sent.recv(), if self.open => match sent {
                    Some(reply) => self.waiting.push(reply),
                    None => self.open = false,
                },
                else => return None,
            }
        }
    }
}
