//! Floor H: a bare hyper server that answers every JSON-RPC POST with a
//! reply echoing its params, `{"jsonrpc":"2.0","result":<params>,"id":<id>}`.
//!
//! `loadgen --http-echo-listen ADDR` (a hidden flag; loadgen re-executes
//! itself, as for floors B2 and C) serves HTTP/1.1 and HTTP/2 by prior
//! knowledge on one port with hyper-util's auto builder and hyper's
//! defaults, as switchyard's `jsonrpc-http` listener does. No gateway, no
//! upstream: what the client's own HTTP work, one trivial HTTP server and
//! a process boundary cost, the floor of the HTTP rows.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::TcpListener;

/// Largest request body read (the `large` requests are 16 KiB).
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The parts of a request that are echoed.
#[derive(Deserialize)]
struct Call<'a> {
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
}

/// Serves on `addr` until the process is killed.
pub(crate) async fn serve(addr: SocketAddr) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http2().timer(TokioTimer::new());
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            // EMFILE and friends: the client side will report its failures.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        // Best effort: a socket that refuses it still serves.
        let _ = tcp.set_nodelay(true);
        let builder = builder.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(echo);
            // A client that drops its connection ends it; it reports its
            // own failures.
            let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
        });
    }
}

/// Answers one request.
async fn echo(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.method() != Method::POST {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "POST only\n");
        response
            .headers_mut()
            .insert(ALLOW, hyper::header::HeaderValue::from_static("POST"));
        return Ok(response);
    }
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Ok(plain(StatusCode::PAYLOAD_TOO_LARGE, "body too large\n")),
    };
    let Ok(call) = serde_json::from_slice::<Call<'_>>(&body) else {
        return Ok(plain(StatusCode::BAD_REQUEST, "not a JSON-RPC request\n"));
    };
    let Some(id) = call.id else {
        // A notification: no reply.
        return Ok(plain(StatusCode::NO_CONTENT, ""));
    };
    let params = call.params.map_or("null", RawValue::get);
    let reply = format!(r#"{{"jsonrpc":"2.0","result":{params},"id":{}}}"#, id.get());
    let mut response = Response::new(Full::new(Bytes::from(reply)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response
}
