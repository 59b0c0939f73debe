//! holon-rpc towards an upstream: the subprotocol it must echo, string
//! ids `"1"`, `"2"`, …, params always an object (absent → `{}`, anything
//! else refused with `invalid_params`), and heartbeats: at most one
//! `rpc.heartbeat` (id `"h<n>"`) in flight per link, whose reply, result
//! or error, proves the link alive.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::object_params;
use crate::dialect::link::parse_gateway_id;
use crate::envelope::Payload;
use crate::error::{ErrorKind, GatewayError};

/// The subprotocol a holon-rpc upstream must echo.
pub(crate) const SUBPROTOCOL: &str = "holon-rpc";

/// A holon-rpc upstream link's own state: its heartbeat in flight, with
/// its number and when it was sent.
#[derive(Debug, Default)]
pub(crate) struct HolonUpstream {
    beat: Mutex<Option<(u64, Instant)>>,
}

// === impl HolonUpstream ===

impl HolonUpstream {
    /// Heartbeat `h<n>`, or `None` while one is still in flight.
    pub(crate) fn heartbeat(&self, n: u64) -> Option<String> {
        let mut beat = self.beat.lock();
        if beat.is_some() {
            return None;
        }
        *beat = Some((n, Instant::now()));
        Some(format!(
            r#"{{"jsonrpc":"2.0","id":"h{n}","method":"rpc.heartbeat","params":{{}}}}"#
        ))
    }

    /// True when the heartbeat in flight has waited longer than `timeout`.
    pub(crate) fn overdue(&self, timeout: Duration) -> bool {
        self.beat
            .lock()
            .is_some_and(|(_, sent)| sent.elapsed() > timeout)
    }

    /// Settles the heartbeat in flight if `token` is its raw id (`"h<n>"`).
    pub(crate) fn acked(&self, token: &str) -> bool {
        let mut beat = self.beat.lock();
        match *beat {
            Some((n, _)) if token == format!("\"h{n}\"") => {
                *beat = None;
                true
            }
            _ => false,
        }
    }
}

/// Reads a gateway id back from a string id token: only plain decimal
/// ids are ours (`"h1"` heartbeats are not).
pub(crate) fn parse_id(token: &str) -> Option<u64> {
    let inner = token.strip_prefix('"')?.strip_suffix('"')?;
    inner
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| parse_gateway_id(inner))?
}

/// Params as an object: absent → `{}`, anything else refused.
pub(crate) fn params(params: Option<&Payload>) -> Result<Option<Cow<'_, Payload>>, GatewayError> {
    object_params(params)
        .map(|p| Some(Cow::Owned(p)))
        .ok_or_else(|| {
            GatewayError::with_detail(
                ErrorKind::InvalidParams,
                "params must be an object for this upstream",
            )
        })
}
