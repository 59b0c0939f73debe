//! `switchyard call http://…`: one JSON-RPC request in a `POST` to a
//! `jsonrpc-http` listener, through hyper's client (HTTP/1.1, `http://`
//! only), the reply body returned exactly as received.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::StatusCode;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::error::{ClientError, MAX_REPLY_BYTES};

/// POSTs `request` to `url` (with `token` as a bearer token) and returns
/// the reply body; a status other than `200` is an error carrying it.
pub(super) async fn http_exchange(
    url: &str,
    token: Option<&str>,
    request: String,
) -> Result<String, ClientError> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|_| ClientError::UnsupportedUrl(url.to_owned()))?;
    let mut builder = hyper::Request::post(uri).header(CONTENT_TYPE, "application/json");
    if let Some(token) = token {
        let value = hyper::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ClientError::InvalidToken)?;
        builder = builder.header(AUTHORIZATION, value);
    }
    let req = builder
        .body(Full::new(Bytes::from(request)))
        .map_err(|_| ClientError::UnsupportedUrl(url.to_owned()))?;
    let client = Client::builder(TokioExecutor::new()).build_http();
    let response = client
        .request(req)
        .await
        .map_err(|e| ClientError::Io(std::io::Error::other(e)))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_REPLY_BYTES)
        .collect()
        .await
        .map_err(|_| ClientError::ReplyTooLarge)?
        .to_bytes();
    let body = String::from_utf8_lossy(&body).into_owned();
    if status == StatusCode::OK {
        return Ok(body);
    }
    Err(ClientError::Http {
        status: status.as_u16(),
        body: body.trim().to_owned(),
    })
}
