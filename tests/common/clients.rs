//! One test client per listener dialect, with the same small interface, so
//! scenario suites can run against any listener.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use super::{Ws, STEP};

/// The listener dialects a test client can speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speak {
    JsonRpc,
    Holon,
    Ndjson,
}

/// What ended a connection, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// A WebSocket close frame with this code.
    Close(u16),
    /// EOF / reset without a close frame.
    Eof,
}

pub enum TestClient {
    Ws(Speak, Box<Ws>),
    Unix(Lines<BufReader<OwnedReadHalf>>, OwnedWriteHalf),
}

impl TestClient {
    /// Connects to `endpoint`: a ws:// URL, or a socket path for NDJSON.
    pub async fn connect(speak: Speak, endpoint: &str) -> TestClient {
        match speak {
            Speak::Ndjson => {
                let stream = UnixStream::connect(Path::new(endpoint))
                    .await
                    .expect("unix connect");
                let (read, write) = stream.into_split();
                TestClient::Unix(BufReader::new(read).lines(), write)
            }
            Speak::JsonRpc => {
                let (ws, _) = tokio_tungstenite::connect_async(endpoint)
                    .await
                    .expect("ws connect");
                TestClient::Ws(speak, Box::new(ws))
            }
            Speak::Holon => {
                let mut request = endpoint.into_client_request().expect("request");
                request.headers_mut().insert(
                    "Sec-WebSocket-Protocol",
                    HeaderValue::from_static("holon-rpc"),
                );
                let (ws, response) = tokio_tungstenite::connect_async(request)
                    .await
                    .expect("ws connect");
                assert_eq!(
                    response
                        .headers()
                        .get("Sec-WebSocket-Protocol")
                        .and_then(|v| v.to_str().ok()),
                    Some("holon-rpc"),
                    "switchyard must select holon-rpc"
                );
                TestClient::Ws(speak, Box::new(ws))
            }
        }
    }

    pub fn speaks(&self) -> Speak {
        match self {
            TestClient::Ws(s, _) => *s,
            TestClient::Unix(..) => Speak::Ndjson,
        }
    }

    pub async fn send(&mut self, text: &str) {
        match self {
            TestClient::Ws(_, ws) => ws.send(Message::Text(text.into())).await.expect("send"),
            TestClient::Unix(_, w) => {
                w.write_all(text.as_bytes()).await.expect("write");
                w.write_all(b"\n").await.expect("write");
            }
        }
    }

    /// The next text message (WebSocket control frames skipped).
    pub async fn recv(&mut self) -> String {
        match self.next().await {
            Ok(text) => text,
            Err(end) => panic!("connection ended ({end:?}) while a message was expected"),
        }
    }

    /// The next text message, or how the connection ended.
    pub async fn next(&mut self) -> Result<String, Ended> {
        let step = async {
            match self {
                TestClient::Ws(_, ws) => loop {
                    match ws.next().await {
                        Some(Ok(Message::Text(t))) => return Ok(t.to_string()),
                        Some(Ok(Message::Close(f))) => {
                            return Err(Ended::Close(f.map_or(1005, |f| u16::from(f.code))))
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(_)) | None => return Err(Ended::Eof),
                    }
                },
                TestClient::Unix(lines, _) => match lines.next_line().await {
                    Ok(Some(line)) => Ok(line),
                    _ => Err(Ended::Eof),
                },
            }
        };
        tokio::time::timeout(STEP, step)
            .await
            .expect("timed out waiting for a message")
    }

    /// Asserts nothing arrives for `wait` (WebSocket control frames aside).
    pub async fn silence(&mut self, wait: Duration) {
        if let Ok(got) = tokio::time::timeout(wait, self.next()).await {
            panic!("expected silence, got {got:?}");
        }
    }
}
