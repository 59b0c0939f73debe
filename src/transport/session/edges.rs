//! What a session answers at the edges of its dialect: a message over the
//! size limit, an NDJSON line that is not UTF-8, the goodbye before a
//! shutdown close, and which frame kind the dialect reads.

use super::Session;
use crate::close::CloseCode;
use crate::dialect::client::Oversize;
use crate::envelope::WireId;
use crate::error::{ErrorKind, GatewayError};
use crate::outbox::Outgoing;
use crate::telemetry::metrics::{Limit, ProtocolError};

// === impl Session ===

impl Session {
    /// True when the dialect reads binary frames (Sideband), false for text.
    pub fn binary(&self) -> bool {
        self.codec().reads_binary()
    }

    /// The listener's name.
    pub fn listener_name(&self) -> String {
        self.listener().name().to_owned()
    }

    /// The dialect's answer to a message over `limit` bytes, then close
    /// 1009 (an NDJSON client gets its error line, then the connection
    /// closes): see [`ClientCodec::oversize`].
    pub async fn too_large(&self, limit: usize) {
        let listener = self.listener();
        listener.count_protocol_error(ProtocolError::MessageTooLarge);
        listener.count_limit(Limit::MaxMessageBytes);
        let Oversize { reply, reason } = self.codec().oversize(limit);
        listener.log_closed(CloseCode::TooBig, "message too large", self.peer());
        if let Some(reply) = reply {
            self.send(&reply).await;
        }
        self.outbox.close(CloseCode::TooBig, reason).await;
    }

    /// Counts the client's WebSocket close frame, by code.
    pub fn count_close(&self, code: u16) {
        self.listener()
            .metrics()
            .count_ws_close(self.dialect(), crate::error::Side::Client, code);
    }

    /// An NDJSON line that is not UTF-8: a parse error; the connection
    /// stays open.
    pub async fn not_utf8(&self) -> super::Verdict {
        let err = GatewayError::new(ErrorKind::ParseError);
        self.send(&self.codec().error_reply(WireId::null(), &err))
            .await;
        super::Verdict::Continue
    }

    /// What to send before the shutdown close: a Sideband Control Close
    /// `shutdown`.
    pub fn goodbye(&self) -> Option<Outgoing> {
        self.codec()
            .goodbye()
            .map(|frame| Outgoing::Binary(frame.into()))
    }
}
