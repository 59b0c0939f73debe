//! A tiny one-shot client for `switchyard call URL METHOD [PARAMS]`.
//!
//! It sends exactly one request and returns the reply text exactly as
//! received, so the CLI can show what a listener really puts on the wire. It
//! is a diagnostic tool, not part of the gateway's data path: one connection
//! per call, no pooling, no retries.
//!
//! - `ws://host:port/path`: JSON-RPC 2.0 (or holon-rpc, via [`call_holon`])
//!   in WebSocket text frames; `wss://` over TLS, trusting the system's root
//!   certificates, or only those of a CA file (`--ca-file`).
//! - `unix:///abs/path.sock` or `/abs/path.sock`: NDJSON over a Unix socket.
//! - `ws://…` with [`call_sideband`]: Sideband SBP frames, JSON envelopes.
//! - `http://host:port/path`: JSON-RPC 2.0 in one `POST` (a `jsonrpc-http`
//!   listener), the token as `Authorization: Bearer`.
//!
//! A listener's token goes in the upgrade's `Authorization: Bearer`
//! header (`connect`). An error reply is still a reply: [`is_error_reply`]
//! tells the CLI to exit with [`EXIT_ERROR_REPLY`].
//!
//! [`reload`] is `switchyard reload`: `POST /reload` to an admin listener.
//! [`watch`] is `switchyard watch`: a subscription, one line per event.
//! The frames and lines themselves go out and come back in `exchange`.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use self::args::{checked_params, parse_url, ws_only, Target};
use self::exchange::{unix_exchange, ws_exchange, Expect};

mod args;
mod connect;
mod error;
mod exchange;
mod http;
pub mod reload;
mod sideband;
pub mod watch;

pub use error::ClientError;
pub use sideband::call_sideband;

/// `switchyard call`'s exit code when the reply is an error reply
/// (JSON-RPC or holon-rpc `error`, a Sideband `E` envelope); the reply is
/// printed all the same. A call that got no reply exits 1.
pub const EXIT_ERROR_REPLY: u8 = 3;

/// True when `reply` (as [`call`], [`call_holon`] or [`call_sideband`]
/// return it) is an error reply: an object with an `error` member, or a
/// Sideband `E` envelope.
pub fn is_error_reply(reply: &str) -> bool {
    match serde_json::from_str::<Value>(reply) {
        Ok(Value::Object(msg)) => {
            msg.contains_key("error") || msg.get("t").and_then(Value::as_str) == Some("E")
        }
        _ => false,
    }
}

/// Sends one JSON-RPC request and returns the reply text exactly as
/// received. `token` goes in the WebSocket upgrade's `Authorization:
/// Bearer` header (a Unix socket has none); `ca_file`: `wss://` trusts
/// only its certificates.
pub async fn call(
    url: &str,
    method: &str,
    params: Option<&str>,
    token: Option<&str>,
    ca_file: Option<&Path>,
    timeout: Duration,
) -> Result<String, ClientError> {
    let params = params.map(|p| checked_params(p, false)).transpose()?;
    let target = parse_url(url, ca_file)?;
    let mut request = format!("{{\"jsonrpc\":\"2.0\",\"method\":{}", json_string(method));
    if let Some(params) = &params {
        request.push_str(",\"params\":");
        request.push_str(params);
    }
    request.push_str(",\"id\":1}");
    let exchange = async {
        match target {
            Target::Ws(url) => {
                ws_exchange(url, None, token, ca_file, request, Expect::WsNumber).await
            }
            Target::Unix(path) => unix_exchange(path, request).await,
            Target::Http(url) => http::http_exchange(url, token, request).await,
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| ClientError::Timeout(timeout))?
}

/// Sends one holon-rpc request (subprotocol `holon-rpc`, string id `"1"`,
/// object params, `{}` when omitted) and returns the reply text exactly as
/// received. Only `ws://` and `wss://` URLs apply; `token` and `ca_file`
/// as for [`call`].
pub async fn call_holon(
    url: &str,
    method: &str,
    params: Option<&str>,
    token: Option<&str>,
    ca_file: Option<&Path>,
    timeout: Duration,
) -> Result<String, ClientError> {
    let params = params.map(|p| checked_params(p, true)).transpose()?;
    let url = ws_only(url, ca_file)?;
    let request = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"method\":{},\"params\":{}}}",
        json_string(method),
        params.as_deref().unwrap_or("{}")
    );
    let exchange = ws_exchange(
        url,
        Some("holon-rpc"),
        token,
        ca_file,
        request,
        Expect::HolonString,
    );
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| ClientError::Timeout(timeout))?
}

fn json_string(s: &str) -> String {
    Value::from(s).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use super::args::minify;
    use super::*;
    use crate::daemon::{Daemon, DaemonOptions};
    use crate::error::Side;
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
    use tokio_tungstenite::tungstenite::Message;

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn call_over_unix_against_the_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let daemon = Daemon::start(&dir.path().join("d.sock"), DaemonOptions::default())
            .await
            .unwrap();
        let path = daemon.path().display().to_string();
        let url = format!("unix://{path}");
        let reply = call(&url, "subtract", Some("[42,\n 23]"), None, None, T)
            .await
            .unwrap();
        assert_eq!(reply, r#"{"jsonrpc":"2.0","result":19,"id":1}"#);
        let reply = call(&path, "echo", Some(r#"{ "a b" : [ 1 ] }"#), None, None, T)
            .await
            .unwrap();
        assert_eq!(reply, r#"{"jsonrpc":"2.0","result":{"a b":[1]},"id":1}"#);
        let reply = call(&path, "Subscribe", None, None, None, T).await.unwrap();
        assert!(reply.contains("\"subscription_id\""), "{reply}");
        let slow = call(
            &path,
            "sleep",
            Some("[5000]"),
            None,
            None,
            Duration::from_millis(50),
        )
        .await;
        assert!(matches!(slow, Err(ClientError::Timeout(_))));
        daemon.stop().await;
        let gone = call(&url, "echo", None, None, None, T).await;
        assert!(matches!(gone, Err(ClientError::Connect { .. })));
    }

    #[test]
    fn error_replies_in_every_dialect() {
        for (reply, error) in [
            (r#"{"jsonrpc":"2.0","result":1,"id":1}"#, false),
            (r#"{"jsonrpc":"2.0","error":{"code":-32601},"id":1}"#, true),
            (r#"{"jsonrpc":"2.0","id":"1","error":{"code":5}}"#, true),
            (r#"{"t":"R","cid":"00","result":{}}"#, false),
            (r#"{"t":"E","cid":"00","code":1101,"message":"m"}"#, true),
            ("not json", false),
        ] {
            assert_eq!(is_error_reply(reply), error, "{reply}");
        }
    }

    #[tokio::test]
    async fn params_and_urls_are_checked_before_connecting() {
        let sock = "unix:///nonexistent/d.sock";
        for bad in ["1", "\"x\"", "{", "[1] [2]", "null"] {
            let err = call(sock, "m", Some(bad), None, None, T).await.unwrap_err();
            assert!(matches!(err, ClientError::InvalidParams(_)), "{bad}: {err}");
            assert_eq!(err.side(), Side::Client);
        }
        let holon = call_holon("ws://127.0.0.1:1/", "m", Some("[1]"), None, None, T).await;
        assert!(matches!(holon, Err(ClientError::InvalidParams(_))));
        let ca = Some(Path::new("/nonexistent/ca.pem"));
        for url in ["ws://127.0.0.1:1/", "/nonexistent/d.sock"] {
            let err = call(url, "m", None, None, ca, T).await.unwrap_err();
            assert!(
                matches!(err, ClientError::CaFileWithoutTls(_)),
                "{url}: {err}"
            );
        }
        let err = call("wss://127.0.0.1:1/", "m", None, None, ca, T)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("ca_file /nonexistent/ca.pem"),
            "{err}"
        );
        for url in ["d.sock", "unix://d.sock", "https://h/", "ftp://h/"] {
            let err = call(url, "m", None, None, None, T).await.unwrap_err();
            assert!(matches!(err, ClientError::UnsupportedUrl(_)), "{url}");
        }
        assert_eq!(minify("{ \"a \\\" b\" :\n[1, 2] }"), "{\"a \\\" b\":[1,2]}");
    }

    /// A one-shot WS server: a notification, someone else's reply, then ours.
    async fn ws_server(protocol: Option<&'static str>, reply: &'static str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            // The callback's signature, Err variant included, is tungstenite's.
            #[allow(clippy::result_large_err)]
            let pick = |req: &Request, mut resp: Response| {
                let offered = req.headers().get("Sec-WebSocket-Protocol").cloned();
                assert_eq!(offered.as_ref().map(|v| v.to_str().unwrap()), protocol);
                if let Some(v) = offered {
                    resp.headers_mut().insert("Sec-WebSocket-Protocol", v);
                }
                Ok(resp)
            };
            let mut ws = tokio_tungstenite::accept_hdr_async(tcp, pick)
                .await
                .unwrap();
            let request = ws.next().await.unwrap().unwrap().into_text().unwrap();
            assert!(request.contains("\"method\":\"m\""), "{request}");
            for text in [
                r#"{"jsonrpc":"2.0","method":"tick","params":{}}"#,
                r#"{"jsonrpc":"2.0","result":0,"id":2}"#,
                reply,
            ] {
                ws.send(Message::text(text)).await.unwrap();
            }
        });
        format!("ws://{addr}/")
    }

    #[tokio::test]
    async fn call_over_websocket() {
        let reply = r#"{"jsonrpc":"2.0","result":{"ok":true},"id":1}"#;
        let url = ws_server(None, reply).await;
        assert_eq!(
            call(&url, "m", Some("[1]"), None, None, T).await.unwrap(),
            reply
        );
        let reply = r#"{"jsonrpc":"2.0","id":"1","result":{}}"#;
        let url = ws_server(Some("holon-rpc"), reply).await;
        assert_eq!(
            call_holon(&url, "m", None, None, None, T).await.unwrap(),
            reply
        );
    }
}
