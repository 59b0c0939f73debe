//! Floors B and B2: a bare WebSocket echo server.
//!
//! It sends every text frame straight back, so a client measures only its
//! own WebSocket work plus one trivial server. Like switchyard's writer, it
//! coalesces the frames that are already waiting into one flush. Floor B
//! runs it inside the load generator ([`EchoServer`]); floor B2 runs it in
//! a process of its own (`loadgen --echo-listen ADDR`, a hidden flag:
//! [`serve`]), as a gateway is.

use std::io;
use std::net::SocketAddr;

use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn::{ws_config, Buffers};

/// Frames echoed per flush at most, so one busy client cannot starve the
/// flush of its own replies.
const MAX_COALESCED: usize = 64;

/// A running echo server; dropping it stops the server and every connection.
#[derive(Debug)]
pub(crate) struct EchoServer {
    addr: SocketAddr,
    stop: CancellationToken,
    accept: JoinHandle<()>,
}

// === impl EchoServer ===

impl EchoServer {
    /// Binds 127.0.0.1:0 and serves in the background.
    pub(crate) async fn start() -> io::Result<EchoServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let accept = tokio::spawn(accept_loop(listener, stop.clone()));
        Ok(EchoServer { addr, stop, accept })
    }

    /// The bound address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Floor B2: serves on `addr` until the process is killed.
pub(crate) async fn serve(addr: SocketAddr) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    accept_loop(listener, CancellationToken::new()).await;
    Ok(())
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.cancel();
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, stop: CancellationToken) {
    let conns = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, _)) => {
                let stop = stop.clone();
                conns.spawn(async move {
                    tokio::select! {
                        () = stop.cancelled() => {}
                        // Clients drop connections without a closing
                        // handshake; they report their own failures.
                        _ = echo(tcp) => {}
                    }
                });
            }
            // EMFILE and friends: the client side will report its failures.
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
    conns.close();
}

/// Echoes one connection's text frames until it ends.
async fn echo(tcp: TcpStream) -> io::Result<()> {
    tcp.set_nodelay(true)?;
    let cfg = Some(ws_config(Buffers::Default));
    let mut ws = tokio_tungstenite::accept_async_with_config(tcp, cfg)
        .await
        .map_err(io::Error::other)?;
    while let Some(first) = ws.next().await {
        let mut next = Some(first);
        let mut fed = 0;
        while let Some(frame) = next.take() {
            match frame.map_err(io::Error::other)? {
                Message::Text(t) => {
                    ws.feed(Message::Text(t)).await.map_err(io::Error::other)?;
                    fed += 1;
                }
                Message::Close(_) => return Ok(()),
                _ => {}
            }
            if fed < MAX_COALESCED {
                // Only what is already buffered: never wait here.
                next = ws.next().now_or_never().flatten();
            }
        }
        ws.flush().await.map_err(io::Error::other)?;
    }
    Ok(())
}
