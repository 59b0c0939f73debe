//! What a session answers at the edges of its dialect: a message over the
//! size limit, an NDJSON line that is not UTF-8, the goodbye before a
//! shutdown close, and which frame kind the dialect reads.

use super::Session;
use crate::close::CloseCode;
use crate::dialect::errors;
use crate::dialect::render::{render, Style};
use crate::dialect::sideband::session::Sbp;
use crate::dialect::Dialect;
use crate::envelope::{Message, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::outbox::Outgoing;
use crate::telemetry::metrics::Limit;

// === impl Session ===

impl Session {
    /// True when the dialect reads binary frames (Sideband), false for text.
    pub fn binary(&self) -> bool {
        self.dialect() == Dialect::Sideband
    }

    /// The listener's name.
    pub fn listener(&self) -> String {
        self.route().cfg.name.clone()
    }

    /// The dialect's answer to a message over `limit` bytes, then close
    /// 1009 (an NDJSON client gets its error line, then the connection
    /// closes).
    pub async fn too_large(&self, limit: usize) {
        let route = self.route();
        route.count_protocol_error("message_too_large");
        route
            .metrics()
            .count_limit(&route.cfg.name, Limit::MaxMessageBytes);
        let (detail, style, reason) = match self.dialect() {
            Dialect::JsonRpc => (
                Some(format!("Message size exceeds maximum of {limit} bytes")),
                Style::Frame,
                "message too large",
            ),
            Dialect::Ndjson => (
                Some(format!("Line exceeds maximum of {limit} bytes")),
                Style::Line,
                "message too large",
            ),
            Dialect::Sideband => (None, Style::Frame, "Message too large"),
            Dialect::Holon => (None, Style::Holon, "message too large"),
        };
        if let Some(detail) = detail {
            let err = GatewayError::with_detail(ErrorKind::InvalidRequest, detail);
            let reply = Message::error(Some(WireId::null()), errors::render(&err, self.dialect()));
            if let Ok(text) = render(&reply, style) {
                self.outbox.send_frame(Outgoing::Text(text)).await;
            }
        }
        self.outbox.close(CloseCode::TooBig, reason).await;
    }

    /// Counts the client's WebSocket close frame, by code.
    pub fn count_close(&self, code: u16) {
        self.route()
            .metrics()
            .count_ws_close(self.dialect(), crate::error::Side::Client, code);
    }

    /// An NDJSON line that is not UTF-8: a parse error; the connection
    /// stays open.
    pub async fn not_utf8(&self) -> super::Verdict {
        let err = errors::render(&GatewayError::new(ErrorKind::ParseError), Dialect::Ndjson);
        self.send(&Message::error(Some(WireId::null()), err)).await;
        super::Verdict::Continue
    }

    /// What to send before the shutdown close: a Sideband Control Close
    /// `shutdown`.
    pub fn goodbye(&self) -> Option<Outgoing> {
        (self.dialect() == Dialect::Sideband)
            .then(|| Outgoing::Binary(Sbp::close_frame("shutdown")))
    }
}
