//! `jsonrpc-http` upstreams: no persistent link, one POST per call through
//! a hyper-util client pool (keep-alive; HTTP/2 when the upstream offers
//! it by ALPN over `https://`, or on every connection with
//! `http2 = "prior-knowledge"`, h2c on cleartext: then calls multiplex on
//! one connection).
//!
//! HTTP matches each reply to its request, so no correlator is needed:
//! every POST carries a fresh integer id of the upstream's own (client
//! ids are rewritten, as on every other upstream), and the reply in the
//! response body settles that call whatever id it names. Calls are
//! admitted under the upstream's pending cap like pooled calls (see
//! `admission`), so at most `max_pending` requests, hence connections,
//! are open at once; `pool_size` idle connections are kept alive.
//!
//! A status other than 200/204, a failed or cut connection, or a body
//! over `max_response_bytes` fails the call with `unavailable`; a body
//! that is not a JSON-RPC reply with `internal`; the status is named in
//! the error's detail.

use std::borrow::Cow;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use bytestring::ByteString;
use http::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use http::{HeaderMap, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::config::{HttpTarget, UpstreamConfig};
use crate::dialect::link::{Event, Frame, Options};
use crate::dialect::UpstreamCodec;
use crate::envelope::Message;
use crate::envelope::Payload;
use crate::error::{ErrorKind, GatewayError, Side};

/// Idle keep-alive connections are closed after this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The HTTP side of one `jsonrpc-http` upstream.
pub(super) struct HttpUpstream {
    client: Client<Connector, Full<Bytes>>,
    uri: Uri,
    headers: HeaderMap,
    next_id: AtomicU64,
    codec: UpstreamCodec,
    max_request_bytes: usize,
    max_response_bytes: usize,
}

impl std::fmt::Debug for HttpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpUpstream").finish_non_exhaustive()
    }
}

impl HttpUpstream {
    /// The client of `target`; `tls` is the upstream's TLS setup
    /// (`https://` only).
    pub(super) fn new(
        cfg: &UpstreamConfig,
        target: &HttpTarget,
        tls: Option<&Result<Arc<rustls::ClientConfig>, super::tls::TlsSetupError>>,
    ) -> Self {
        let (unix, uri) = match target.url.strip_prefix("http+unix://") {
            Some(path) => (
                Some(PathBuf::from(path)),
                Uri::from_static("http://localhost/"),
            ),
            // Checked by the configuration.
            None => (None, target.url.parse().unwrap_or_default()),
        };
        let h2_only = target.http2_prior_knowledge;
        let tls = tls.and_then(|t| t.as_ref().ok()).map(|t| {
            let mut config = (**t).clone();
            config.alpn_protocols = match h2_only {
                true => vec![b"h2".to_vec()],
                false => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            };
            Arc::new(config)
        });
        let connector = Connector {
            unix: unix.map(Arc::new),
            tls,
            connect_timeout: cfg.connect_timeout,
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(cfg.pool_size.get())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            // HTTP/2 without asking: one connection carries every call
            // (the pool opens one at a time and shares it).
            .http2_only(h2_only)
            .build(connector);
        let mut headers = HeaderMap::new();
        for (name, value) in &target.headers {
            // Checked by the configuration.
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.append(n, v);
            }
        }
        let opts = Options {
            offer_subprotocol: false,
            fill_empty_params: cfg.fill_empty_params,
        };
        HttpUpstream {
            client,
            uri,
            headers,
            next_id: AtomicU64::new(1),
            codec: UpstreamCodec::new(cfg.dialect, opts),
            max_request_bytes: cfg.max_request_bytes,
            max_response_bytes: cfg.max_response_bytes,
        }
    }

    /// POSTs one request (`want_reply`) or notification and returns the
    /// reply (`None` for a notification). `traceparent` is sent when set.
    pub(super) async fn call(
        &self,
        method: &str,
        params: Option<&Payload>,
        want_reply: bool,
        traceparent: Option<String>,
    ) -> Result<Option<Message>, GatewayError> {
        let params = self.codec.params(params)?.map(Cow::into_owned);
        let msg = if want_reply {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            Message::Request {
                id: self.codec.wire_id(id),
                method: method.into(),
                params,
            }
        } else {
            Message::Notification {
                method: method.into(),
                params,
            }
        };
        let Frame::Text(body) = self.codec.encode(&msg)? else {
            return Err(GatewayError::new(ErrorKind::Internal));
        };
        let (status, body) = self.post(body, traceparent).await?;
        if !want_reply {
            return Ok(None);
        }
        let not_jsonrpc = || {
            GatewayError::with_detail(
                ErrorKind::Internal,
                format!("upstream answered HTTP {status} without a JSON-RPC reply"),
            )
            .on(Side::Upstream)
        };
        let text = ByteString::try_from(body).map_err(|_| not_jsonrpc())?;
        let mut event = None;
        self.codec.on_text(&text, |e| {
            event = Some(e);
            false
        });
        match event {
            Some(Event::Reply { reply, .. } | Event::NoId { reply, .. })
                if matches!(reply, Message::Response { .. } | Message::Error { .. }) =>
            {
                Ok(Some(reply))
            }
            Some(Event::Failed { error, .. }) => Err(error),
            _ => Err(not_jsonrpc()),
        }
    }

    /// POSTs `body` and returns the status (200 or 204) and the reply body.
    async fn post(
        &self,
        body: String,
        traceparent: Option<String>,
    ) -> Result<(u16, Bytes), GatewayError> {
        if body.len() > self.max_request_bytes {
            return Err(GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                "request larger than the upstream's max_request_bytes",
            ));
        }
        let mut req = http::Request::post(self.uri.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| GatewayError::with_detail(ErrorKind::Internal, e.to_string()))?;
        req.headers_mut().extend(self.headers.clone());
        if let Some(tp) = traceparent.and_then(|t| HeaderValue::from_str(&t).ok()) {
            req.headers_mut().insert("traceparent", tp);
        }
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| unavailable(format!("HTTP request to the upstream failed: {e}")))?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), self.max_response_bytes)
            .collect()
            .await
            .map_err(|e| {
                unavailable(format!(
                    "reading the upstream's HTTP {status} reply failed: {e}"
                ))
            })?
            .to_bytes();
        if status != 200 && status != 204 {
            return Err(unavailable(format!("upstream answered HTTP {status}")));
        }
        Ok((status, body))
    }

    /// POSTs a client batch as one JSON array (`calls[i].2`: a request).
    /// One entry per call: the reply for requests, `None` for
    /// notifications; a request the reply does not answer gets `internal`.
    pub(super) async fn batch(
        &self,
        calls: &[(&str, Option<&Payload>, bool)],
        traceparent: Option<String>,
    ) -> Vec<Option<Result<Message, GatewayError>>> {
        let mut out: Vec<Option<Result<Message, GatewayError>>> = Vec::with_capacity(calls.len());
        let mut msgs = Vec::with_capacity(calls.len());
        // Gateway id of each request sent → its index in `calls`.
        let mut sent = Vec::new();
        for (i, (method, params, request)) in calls.iter().enumerate() {
            let params = match self.codec.params(*params) {
                Ok(p) => p.map(Cow::into_owned),
                Err(e) => {
                    out.push(request.then_some(Err(e)));
                    continue;
                }
            };
            out.push(None);
            if *request {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                sent.push((id, i));
                msgs.push(Message::Request {
                    id: self.codec.wire_id(id),
                    method: (*method).into(),
                    params,
                });
            } else {
                msgs.push(Message::Notification {
                    method: (*method).into(),
                    params,
                });
            }
        }
        if msgs.is_empty() {
            return out;
        }
        let posted = match self.codec.encode_batch(&msgs) {
            Ok(body) => self.post(body, traceparent).await,
            Err(e) => Err(e),
        };
        let (status, body) = match posted {
            Ok(answer) => answer,
            Err(e) => {
                for (_, i) in &sent {
                    out[*i] = Some(Err(e.clone()));
                }
                return out;
            }
        };
        let text = ByteString::try_from(body).unwrap_or_default();
        let mut lone_error = None;
        self.codec.on_text(&text, |event| {
            match event {
                Event::Reply {
                    gid: Some(gid),
                    reply,
                } => {
                    if let Some((_, i)) = sent.iter().find(|(id, _)| *id == gid) {
                        out[*i] = Some(Ok(reply));
                    }
                }
                Event::NoId { reply, .. } => lone_error = Some(reply),
                Event::Failed {
                    gid: Some(gid),
                    error,
                    ..
                } => {
                    if let Some((_, i)) = sent.iter().find(|(id, _)| *id == gid) {
                        out[*i] = Some(Err(error));
                    }
                }
                _ => {}
            }
            true
        });
        for (_, i) in &sent {
            if out[*i].is_some() {
                continue;
            }
            // A batch-wide error (e.g. the upstream refused the batch)
            // answers every request it left unanswered.
            out[*i] = Some(match &lone_error {
                Some(Message::Error { error, .. }) => Ok(Message::Error {
                    id: None,
                    error: error.clone(),
                }),
                _ => Err(GatewayError::with_detail(
                    ErrorKind::Internal,
                    format!("upstream answered HTTP {status} without a reply to this call"),
                )
                .on(Side::Upstream)),
            });
        }
        out
    }
}

/// `unavailable`, caused by the upstream, with `detail`.
fn unavailable(detail: String) -> GatewayError {
    GatewayError::with_detail(ErrorKind::Unavailable, detail).on(Side::Upstream)
}

/// Dials TCP, TLS over TCP, or a Unix socket, for the client pool.
#[derive(Clone)]
struct Connector {
    /// `http+unix://`: every request goes to this socket.
    unix: Option<Arc<PathBuf>>,
    /// `https://`: rustls with ALPN `h2`, `http/1.1`.
    tls: Option<Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
}

impl tower::Service<Uri> for Connector {
    type Response = Conn;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Conn>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            tokio::time::timeout(this.connect_timeout, this.dial(uri))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timeout"))?
        })
    }
}

impl Connector {
    async fn dial(self, uri: Uri) -> io::Result<Conn> {
        if let Some(path) = &self.unix {
            let s = tokio::net::UnixStream::connect(path.as_path()).await?;
            return Ok(Conn::new(Box::new(s), false));
        }
        let host = uri
            .host()
            .ok_or_else(|| io::Error::other("URL without a host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        tcp.set_nodelay(true)?;
        if !https {
            return Ok(Conn::new(Box::new(tcp), false));
        }
        let tls = self
            .tls
            .ok_or_else(|| io::Error::other("TLS is not set up for this upstream"))?;
        let name = rustls::pki_types::ServerName::try_from(host).map_err(io::Error::other)?;
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await?;
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
        Ok(Conn::new(Box::new(stream), h2))
    }
}

/// Any byte stream the connector opens.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// One connection of the pool; `h2` when ALPN chose HTTP/2.
struct Conn {
    io: TokioIo<Box<dyn Io>>,
    h2: bool,
}

impl Conn {
    fn new(io: Box<dyn Io>, h2: bool) -> Self {
        Conn {
            io: TokioIo::new(io),
            h2,
        }
    }
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        let c = Connected::new();
        if self.h2 {
            c.negotiated_h2()
        } else {
            c
        }
    }
}

impl hyper::rt::Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
