//! Plain HTTP/1.1 GETs for the tests, on hyper's client: one connection per
//! request, bounded in time ([`STEP`]) and in body size ([`BODY_CAP`]).
//! hyper does not decompress, so a gzip body arrives as sent.
//!
//! Tests of the server's handling of raw or malformed bytes keep writing
//! their bytes by hand; this is for well-formed requests only.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;

use http::header::{HeaderMap, HeaderName, HeaderValue, HOST};
use http::{Request, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::STEP;

/// The most body bytes a reply may carry; more fails the test.
pub const BODY_CAP: usize = 16 * 1024 * 1024;

/// A response: status code, headers (names lower-case), the body as sent
/// (no decompression).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    /// The value of header `name`, when present and visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as UTF-8 text (a test failure when it is not).
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("UTF-8 body")
    }

    /// The headers as `(lower-case name, value)` pairs, in order.
    pub fn header_pairs(&self) -> Vec<(String, String)> {
        self.headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect()
    }
}

/// GETs `path` from `addr` with these extra headers (a `Host` among them
/// replaces the default, `addr`).
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    request(&addr.to_string(), path, headers).await
}

/// GETs an `http://host:port/path?query` URL with these extra headers.
pub async fn get_url(url: &str, headers: &[(&str, &str)]) -> Reply {
    let uri: Uri = url.parse().unwrap_or_else(|e| panic!("URL {url:?}: {e}"));
    assert_eq!(uri.scheme_str(), Some("http"), "an http:// URL: {url}");
    let authority = uri.authority().expect("URL with a host").as_str();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    request(authority, path, headers).await
}

/// [`get_url`] for synchronous callers: runs it on a current-thread tokio
/// runtime of its own (call it from a plain thread or `spawn_blocking`).
pub fn blocking_get_url(url: &str, headers: &[(&str, &str)]) -> Reply {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(get_url(url, headers))
}

async fn request(authority: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    tokio::time::timeout(STEP, exchange(authority, path, headers))
        .await
        .unwrap_or_else(|_| panic!("GET http://{authority}{path} timed out after {STEP:?}"))
}

async fn exchange(authority: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let tcp = TcpStream::connect(authority)
        .await
        .unwrap_or_else(|e| panic!("connect {authority}: {e}"));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("HTTP/1 handshake");
    // Ends when the reply is read and `sender` dropped, or the peer closes.
    tokio::spawn(conn);

    let mut req = Request::get(path)
        .body(Empty::<Bytes>::new())
        .unwrap_or_else(|e| panic!("request for {path:?}: {e}"));
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("header name");
        let value = HeaderValue::from_str(value).expect("header value");
        req.headers_mut().append(name, value);
    }
    if !req.headers().contains_key(HOST) {
        let host = HeaderValue::from_str(authority).expect("Host value");
        req.headers_mut().insert(HOST, host);
    }

    let response = sender
        .send_request(req)
        .await
        .unwrap_or_else(|e| panic!("GET http://{authority}{path}: {e}"));
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, BODY_CAP)
        .collect()
        .await
        .unwrap_or_else(|e| panic!("body of GET {path} (cap {BODY_CAP} bytes): {e}"))
        .to_bytes()
        .to_vec();
    Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    }
}

/// The text of a streamed `body` up to its end, bounded: a stream still
/// open after a minute fails the test (a stream that should have ended,
/// e.g. at its token's expiry, and did not).
pub async fn read_to_end(body: &mut hyper::body::Incoming) -> String {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    text.push_str(&String::from_utf8_lossy(data));
                }
            }
            Ok(None) => return text,
            Ok(Some(Err(e))) => panic!("the stream broke instead of ending: {e}\n{text}"),
            Err(_) => panic!("the stream is still open:\n{text}"),
        }
    }
}
