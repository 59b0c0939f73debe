//! `switchyard reload --admin URL [--token T]`: asks a running gateway's
//! admin listener to reload (`POST /reload`) and reports the outcome.
//!
//! A plain HTTP/1.1 request over TCP (`http://` only: the admin listener
//! has no TLS), answered with the gateway's JSON.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest answer read (a rejected reload lists its problems).
const MAX_ANSWER: u64 = 1024 * 1024;

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
    let exchange = async {
        let mut stream = TcpStream::connect(authority).await?;
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let request = format!(
            "POST /reload HTTP/1.1\r\nHost: {authority}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.take(MAX_ANSWER).read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"))??;
    verdict(&String::from_utf8_lossy(&answer))
}

/// Reads the status line and the JSON body.
fn verdict(answer: &str) -> Result<Reloaded, ReloadError> {
    let bad = || ReloadError::Answer(answer.lines().next().unwrap_or("").to_owned());
    let status: u16 = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json: serde_json::Value = serde_json::from_str(body.trim()).map_err(|_| bad())?;
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
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"result\":\"ok\",\"generation\":3}";
        assert!(matches!(verdict(ok), Ok(Reloaded::Ok(3))));
        let no = "HTTP/1.1 422 Unprocessable Entity\r\n\r\n{\"result\":\"rejected\",\"problems\":[\"a\",\"b\"]}";
        assert!(matches!(verdict(no), Ok(Reloaded::Rejected(p)) if p == ["a", "b"]));
        let refused = "HTTP/1.1 401 Unauthorized\r\n\r\n{\"error\":\"a bearer token is required\"}";
        assert!(matches!(
            verdict(refused),
            Err(ReloadError::Refused { status: 401, .. })
        ));
        assert!(matches!(verdict("garbage"), Err(ReloadError::Answer(_))));
    }
}
