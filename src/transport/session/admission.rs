//! Admission of client messages: rate limits (a request over a limit is
//! answered, a notification dropped, an abuser closed; each logged,
//! throttled per listener and reason).

use std::net::{IpAddr, Ipv4Addr};

use super::{Session, Verdict};
use crate::close::CloseCode;
use crate::dialect::Item;
use crate::envelope::Message;
use crate::error::{ErrorKind, GatewayError};
use crate::limits::rate::{Limited, Verdict as RateVerdict};
use crate::telemetry::metrics::{DropReason, Limit};

/// An item after the rate limits.
pub(super) enum Checked {
    /// Within the limits.
    Pass(Item),
    /// A request over a limit: answer it with this error.
    Limited(Message),
    /// A notification over a limit: dropped (counted).
    Dropped,
}

// === impl Session ===

impl Session {
    /// Charges a request or notification against the rate limits. Over a
    /// limit, a request becomes its `rate_limited` error reply and a
    /// notification is dropped (`Ok(None)`), counted; past the abuse
    /// threshold the connection is closed (1008).
    pub(super) fn rate_check(&self, item: Item) -> Result<Checked, Verdict> {
        let (Item::Valid(Message::Request { method, .. })
        | Item::Valid(Message::Notification { method, .. })) = &item
        else {
            return Ok(Checked::Pass(item));
        };
        let listener = self.listener();
        if listener.rate().is_off() {
            return Ok(Checked::Pass(item));
        }
        let verdict = {
            let mut rate = self.rate.lock();
            // First use, or the listener's rates changed in a reload: this
            // connection's own bucket starts over under the new ones.
            let rate = match &mut *rate {
                Some(r) if r.follows(listener.rate()) => r,
                slot => slot.insert(
                    listener
                        .rate()
                        .connection(self.peer.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))),
                ),
            };
            rate.check(method)
        };
        let limited = match verdict {
            RateVerdict::Allow => return Ok(Checked::Pass(item)),
            RateVerdict::Limit(l) | RateVerdict::Abuse(l) => l,
        };
        listener.count_limit(limit_label(limited));
        if let RateVerdict::Abuse(_) = verdict {
            let reason = "rate limit exceeded";
            listener.log_closed(CloseCode::PolicyViolation, reason, self.peer());
            // Closing anyway: a client that is not reading is cut off
            // without the close frame.
            self.outbox.try_close(CloseCode::PolicyViolation, reason);
            return Err(Verdict::Close(CloseCode::PolicyViolation));
        }
        listener.log_refused_request(refusal_reason(limited), self.peer());
        match item {
            Item::Valid(Message::Request { id, .. }) => {
                let err = GatewayError::with_detail(ErrorKind::RateLimited, limited.as_str());
                Ok(Checked::Limited(listener.router().error_reply(id, &err)))
            }
            _ => {
                listener.count_dropped(DropReason::RateLimited);
                Ok(Checked::Dropped)
            }
        }
    }
}

/// The reason a log line gives for a request or notification over a
/// rate limit.
fn refusal_reason(limited: Limited) -> &'static str {
    match limited {
        Limited::Connection => "rate limited: connection",
        Limited::Ip => "rate limited: ip",
        Limited::Global => "rate limited: global",
    }
}

fn limit_label(limited: Limited) -> Limit {
    match limited {
        Limited::Connection => Limit::RatePerSecond,
        Limited::Ip => Limit::IpRatePerSecond,
        Limited::Global => Limit::GlobalRatePerSecond,
    }
}
