//! Why a one-shot call or a watch failed, and how that maps onto
//! switchyard's error kinds.

use std::time::Duration;

use tokio_tungstenite::tungstenite;

use crate::error::{ErrorKind, Side};
use crate::upstream::tls::TlsSetupError;

/// Largest reply accepted, in bytes (the daemon's line limit): a frame,
/// message or line of the one-shot client and of `watch`.
pub(super) const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// Why a [`call`](super::call) or [`call_holon`](super::call_holon) failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// PARAMS is not valid JSON, or not of the shape the dialect allows.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// The URL is neither `ws://`, `wss://`, `http://`, `unix:///…` nor an
    /// absolute path.
    #[error("unsupported URL {0:?}: expected ws://host:port/path, wss://host:port/path, http://host:port/path, unix:///abs/path.sock or /abs/path.sock")]
    UnsupportedUrl(String),
    /// A CA file was given for a URL that is not `wss://`.
    #[error("--ca-file applies to wss:// URLs only (got {0:?})")]
    CaFileWithoutTls(String),
    /// No TLS client configuration: the CA file is unreadable, or the
    /// system has no root certificates.
    #[error(transparent)]
    TlsSetup(#[from] TlsSetupError),
    /// The TLS handshake failed (e.g. a certificate the trusted roots do
    /// not vouch for).
    #[error("TLS handshake with {url} failed: {source}")]
    TlsHandshake {
        /// The URL dialed.
        url: String,
        /// rustls's reason.
        #[source]
        source: rustls::Error,
    },
    /// The Unix socket could not be reached.
    #[error("cannot connect to {path}: {source}")]
    Connect {
        /// The socket path.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The token cannot go in an HTTP header (a control character).
    #[error("invalid token: it must be printable ASCII")]
    InvalidToken,
    /// The WebSocket handshake or connection failed.
    #[error("WebSocket error: {0}")]
    WebSocket(#[source] Box<tungstenite::Error>),
    /// Reading or writing the Unix socket failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A reply line exceeded the client's limit.
    #[error("reply exceeds {MAX_REPLY_BYTES} bytes")]
    ReplyTooLarge,
    /// The peer closed the connection before replying.
    #[error("connection closed before a reply arrived")]
    Closed,
    /// No reply within the timeout.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// A `jsonrpc-http` listener answered with an HTTP status other than
    /// `200` (a refusal: token, origin, content type, size, rate).
    #[error("HTTP {status}: {body}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// The answer's body (a reason, or the JSON-RPC error of a `429`).
        body: String,
    },
}

// === impl ClientError ===

impl ClientError {
    /// The closest switchyard error kind, for uniform reporting.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::InvalidParams(_) => ErrorKind::InvalidParams,
            ClientError::UnsupportedUrl(_)
            | ClientError::CaFileWithoutTls(_)
            | ClientError::InvalidToken => ErrorKind::InvalidRequest,
            ClientError::ReplyTooLarge => ErrorKind::ResourceExhausted,
            ClientError::Timeout(_) => ErrorKind::Timeout,
            ClientError::Connect { .. }
            | ClientError::TlsSetup(_)
            | ClientError::TlsHandshake { .. }
            | ClientError::WebSocket(_)
            | ClientError::Io(_)
            | ClientError::Http { .. }
            | ClientError::Closed => ErrorKind::Unavailable,
        }
    }

    /// Who is at fault: the caller's input, or the peer called.
    pub fn side(&self) -> Side {
        match self.kind() {
            ErrorKind::InvalidParams | ErrorKind::InvalidRequest => Side::Client,
            _ => Side::Upstream,
        }
    }
}

impl From<tungstenite::Error> for ClientError {
    fn from(e: tungstenite::Error) -> Self {
        ClientError::WebSocket(Box::new(e))
    }
}
