//! [`LinkError`]: why an upstream connection could not be opened, or why
//! an open one ended. One closed list, so that callers match on a variant
//! (a refused Sideband handshake, an oversize reply) instead of on text.
//!
//! `Display` is what operators read: the warn and debug lines of the pool
//! supervisors and readers, the status page's last connect error, and the
//! `detail` of the `unavailable` error a failed call gets (a connection
//! that could not be opened, or [`Link::fail_all`] when one ends). Wrapped
//! library errors show the library's own text.
//!
//! [`Link::fail_all`]: super::link::Link::fail_all

use std::borrow::Cow;
use std::io;

use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::http::header::InvalidHeaderValue;
use tokio_tungstenite::tungstenite::http::StatusCode;

use super::tls::TlsSetupError;

/// Why an upstream link failed to open, or ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    // --- dialing ---
    /// The connection could not be opened (NDJSON: no socket, refused).
    #[error(transparent)]
    Connect(io::Error),
    /// No connection within `connect_timeout`.
    #[error("connect timed out")]
    Timeout,
    /// The upstream URL cannot form a WebSocket request.
    #[error(transparent)]
    Url(Box<tungstenite::Error>),
    /// The configured `origin` is not a valid header value.
    #[error(transparent)]
    Origin(InvalidHeaderValue),
    /// The upstream answered the upgrade with an HTTP status, not 101.
    #[error("HTTP error: {status}")]
    Refused {
        /// The status it answered.
        status: StatusCode,
    },
    /// A WebSocket failure while dialing, handshaking or reading.
    #[error(transparent)]
    WebSocket(Box<tungstenite::Error>),
    /// `wss://`: no TLS client configuration (an unreadable `ca_file`, no
    /// system roots).
    #[error(transparent)]
    TlsSetup(TlsSetupError),
    /// `wss://`: the TLS handshake failed (a certificate the trusted roots
    /// do not vouch for, a name mismatch, an alert from the upstream).
    #[error("TLS handshake failed: {0}")]
    Tls(rustls::Error),
    /// `command`: the process could not be started (no such program, not
    /// executable, a bad `cwd`).
    #[error("cannot start the upstream process: {0}")]
    Spawn(io::Error),
    /// `command`: `max_processes` processes of this upstream are alive.
    #[error("upstream process cap of {max} reached")]
    ProcessCap {
        /// The cap (`max_processes`).
        max: usize,
    },
    /// A holon-rpc upstream accepted the upgrade without `holon-rpc`.
    #[error("upstream did not select the holon-rpc subprotocol")]
    Subprotocol,

    // --- the Sideband handshake (sideband.md §10) ---
    /// Close 1000 `negotiation_failed`, sent or received: retrying soon
    /// would fail the same way, so the supervisor waits the maximum backoff.
    #[error("Sideband negotiation failed: {by}")]
    NegotiationFailed {
        /// Which side refused.
        by: Refuser,
    },
    /// The handshake failed for another reason (the close reason we sent).
    #[error("Sideband handshake failed: {reason}")]
    Handshake {
        /// The reason of the close we sent.
        reason: Cow<'static, str>,
    },
    /// A text frame where the Sideband handshake was expected.
    #[error("text frame from a Sideband upstream")]
    TextFrame,
    /// The upstream went away before the handshake completed.
    #[error("upstream closed during the Sideband handshake")]
    HandshakeClosed,

    // --- reading an open link ---
    /// A binary frame from a JSON upstream.
    #[error("binary frame from upstream")]
    BinaryFrame,
    /// The upstream sent a WebSocket close.
    #[error("upstream closed the WebSocket ({code})")]
    Closed {
        /// Its close code (1005 when it gave none).
        code: u16,
    },
    /// A frame or line above the read limit (twice `max_response_bytes`):
    /// it cannot be read whole, so the link ends.
    #[error("reply exceeds the read limit of {limit} bytes")]
    TooLarge {
        /// The read limit in bytes.
        limit: usize,
    },
    /// Reading the NDJSON socket failed.
    #[error(transparent)]
    Read(io::Error),
    /// Writing to the NDJSON socket failed.
    #[error(transparent)]
    Write(io::Error),

    // --- why an open link ended (the detail its failed calls get) ---
    /// The upstream's side ended: end of stream, read error, close.
    #[error("upstream connection lost")]
    Lost,
    /// Writing to the upstream failed.
    #[error("upstream write failed")]
    WriteFailed,
    /// `command`: the upstream process exited.
    #[error("upstream process exited ({status})")]
    Exited {
        /// Its exit status, as the system describes it.
        status: std::process::ExitStatus,
    },
    /// A retired connection's late replies were not all in in time.
    #[error("retired connection closed")]
    Retired,
    /// The client owning the link has gone.
    #[error("client gone")]
    ClientGone,
    /// switchyard closed the link with this reason (heartbeat or pong
    /// timeout, a Sideband session's close).
    #[error("{reason}")]
    Farewell {
        /// The close reason sent.
        reason: Cow<'static, str>,
    },
}

/// Which side refused a Sideband handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refuser {
    /// switchyard refused the upstream's handshake.
    Us,
    /// The upstream refused ours.
    Upstream,
}

// === impl LinkError ===

impl LinkError {
    /// A tungstenite error while dialing: an HTTP answer is a refusal, a
    /// failed TLS handshake [`Tls`](LinkError::Tls).
    pub(crate) fn dial(e: tungstenite::Error) -> Self {
        if let Some(tls) = super::tls::handshake_error(&e) {
            return LinkError::Tls(tls.clone());
        }
        match e {
            tungstenite::Error::Http(response) => LinkError::Refused {
                status: response.status(),
            },
            e => LinkError::WebSocket(Box::new(e)),
        }
    }

    /// A tungstenite error while reading: a message above `limit` is
    /// [`TooLarge`](LinkError::TooLarge).
    pub(crate) fn read(e: tungstenite::Error, limit: usize) -> Self {
        use tungstenite::error::CapacityError;
        match e {
            tungstenite::Error::Capacity(CapacityError::MessageTooLong { .. }) => {
                LinkError::TooLarge { limit }
            }
            e => LinkError::WebSocket(Box::new(e)),
        }
    }

    /// True when the upstream refused our Sideband handshake or we
    /// refused its (the supervisor then waits the maximum backoff).
    pub(crate) fn is_refusal(&self) -> bool {
        matches!(self, LinkError::NegotiationFailed { .. })
    }
}

// === impl Refuser ===

impl std::fmt::Display for Refuser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refuser::Us => "refused by us",
            Refuser::Upstream => "refused by the upstream",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts operators saw before the errors were typed stay the same.
    #[test]
    fn display_keeps_the_texts_operators_know() {
        let cases = [
            (LinkError::Timeout, "connect timed out"),
            (
                LinkError::Subprotocol,
                "upstream did not select the holon-rpc subprotocol",
            ),
            (
                LinkError::NegotiationFailed { by: Refuser::Us },
                "Sideband negotiation failed: refused by us",
            ),
            (
                LinkError::NegotiationFailed {
                    by: Refuser::Upstream,
                },
                "Sideband negotiation failed: refused by the upstream",
            ),
            (
                LinkError::Handshake {
                    reason: "unsupported version".into(),
                },
                "Sideband handshake failed: unsupported version",
            ),
            (
                LinkError::Closed { code: 1001 },
                "upstream closed the WebSocket (1001)",
            ),
            (LinkError::Lost, "upstream connection lost"),
            (LinkError::WriteFailed, "upstream write failed"),
            (LinkError::Retired, "retired connection closed"),
            (LinkError::ClientGone, "client gone"),
            (
                LinkError::Farewell {
                    reason: "heartbeat timeout".into(),
                },
                "heartbeat timeout",
            ),
            (
                LinkError::Refused {
                    status: StatusCode::NOT_FOUND,
                },
                "HTTP error: 404 Not Found",
            ),
            (
                LinkError::Tls(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::UnknownIssuer,
                )),
                "TLS handshake failed: invalid peer certificate: UnknownIssuer",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
        let io = io::Error::from(io::ErrorKind::NotFound);
        let text = io.to_string();
        assert_eq!(LinkError::Connect(io).to_string(), text);
    }

    #[test]
    fn an_http_answer_is_a_refusal_and_a_long_message_too_large() {
        let response = tungstenite::http::Response::builder()
            .status(403)
            .body(None)
            .expect("response");
        let e = LinkError::dial(tungstenite::Error::Http(Box::new(response)));
        assert!(matches!(e, LinkError::Refused { status } if status == StatusCode::FORBIDDEN));
        let long = tungstenite::error::CapacityError::MessageTooLong {
            size: 10,
            max_size: 5,
        };
        let e = LinkError::read(tungstenite::Error::Capacity(long), 5);
        assert!(matches!(e, LinkError::TooLarge { limit: 5 }));
        assert!(!e.is_refusal());
    }
}
