//! What a [`Link`] writes: gateway ids, params and texts in the upstream's
//! dialect, refused locally when the upstream could not take them.
//!
//! - NDJSON: JSON-RPC lines, integer ids, payloads minified onto one line.
//! - JSON-RPC WS: JSON-RPC text frames, integer ids.
//! - holon-rpc: string ids `"1"`, `"2"`, …; params always an object (absent
//!   → `{}`, anything else refused with `invalid_params`).

use crate::dialect::holon::object_params;
use crate::dialect::render::{render, render_batch, Style};
use crate::dialect::Dialect;
use crate::envelope::{raw_from_string, Message, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::router::correlator::parse_gateway_id;

use super::link::Link;

// === impl Link ===

impl Link {
    /// The wire id for gateway id `gid` in the upstream's dialect.
    pub(super) fn wire_id(&self, gid: u64) -> WireId {
        match self.shared.cfg.dialect {
            Dialect::Holon => WireId::string(&gid.to_string()),
            _ => WireId::number(gid),
        }
    }

    /// Reads a gateway id back from a reply's raw id token.
    pub(super) fn parse_id(&self, token: &str) -> Option<u64> {
        match self.shared.cfg.dialect {
            Dialect::Holon => {
                let inner = token.strip_prefix('"')?.strip_suffix('"')?;
                // Only plain decimal ids are ours ("h1" heartbeats are not).
                inner
                    .bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| parse_gateway_id(inner))?
            }
            _ => parse_gateway_id(token),
        }
    }

    /// The params to send for a request or notification.
    pub(super) fn params(&self, params: Option<&Payload>) -> Result<Option<Payload>, GatewayError> {
        if self.shared.cfg.dialect == Dialect::Holon {
            return object_params(params).map(Some).ok_or_else(|| {
                GatewayError::with_detail(
                    ErrorKind::InvalidParams,
                    "params must be an object for this upstream",
                )
            });
        }
        Ok(match params {
            Some(p) => Some(p.clone()),
            // Most hld handlers fail on absent params.
            None if self.shared.cfg.fill_empty_params => {
                Some(Payload::Json(raw_from_string(String::from("{}"))))
            }
            None => None,
        })
    }

    /// Renders a batch for this upstream, enforcing its size limit.
    pub(super) fn encode_batch(&self, msgs: &[Message]) -> Result<String, GatewayError> {
        let text = render_batch(msgs, self.style()).map_err(|_| not_json())?;
        self.check_size(text)
    }

    /// Renders a message for this upstream, enforcing its size limit.
    pub(super) fn encode(&self, msg: &Message) -> Result<String, GatewayError> {
        let text = render(msg, self.style()).map_err(|_| not_json())?;
        self.check_size(text)
    }

    fn style(&self) -> Style {
        match self.shared.cfg.dialect {
            Dialect::Ndjson => Style::Line,
            Dialect::Holon => Style::Holon,
            Dialect::JsonRpc | Dialect::Sideband => Style::Frame,
        }
    }

    /// Refuses a text the upstream would not accept.
    fn check_size(&self, text: String) -> Result<String, GatewayError> {
        let framed_len = text.len() + usize::from(self.style() == Style::Line);
        if framed_len > self.shared.cfg.max_request_bytes {
            return Err(GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                format!(
                    "message of {framed_len} bytes exceeds the upstream limit of {} bytes",
                    self.shared.cfg.max_request_bytes
                ),
            ));
        }
        Ok(text)
    }
}

fn not_json() -> GatewayError {
    GatewayError::with_detail(ErrorKind::InvalidParams, "params cannot be carried as JSON")
}
