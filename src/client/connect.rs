//! Opening a client WebSocket: the upgrade request with the dialect's
//! subprotocol and the bearer token, and the client's frame limit; `wss://`
//! over TLS (the upstreams' client configuration: `ca_file` or the system's
//! roots).
//!
//! The token goes in an `Authorization: Bearer` header, never in the URL:
//! a `?token=` would end up in shell history, `ps` and proxy logs.

use std::path::Path;

use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::error::{ClientError, MAX_REPLY_BYTES};
use crate::upstream::tls;

/// A client WebSocket.
pub(super) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Connects to `url`, offering `subprotocol` (the handshake then fails
/// unless the server selects it) and sending `token` as a bearer token;
/// over TLS for `wss://`, trusting only the certificates of `ca_file` when
/// given, else the system's roots. Frames and messages of at most
/// [`MAX_REPLY_BYTES`] are accepted.
pub(super) async fn ws_connect(
    url: &str,
    subprotocol: Option<&'static str>,
    token: Option<&str>,
    ca_file: Option<&Path>,
) -> Result<Ws, ClientError> {
    let mut req = url.into_client_request()?;
    if let Some(protocol) = subprotocol {
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", HeaderValue::from_static(protocol));
    }
    if let Some(token) = token {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ClientError::InvalidToken)?;
        value.set_sensitive(true);
        req.headers_mut().insert("Authorization", value);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_REPLY_BYTES))
        .max_frame_size(Some(MAX_REPLY_BYTES));
    let connector = if url.starts_with("wss://") {
        Some(tls::connector(&tls::client_config(ca_file)?))
    } else {
        None
    };
    let dialed =
        tokio_tungstenite::connect_async_tls_with_config(req, Some(config), true, connector).await;
    match dialed {
        Ok((ws, _response)) => Ok(ws),
        Err(e) => match tls::handshake_error(&e) {
            Some(source) => Err(ClientError::TlsHandshake {
                url: url.to_owned(),
                source: source.clone(),
            }),
            None => Err(e.into()),
        },
    }
}
