//! The TCP connections of a WebSocket listener address, up to the upgrade:
//! connection caps, the TLS handshake, HTTP/1.1 with a header-read timeout.
//!
//! Unfinished requests cost a socket each, so they are bounded in number
//! and in time:
//!
//! - From the moment it is accepted until its upgrade, a connection holds
//!   a [`Place`] among the address's *pending* connections, capped like the
//!   listener's connections (`max_connections`, `max_connections_per_ip`).
//!   Over a cap it is closed at once, counted as `limit`. The upgrade
//!   handler gives the place back before the 101 goes out, and the session
//!   takes one among the listener's open connections, where a refusal is
//!   the readable close 1008. So a client holds at most its cap of
//!   unfinished requests plus its cap of sessions.
//! - A connection has `header_read_timeout_ms` for the TLS handshake, and
//!   as long again for each request head, including while idle between
//!   requests (hyper's `header_read_timeout`). Then it is closed, counted
//!   as `handshake`.
//! - An HTTP/2 connection (addresses serving `jsonrpc-http`) announces
//!   `SETTINGS_MAX_CONCURRENT_STREAMS` = the largest `max_in_flight` of
//!   the address's `jsonrpc-http` listeners: each stream is one `POST`,
//!   one request (or batch) in flight, so the connection carries as many
//!   at once as a WebSocket connection of that listener. A client at the
//!   cap waits for a stream to end; one that opens more anyway has them
//!   refused (`REFUSED_STREAM`) by hyper.
//!
//! Each request goes to the address's handler ([`App`]) with the peer
//! address and the connection's [`Place`], with no router in between (a
//! `jsonrpc-http` request costs no header copy, boxed route or extractor).
//! On shutdown the listener stops accepting and closes its HTTP
//! connections (one still receiving a request gets [`SHUTDOWN_PATIENCE`]);
//! upgraded connections belong to the session tracker from then on.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder as AutoBuilder;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::tls::Acceptor;
use super::{Listener, Serve};
use crate::limits::conns::{ConnLimits, ConnPermit};
use crate::telemetry::metrics::{Metrics, RejectReason};

/// Pause after an accept error (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// On shutdown, how long a connection may take to finish the request it
/// is in (an upgrade is answered at once), e.g. a head still arriving.
const SHUTDOWN_PATIENCE: Duration = Duration::from_secs(1);

/// How the connections of one address are accepted, from the listeners
/// served on it.
#[derive(Debug)]
pub(crate) struct Http {
    /// Caps on pending (not yet upgraded) connections.
    pending: ConnLimits,
    /// Time for the TLS handshake, and for each request head.
    header_read_timeout: Duration,
    /// The listener refusals are counted against (the first on the address).
    listener: String,
    /// The address serves a `jsonrpc-http` listener: connections may speak
    /// HTTP/2 (h2c by prior knowledge, or ALPN `h2`) as well as HTTP/1.1.
    /// A `jsonrpc-http` connection never upgrades, so it keeps its
    /// pending place (the connection caps) for its whole life.
    http2: bool,
    /// HTTP/2 streams open at once on one connection (see the module
    /// docs): the largest `max_in_flight` of the `jsonrpc-http` listeners.
    max_streams: u32,
    metrics: Metrics,
}

/// A connection's place among the pending ones, shared with its requests
/// (as an extension) so that the upgrade handler can give it back; and,
/// on an address serving `jsonrpc-http`, the switch that closes the
/// connection (an event stream whose client stopped reading).
#[derive(Debug, Clone)]
pub(crate) struct Place(Arc<Mutex<Option<ConnPermit>>>, CancellationToken);

// === impl Http ===

impl Http {
    /// The caps and timeout of an address serving `listeners` (at least
    /// one). Caps add up over the listeners (the per-IP one is the
    /// largest); any unlimited listener makes that cap unlimited. The
    /// smallest timeout wins.
    pub(crate) fn of(listeners: &[Arc<Listener>]) -> Option<Http> {
        let first = listeners.first()?;
        let protection = listeners.iter().map(|l| &l.cfg().protection);
        let unlimited_total = protection.clone().any(|p| p.max_connections == 0);
        let unlimited_per_ip = protection.clone().any(|p| p.max_connections_per_ip == 0);
        let total = protection
            .clone()
            .fold(0usize, |sum, p| sum.saturating_add(p.max_connections))
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        let per_ip = protection
            .clone()
            .map(|p| p.max_connections_per_ip)
            .max()
            .unwrap_or(0);
        let header_read_timeout = protection
            .map(|p| p.header_read_timeout)
            .min()
            .unwrap_or(Duration::from_secs(10));
        Some(Http {
            pending: ConnLimits::new(
                if unlimited_total { 0 } else { total },
                if unlimited_per_ip { 0 } else { per_ip },
            ),
            header_read_timeout,
            listener: first.name().to_owned(),
            metrics: first.metrics().clone(),
            http2: listeners.iter().any(|l| l.dialect().is_http()),
            max_streams: max_streams(listeners),
        })
    }

    fn refused(&self, reason: RejectReason) {
        self.metrics
            .count_rejected_connection(&self.listener, reason);
    }
}

/// The largest `max_in_flight` of the `jsonrpc-http` listeners among
/// `listeners` (at least 1; a WebSocket listener's streams never carry
/// requests).
fn max_streams(listeners: &[Arc<Listener>]) -> u32 {
    let most = listeners
        .iter()
        .filter(|l| l.dialect().is_http())
        .map(|l| l.cfg().max_in_flight)
        .max()
        .unwrap_or(1)
        .max(1);
    u32::try_from(most).unwrap_or(u32::MAX)
}

// === impl Place ===

impl Place {
    /// Gives the place back (the connection is upgrading, or ended).
    pub(crate) fn release(&self) {
        self.0.lock().take();
    }

    /// Closes the connection (addresses serving `jsonrpc-http` only).
    pub(crate) fn kill(&self) {
        self.1.cancel();
    }
}

/// What answers each request of an address: the request, its peer and
/// its connection's place.
pub(crate) trait App: Clone + Send + Sync + 'static {
    /// The answer being made.
    type Answer: Future<Output = Response> + Send + 'static;

    /// Starts answering `req`.
    fn call(&self, req: Request<Incoming>, peer: SocketAddr, place: Option<Place>) -> Self::Answer;
}

impl<F, A> App for F
where
    F: Fn(Request<Incoming>, SocketAddr, Option<Place>) -> A + Clone + Send + Sync + 'static,
    A: Future<Output = Response> + Send + 'static,
{
    type Answer = A;

    fn call(&self, req: Request<Incoming>, peer: SocketAddr, place: Option<Place>) -> A {
        self(req, peer, place)
    }
}

/// Serves `app` on `listener` (over TLS with `tls`) until shutdown.
pub(crate) async fn serve<A: App>(
    listener: TcpListener,
    app: A,
    tls: Option<Acceptor>,
    http: Http,
    ctx: &Serve,
) -> io::Result<()> {
    let http = Arc::new(http);
    let conns = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = ctx.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Some(permit) = http.pending.admit(peer.ip()) else {
            // Closed at once: dropping the socket.
            http.refused(RejectReason::Limit);
            tracing::debug!(%peer, "connection refused: too many unfinished requests");
            continue;
        };
        // Replies are small and latency-bound: no Nagle delay.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let place = Place(Arc::new(Mutex::new(Some(permit))), CancellationToken::new());
        let conn = Conn {
            peer,
            app: app.clone(),
            place,
            http: http.clone(),
            ctx: ctx.clone(),
        };
        conns.spawn(conn.run(tcp, tls.clone()));
    }
    drop(listener);
    conns.close();
    conns.wait().await;
    Ok(())
}

/// One accepted connection until it ends or upgrades.
struct Conn<A> {
    peer: SocketAddr,
    app: A,
    place: Place,
    http: Arc<Http>,
    ctx: Serve,
}

impl<A: App> Conn<A> {
    async fn run(self, tcp: TcpStream, tls: Option<Acceptor>) {
        match tls {
            None => self.http(tcp).await,
            Some(acceptor) => {
                let handshake =
                    tokio::time::timeout(self.http.header_read_timeout, acceptor.accept(tcp));
                let stream = tokio::select! {
                    () = self.ctx.shutdown.cancelled() => return,
                    done = handshake => match done {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            self.http.refused(RejectReason::Handshake);
                            tracing::debug!(peer = %self.peer, "TLS handshake timed out");
                            return;
                        }
                    },
                };
                self.http(stream).await;
            }
        }
    }

    /// HTTP/1.1 with upgrades until the connection ends, upgrades or
    /// shutdown closes it.
    async fn http<S>(self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (peer, app, place) = (self.peer, self.app.clone(), self.place.clone());
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let answer = app.call(req, peer, Some(place.clone()));
            async move { Ok::<_, Infallible>(answer.await) }
        });
        if self.http.http2 {
            return self.http_or_h2(stream, service).await;
        }
        let mut conn = pin!(hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.http.header_read_timeout)
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades());
        let result = tokio::select! {
            result = conn.as_mut() => result,
            () = self.ctx.shutdown.cancelled() => {
                conn.as_mut().graceful_shutdown();
                // Past the patience the socket is simply closed.
                tokio::time::timeout(SHUTDOWN_PATIENCE, conn).await.unwrap_or(Ok(()))
            }
        };
        self.place.release();
        match result {
            Err(e) if e.is_timeout() => {
                self.http.refused(RejectReason::Handshake);
                tracing::debug!(%peer, "request head not received in time");
            }
            Err(e) => tracing::debug!(%peer, error = %e, "HTTP connection ended with an error"),
            Ok(()) => {}
        }
    }
}

impl<A: App> Conn<A> {
    /// HTTP/1.1 (with upgrades) or HTTP/2, told apart by the HTTP/2
    /// preface, on an address that serves a `jsonrpc-http` listener; as
    /// [`Conn::http`] otherwise.
    async fn http_or_h2<S, F>(self, stream: S, service: F)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        F: hyper::service::Service<Request<Incoming>, Response = axum::response::Response>
            + Clone
            + Send
            + 'static,
        F::Future: Send + 'static,
        F::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let mut builder = AutoBuilder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.http.header_read_timeout);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.http.max_streams);
        // The builder reads the HTTP/2 preface with no timeout of its own:
        // the first request must start within the header-read timeout, as
        // on HTTP/1.1 (hyper's own timeout covers the heads after it).
        let started = CancellationToken::new();
        let service = {
            let started = started.clone();
            hyper::service::service_fn(move |req| {
                started.cancel();
                hyper::service::Service::call(&service, req)
            })
        };
        let mut conn = pin!(builder.serve_connection_with_upgrades(TokioIo::new(stream), service));
        let silent = first_request(&started, self.http.header_read_timeout);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            () = self.place.1.cancelled() => Ok(()),
            () = silent => {
                self.http.refused(RejectReason::Handshake);
                tracing::debug!(peer = %self.peer, "no request in time");
                Ok(())
            }
            () = self.ctx.shutdown.cancelled() => {
                conn.as_mut().graceful_shutdown();
                tokio::time::timeout(SHUTDOWN_PATIENCE, conn).await.unwrap_or(Ok(()))
            }
        };
        self.place.release();
        if let Err(e) = result {
            let timeout = e
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_timeout);
            if timeout {
                self.http.refused(RejectReason::Handshake);
            }
            tracing::debug!(peer = %self.peer, error = %e, "HTTP connection ended with an error");
        }
    }
}

/// Returns once `within` has passed without the first request having
/// started; never returns otherwise.
async fn first_request(started: &CancellationToken, within: Duration) {
    if tokio::time::timeout(within, started.cancelled())
        .await
        .is_ok()
    {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::Config;
    use crate::router::Router;

    /// Two listeners on one address: `a` (JSON-RPC on `/a`) and `b`
    /// (holon-rpc on `/b`), each with extra keys.
    pub(in crate::transport) fn listeners(extra_a: &str, extra_b: &str) -> Vec<Arc<Listener>> {
        let toml = format!(
            "[listeners.a]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/a\"\n{extra_a}\n\
             [listeners.b]\ndialect = \"holon-rpc\"\naddress = \"127.0.0.1:0\"\npath = \"/b\"\n{extra_b}\n"
        );
        let cfg = Config::from_toml(&toml).expect("config");
        let metrics = Metrics::new().expect("metrics");
        cfg.listeners
            .iter()
            .map(|l| {
                let broker = Arc::new(crate::pubsub::Broker::new(1));
                let router = Router::new(l, &HashMap::new(), broker, metrics.clone());
                Arc::new(Listener::new(l.clone(), Arc::new(router), metrics.clone()))
            })
            .collect()
    }

    #[test]
    fn caps_and_timeout_of_an_address_come_from_its_listeners() {
        let both = listeners(
            "max_connections = 2\nmax_connections_per_ip = 1\nheader_read_timeout_ms = 700",
            "max_connections = 3\nmax_connections_per_ip = 2\nheader_read_timeout_ms = 900",
        );
        let http = Http::of(&both).expect("http");
        assert_eq!(http.header_read_timeout, Duration::from_millis(700));
        assert_eq!(http.listener, "a");
        let ip = std::net::IpAddr::from([127, 0, 0, 1]);
        let held: Vec<_> = (0..2).map_while(|_| http.pending.admit(ip)).collect();
        assert_eq!(held.len(), 2, "per IP: the largest of 1 and 2");
        assert!(http.pending.admit(ip).is_none());
        let others: Vec<_> = (2..10u8)
            .map_while(|i| http.pending.admit([127, 0, 0, i].into()))
            .collect();
        assert_eq!(others.len(), 3, "total: 2 + 3");
        // One unlimited listener makes the address unlimited.
        let open = Http::of(&listeners("max_connections_per_ip = 1", "")).expect("http");
        let many: Vec<_> = (0..50).map_while(|_| open.pending.admit(ip)).collect();
        assert_eq!(many.len(), 50);
        assert!(Http::of(&[]).is_none());
    }
}
