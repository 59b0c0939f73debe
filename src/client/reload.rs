//! `switchyard reload --admin URL [--token T]`: asks a running gateway's
//! admin listener to reload (`POST /reload`) and reports the outcome.
//!
//! One HTTP/1.1 request through hyper's client (`http://` only: the admin
//! listener has no TLS), answered with the gateway's JSON.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Largest answer read (a rejected reload lists its problems).
const MAX_ANSWER: usize = 1024 * 1024;

/// What a reload request came to.
#[derive(Debug)]
pub enum Reloaded {
    /// Applied: the generation now serving.
    Ok(u64),
    /// Rejected: every problem, the running configuration untouched.
    Rejected(Vec<String>),
}

/// Why a reload request got no verdict.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The URL is not `http://host:port[/]`.
    #[error("unsupported admin URL {0:?}: expected http://host:port")]
    Url(String),
    /// The connection failed or timed out.
    #[error("cannot reach the admin listener: {0}")]
    Io(#[from] std::io::Error),
    /// The admin listener refused (no token, wrong token, reload off).
    #[error("refused ({status}): {message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The gateway's reason.
        message: String,
    },
    /// The answer is not what a gateway sends.
    #[error("unexpected answer: {0}")]
    Answer(String),
}

/// Sends `POST /reload` to the admin listener at `url` (with `token` as a
/// bearer token) and waits up to `timeout` for the verdict.
pub async fn reload(
    url: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<Reloaded, ReloadError> {
    let authority = url
        .strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .filter(|a| !a.is_empty() && !a.contains('/'))
        .ok_or_else(|| ReloadError::Url(url.to_owned()))?;
    let mut request =
        hyper::Request::post(format!("http://{authority}/reload")).header(CONTENT_LENGTH, 0);
    if let Some(token) = token {
        request = request.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|_| ReloadError::Url(url.to_owned()))?;
    let client = Client::builder(TokioExecutor::new()).build_http();
    let exchange = async {
        let response = client.request(request).await.map_err(io_error)?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?
            .to_bytes();
        Ok::<_, std::io::Error>((status, body))
    };
    let (status, body) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"))??;
    verdict(status, &body)
}

/// A client error as the I/O error it comes from, when it does.
fn io_error(e: hyper_util::client::legacy::Error) -> std::io::Error {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(&e);
    while let Some(inner) = source {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            return std::io::Error::new(io.kind(), io.to_string());
        }
        source = inner.source();
    }
    std::io::Error::other(e.to_string())
}

/// Reads the gateway's JSON answer for an HTTP status.
fn verdict(status: u16, body: &[u8]) -> Result<Reloaded, ReloadError> {
    let bad = || {
        ReloadError::Answer(format!(
            "{status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ))
    };
    let json: serde_json::Value = serde_json::from_slice(body).map_err(|_| bad())?;
    match status {
        200 => json["generation"]
            .as_u64()
            .map(Reloaded::Ok)
            .ok_or_else(bad),
        422 => {
            let problems = json["problems"]
                .as_array()
                .ok_or_else(bad)?
                .iter()
                .map(|p| p.as_str().unwrap_or_default().to_owned())
                .collect();
            Ok(Reloaded::Rejected(problems))
        }
        _ => Err(ReloadError::Refused {
            status,
            message: json["error"].as_str().unwrap_or_default().to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let ok = br#"{"result":"ok","generation":3}"#;
        assert!(matches!(verdict(200, ok), Ok(Reloaded::Ok(3))));
        let no = br#"{"result":"rejected","problems":["a","b"]}"#;
        assert!(matches!(verdict(422, no), Ok(Reloaded::Rejected(p)) if p == ["a", "b"]));
        let refused = br#"{"error":"a bearer token is required"}"#;
        assert!(matches!(
            verdict(401, refused),
            Err(ReloadError::Refused { status: 401, .. })
        ));
        assert!(matches!(
            verdict(200, b"garbage"),
            Err(ReloadError::Answer(_))
        ));
    }
}
