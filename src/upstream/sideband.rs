//! What is particular to a Sideband upstream link (sideband.md §10 "As a
//! client"): the handshake before the link is published, how the link
//! says goodbye, and telling a refused handshake apart from other
//! failures so that the supervisor waits the maximum backoff after it.
//!
//! Goodbyes, in the order they are chosen:
//! - one the session asked for (the upstream's Control Close is answered
//!   with close 1000 and the same reason, nothing else; a fatal frame with
//!   its ErrorFrame and close code);
//! - while switchyard stops: Control Close `shutdown`, then close 1001;
//! - otherwise: Control Close `disconnect`, then close 1000.

use std::borrow::Cow;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode as WsCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use super::error::{LinkError, Refuser};
use super::link::Link;
use super::ws::Ws;
use crate::close::CloseCode;
use crate::dialect::sideband::session::{Sbp, SbpEvent};

/// The reason both sides give a refused handshake (close 1000).
pub(super) const NEGOTIATION_FAILED: &str = "negotiation_failed";

/// What the writer sends last when a link closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Farewell {
    /// A last SBP frame (Control Close, or an ErrorFrame), if any.
    pub(crate) frame: Option<Vec<u8>>,
    /// The WebSocket close code.
    pub(crate) code: CloseCode,
    /// The WebSocket close reason.
    pub(crate) reason: Cow<'static, str>,
}

// === impl Farewell ===

impl Farewell {
    /// A close without a last frame.
    pub(crate) fn plain(code: CloseCode, reason: impl Into<Cow<'static, str>>) -> Self {
        Farewell {
            frame: None,
            code,
            reason: reason.into(),
        }
    }

    /// Control Close `reason`, then the WebSocket close.
    fn control(reason: &str, code: CloseCode, ws_reason: &'static str) -> Self {
        Farewell {
            frame: Some(Sbp::close_frame(reason)),
            code,
            reason: ws_reason.into(),
        }
    }
}

/// True when a WebSocket close from the upstream refuses our handshake.
pub(super) fn refuses(frame: Option<&CloseFrame>) -> bool {
    frame.is_some_and(|f| {
        u16::from(f.code) == CloseCode::Normal.as_u16() && f.reason == NEGOTIATION_FAILED
    })
}

// === impl Link ===

impl Link {
    /// Sets the goodbye the writer sends when the link closes; the first
    /// one set wins.
    pub(super) fn set_farewell(&self, farewell: Farewell) {
        if let Some(sb) = self.sideband() {
            sb.lock().farewell.get_or_insert(farewell);
        }
    }

    /// The goodbye to send now that the link closes (see the module docs).
    pub(super) fn farewell(&self) -> Farewell {
        let Some(sb) = self.sideband() else {
            return Farewell::plain(CloseCode::Normal, "closing");
        };
        if let Some(farewell) = sb.lock().farewell.take() {
            return farewell;
        }
        if self.shared.stopping.is_cancelled() {
            Farewell::control("shutdown", CloseCode::GoingAway, "going away")
        } else {
            Farewell::control("disconnect", CloseCode::Normal, "closing")
        }
    }

    /// Notes that the upstream closed the link refusing our handshake.
    pub(super) fn mark_refused(&self) {
        if let Some(sb) = self.sideband() {
            sb.lock().refused = true;
        }
    }

    /// True when the upstream closed the link refusing our handshake.
    pub(super) fn refused(&self) -> bool {
        self.sideband().is_some_and(|sb| sb.lock().refused)
    }
}

/// Sends our SBP handshake and waits for the upstream's: no Message frame
/// may go out before it, because the envelope encoding depends on it.
pub(super) async fn handshake(ws: &mut Ws) -> Result<Sbp, LinkError> {
    let mut sbp = Sbp::new(true);
    ws.send(WsMessage::Binary(sbp.hello().into()))
        .await
        .map_err(|e| LinkError::WebSocket(Box::new(e)))?;
    loop {
        match ws.next().await {
            Some(Ok(WsMessage::Binary(bytes))) => match sbp.on_frame(&bytes) {
                SbpEvent::Ready => return Ok(sbp),
                SbpEvent::Close {
                    frame,
                    code,
                    reason,
                } => {
                    if let Some(frame) = frame {
                        // Failing anyway; the ErrorFrame is a courtesy.
                        let _ = ws.send(WsMessage::Binary(frame.into())).await;
                    }
                    let close = CloseFrame {
                        code: WsCode::from(code.as_u16()),
                        reason: reason.to_string().into(),
                    };
                    // Failing anyway; the close frame is a courtesy.
                    let _ = ws.close(Some(close)).await;
                    return Err(if reason == NEGOTIATION_FAILED {
                        LinkError::NegotiationFailed { by: Refuser::Us }
                    } else {
                        LinkError::Handshake { reason }
                    });
                }
                _ => continue,
            },
            Some(Ok(WsMessage::Text(_))) => {
                let close = CloseFrame {
                    code: WsCode::Unsupported,
                    reason: "Text frames not supported".into(),
                };
                // Failing anyway; the close frame is a courtesy.
                let _ = ws.close(Some(close)).await;
                return Err(LinkError::TextFrame);
            }
            Some(Ok(WsMessage::Close(frame))) if refuses(frame.as_ref()) => {
                return Err(LinkError::NegotiationFailed {
                    by: Refuser::Upstream,
                });
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(LinkError::WebSocket(Box::new(e))),
            None => return Err(LinkError::HandshakeClosed),
        }
    }
}
