//! One address's HTTP server: every listener bound to the address, each on
//! its own path ([`Paths`]). A request for a `jsonrpc-http` listener's path
//! is answered by [`super::http`]; any other path names a WebSocket
//! listener, whose upgrade is [`super::ws`]'s; an unknown path gets 404.
//! Caps and timeouts before a request is read are [`super::accept`]'s.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming as RequestBody;
use tokio::net::TcpListener;

use super::accept::Place;
use super::paths::{Entry, Paths};
use super::{Listener, Serve};
use crate::limits::rate::PRUNE_INTERVAL;

/// Serves every WebSocket listener bound to `listener` until shutdown,
/// each on its path in `paths` (a reload may change them; an unknown path
/// gets 404). With `tls`, every connection is `wss://` (see
/// [`super::tls`]); caps and timeouts before the upgrade are in
/// [`super::accept`], from the listeners served at the start. Also prunes
/// each listener's per-IP rate state.
pub(crate) async fn serve(
    listener: TcpListener,
    paths: Arc<Paths>,
    ctx: Serve,
    tls: Option<super::tls::Acceptor>,
) -> std::io::Result<()> {
    let served: Vec<Arc<Listener>> = paths.cells().iter().map(|c| c.load()).collect();
    let Some(http) = super::accept::Http::of(&served) else {
        return Ok(());
    };
    for l in &served {
        l.rate().start_pruning(PRUNE_INTERVAL, ctx.shutdown.clone());
    }
    drop(served);
    let app = move |req: Request<RequestBody>, peer: SocketAddr, place: Option<Place>| {
        route(paths.clone(), req, peer, place)
    };
    super::accept::serve(listener, app, tls, http, &ctx).await
}

/// One request to the address: the listener its path names answers it
/// (`jsonrpc-http`, see [`super::http`]), or it is a WebSocket upgrade;
/// an unknown path gets 404. Called by [`super::accept`] directly, with
/// no router in between: the request's parts are moved, never cloned.
async fn route(
    paths: Arc<Paths>,
    req: Request<RequestBody>,
    peer: SocketAddr,
    place: Option<Place>,
) -> Response {
    if req.method() == Method::HEAD {
        return without_body(answer(paths, req, peer, place).await);
    }
    answer(paths, req, peer, place).await
}

/// The answer to a `HEAD`: its head, with the length the body would have
/// had, and no body (HTTP/2 does not drop it by itself).
fn without_body(mut res: Response) -> Response {
    use axum::body::HttpBody as _;
    use axum::http::{header::CONTENT_LENGTH, HeaderValue};
    if !res.headers().contains_key(CONTENT_LENGTH) {
        if let Some(len) = res.body().size_hint().exact() {
            res.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(len));
        }
    }
    *res.body_mut() = axum::body::Body::empty();
    res
}

/// [`route`]'s answer, body included.
async fn answer(
    paths: Arc<Paths>,
    req: Request<RequestBody>,
    peer: SocketAddr,
    place: Option<Place>,
) -> Response {
    let entry = paths
        .get(req.uri().path())
        .or_else(|| super::http::events_entry(&paths, req.uri().path()));
    let Some(Entry { cell, ctx }) = entry else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let (parts, body) = req.into_parts();
    if cell.load().dialect().is_http() {
        let entry = Entry { cell, ctx };
        let (method, headers, uri) = (parts.method, parts.headers, parts.uri);
        let body = axum::body::Body::new(body);
        return super::http::handle(entry, method, headers, uri, peer, body, place).await;
    }
    super::ws::answer(parts, Entry { cell, ctx }, peer, place).await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;
    use tokio_util::task::TaskTracker;

    use super::*;
    use crate::transport::accept::tests::listeners;
    use crate::transport::ListenerCell;

    #[tokio::test]
    async fn the_listener_prunes_its_per_ip_rate_state() {
        let served = listeners("ip_rate_per_second = 5", "");
        let ctx = Serve {
            shutdown: CancellationToken::new(),
            grace_over: CancellationToken::new(),
            sessions: TaskTracker::new(),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        assert!(!served[0].rate().is_pruning());
        let paths = Arc::new(Paths::default());
        for (listener, path) in served.iter().zip(["/a", "/b"]) {
            let cell = ListenerCell::new(listener.clone());
            let entry = Entry {
                cell,
                ctx: ctx.clone(),
            };
            paths.insert(path.to_owned(), entry);
        }
        let server = tokio::spawn(serve(listener, paths, ctx.clone(), None));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !served[0].rate().is_pruning() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(served[0].rate().is_pruning());
        ctx.shutdown.cancel();
        let stopped = tokio::time::timeout(Duration::from_secs(20), server).await;
        assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    }
}
