//! What a [`Link`] reads: replies settled by gateway id, batch replies,
//! heartbeat acknowledgements, and upstream-originated requests and
//! notifications (to the owning client in per-client mode; answered or
//! counted here in shared mode).

use std::sync::Arc;

use bytestring::ByteString;
use parking_lot::MutexGuard;
use serde_json::value::RawValue;

use super::link::{Link, ReplyResult, Waiter, Wire};
use crate::dialect::errors;
use crate::dialect::jsonrpc::{decode_upstream_in, ReplyError};
use crate::dialect::sideband::session::{on_frame_shared, SbpEvent};
use crate::dialect::Dialect;
use crate::envelope::{raw_from_string, ErrorObject, Message, Method, Outcome, Payload, WireId};
use crate::error::{ErrorKind, ErrorOrigin, GatewayError, Side};
use crate::telemetry::metrics::{Direction, DropReason, ProtocolError, Unmatched};
use crate::upstream::correlator::Resolution;

// === impl Link ===

impl Link {
    /// Handles one inbound text (a message or a batch reply). Returns false
    /// when the link must close.
    pub(super) fn on_text(self: &Arc<Self>, text: &ByteString) -> bool {
        let d = self.shared.cfg.dialect;
        self.shared
            .metrics
            .count_frame(d, Side::Upstream, Direction::In, text.len());
        if text.len() > self.shared.cfg.max_response_bytes {
            return self.too_large(text);
        }
        if text.trim_start().starts_with('[') {
            let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) else {
                self.shared
                    .count_protocol_error(ProtocolError::InvalidMessage);
                return true;
            };
            return items
                .iter()
                .all(|item| self.on_message(text, item.get(), true));
        }
        self.on_message(text, text, false)
    }

    /// A reply above `max_response_bytes`: its own call fails with
    /// `resource_exhausted`; the connection and every other call live on.
    fn too_large(&self, text: &str) -> bool {
        #[derive(serde::Deserialize)]
        struct IdOnly<'a> {
            #[serde(borrow)]
            id: Option<&'a RawValue>,
        }
        self.shared
            .count_protocol_error(ProtocolError::ResponseTooLarge);
        let id = serde_json::from_str::<IdOnly<'_>>(text)
            .ok()
            .and_then(|m| m.id);
        let gid = id.and_then(|id| self.parse_id(id.get()));
        let detail = format!(
            "reply of {} bytes exceeds the upstream's max_response_bytes of {}",
            text.len(),
            self.shared.cfg.max_response_bytes
        );
        if gid.is_none() && !self.shared.cfg.ordered_replies {
            self.shared.count_dropped(DropReason::ResponseTooLarge);
            return true;
        }
        self.settle(
            gid,
            Err(GatewayError::with_detail(ErrorKind::ResourceExhausted, detail).on(Side::Upstream)),
        )
    }

    /// Handles one inbound message (`text`, within `source`). Returns
    /// false when the link must close.
    fn on_message(self: &Arc<Self>, source: &ByteString, text: &str, in_batch: bool) -> bool {
        let msg = match decode_upstream_in(source, text) {
            Ok(msg) => msg,
            Err(ReplyError::InvalidReply { id, why }) => {
                // The call gets `internal`, with the raw reply as detail.
                self.shared
                    .count_protocol_error(ProtocolError::InvalidReply);
                let gid = id.as_json().and_then(|t| self.parse_id(t));
                let detail = format!(
                    "invalid reply from upstream ({why}): {}",
                    truncate(text, 512)
                );
                let err = GatewayError::with_detail(ErrorKind::Internal, detail);
                return self.settle(gid, Err(err.on(Side::Upstream)));
            }
            Err(e) => {
                tracing::debug!(upstream = %self.shared.cfg.name, error = %e, "invalid message from upstream");
                self.shared
                    .count_protocol_error(ProtocolError::InvalidMessage);
                return true;
            }
        };
        self.on_decoded(msg, in_batch)
    }

    /// Handles one inbound binary frame (Sideband). Returns false when the
    /// link must close.
    pub(super) fn on_frame(self: &Arc<Self>, bytes: &bytes::Bytes) -> bool {
        let Some(sb) = self.sideband() else {
            return false;
        };
        let d = self.shared.cfg.dialect;
        self.shared
            .metrics
            .count_frame(d, Side::Upstream, Direction::In, bytes.len());
        let event = on_frame_shared(|| MutexGuard::map(sb.lock(), |s| &mut s.sbp), bytes);
        match event {
            SbpEvent::Nothing | SbpEvent::Ready => true,
            SbpEvent::Dropped(reason) => {
                self.shared.count_dropped(DropReason::Sideband(reason));
                true
            }
            SbpEvent::Send(frame) => {
                if self.out.try_send(Wire::Binary(frame.into())).is_err() {
                    self.shared.count_dropped(DropReason::UpstreamQueueFull);
                }
                true
            }
            SbpEvent::Rpc(msg) => self.on_decoded(msg, false),
            SbpEvent::InvalidEnvelope { cid, reply, detail } => match self.gid_of_cid(&cid) {
                // An unreadable reply to one of our calls settles it at once.
                Some(gid) => {
                    self.shared
                        .count_protocol_error(ProtocolError::InvalidReply);
                    let detail = format!("invalid reply from upstream ({detail})");
                    let err = GatewayError::with_detail(ErrorKind::Internal, detail);
                    self.settle(Some(gid), Err(err.on(Side::Upstream)))
                }
                None => {
                    self.shared
                        .count_protocol_error(ProtocolError::InvalidEnvelope);
                    if reply.is_some_and(|f| self.out.try_send(Wire::Binary(f.into())).is_err()) {
                        self.shared.count_dropped(DropReason::UpstreamQueueFull);
                    }
                    true
                }
            },
            SbpEvent::PeerError { id, code, message } => match self.gid_of_cid(&id) {
                // An ErrorFrame about one of our requests settles it.
                Some(gid) => {
                    let origin = ErrorOrigin {
                        dialect: Dialect::Sideband.as_str(),
                        code: i64::from(code),
                        message,
                    };
                    let err = GatewayError::with_origin(ErrorKind::Internal, origin);
                    self.settle(Some(gid), Err(err.on(Side::Upstream)))
                }
                None => {
                    tracing::debug!(upstream = %self.shared.cfg.name, code, message, "ErrorFrame from upstream");
                    self.shared
                        .count_protocol_error(ProtocolError::PeerErrorFrame);
                    true
                }
            },
            SbpEvent::Close {
                frame,
                code,
                reason,
            } => {
                tracing::warn!(upstream = %self.shared.cfg.name, code = code.as_u16(), %reason, "closing Sideband upstream link");
                // The writer sends it last, whatever is still queued.
                self.set_farewell(super::sideband::Farewell {
                    frame,
                    code,
                    reason,
                });
                false
            }
        }
    }

    /// Dispatches one decoded message. Returns false when the link must close.
    fn on_decoded(self: &Arc<Self>, msg: Message, in_batch: bool) -> bool {
        let d = self.shared.cfg.dialect;
        self.shared
            .metrics
            .count_message(d, Side::Upstream, Direction::In, msg.kind());
        match msg {
            Message::Response {
                id: WireId::Cid(cid),
                ..
            }
            | Message::Error {
                id: Some(WireId::Cid(cid)),
                ..
            } => match self.gid_of_cid(&cid) {
                Some(gid) => self.settle(Some(gid), Ok(msg)),
                None => {
                    self.shared.count_unmatched(Unmatched::Unknown);
                    true
                }
            },
            Message::Response { ref id, .. }
            | Message::Error {
                id: Some(ref id), ..
            } if id.as_json() != Some("null") => {
                let token = id.as_json().unwrap_or_default();
                if self.heartbeat_acked(token) {
                    return true;
                }
                let gid = self.parse_id(token);
                self.settle(gid, Ok(msg))
            }
            Message::Error { error, .. } => {
                if self.shared.cfg.ordered_replies {
                    self.settle(None, Ok(Message::Error { id: None, error }))
                } else if !in_batch && self.fail_oldest_batch(&error) {
                    true
                } else {
                    self.shared.count_unmatched(Unmatched::NoId);
                    true
                }
            }
            Message::Request { id, method, params } => {
                self.upstream_request(id, method, params);
                true
            }
            Message::Notification { method, params } => {
                self.upstream_notification(method, params);
                true
            }
            Message::Response { .. } => {
                self.shared.count_unmatched(Unmatched::NoId);
                true
            }
        }
    }

    /// Delivers a reply to its waiter. Returns false when the connection is
    /// out of sync and must close.
    fn settle(&self, gid: Option<u64>, reply: ReplyResult) -> bool {
        let mut table = self.correlator.lock();
        let resolution = if self.shared.cfg.ordered_replies {
            match table.resolve_ordered(gid) {
                Ok(r) => r,
                Err(e) => {
                    drop(table);
                    tracing::warn!(upstream = %self.shared.cfg.name, error = %e, "upstream replies out of order; closing the connection");
                    self.shared.count_protocol_error(ProtocolError::OutOfOrder);
                    return false;
                }
            }
        } else {
            gid.map_or(Resolution::Unknown, |gid| table.resolve(gid))
        };
        let drained = self.is_retiring() && table.is_empty() && table.unanswered() == 0;
        drop(table);
        match resolution {
            Resolution::Pending(waiter) => {
                self.shared.entries_gauge().dec();
                if !waiter.complete(reply) {
                    self.shared.count_dropped(DropReason::ClientGone);
                }
            }
            Resolution::Stale => self.shared.count_unmatched(Unmatched::Stale),
            Resolution::Duplicate => self.shared.count_unmatched(Unmatched::Duplicate),
            Resolution::Unknown => self.shared.count_unmatched(Unmatched::Unknown),
        }
        !drained
    }

    /// A single error without id in reply to a batch applies to every
    /// request of the oldest batch still waiting. Returns false if no batch
    /// was waiting.
    fn fail_oldest_batch(&self, error: &ErrorObject) -> bool {
        let mut batches = self.batches.lock();
        let mut table = self.correlator.lock();
        while let Some(ids) = batches.pop_front() {
            let waiters: Vec<Waiter> = ids
                .iter()
                .filter_map(|id| match table.resolve(*id) {
                    Resolution::Pending(w) => Some(w),
                    _ => None,
                })
                .collect();
            if waiters.is_empty() {
                continue;
            }
            drop(table);
            self.shared.entries_gauge().sub(waiters.len() as i64);
            for w in waiters {
                let reply = Message::Error {
                    id: None,
                    error: error.clone(),
                };
                if !w.complete(Ok(reply)) {
                    self.shared.count_dropped(DropReason::ClientGone);
                }
            }
            return true;
        }
        false
    }

    /// An upstream-originated request: to the owning client (per-client
    /// mode), or answered here (shared mode has no owner).
    fn upstream_request(self: &Arc<Self>, id: WireId, method: Method, params: Option<Payload>) {
        if method == "rpc.heartbeat" {
            let ok = Message::Response {
                id,
                result: Outcome::Value(Payload::Json(raw_from_string(String::from("{}")))),
            };
            self.send_reply_message(&ok);
            return;
        }
        let Some(owner) = &self.owner else {
            tracing::debug!(upstream = %self.shared.cfg.name, %method, "refusing upstream-originated request");
            self.shared.count_dropped(DropReason::UpstreamRequest);
            self.send_reply(id, Err(GatewayError::no_route(&method)));
            return;
        };
        match owner.push_request(&method, params) {
            Ok(pending) => {
                let link = self.clone();
                tokio::spawn(async move {
                    let reply = pending.await;
                    link.send_reply(id, reply);
                });
            }
            Err(e) => self.send_reply(id, Err(e)),
        }
    }

    /// An upstream notification: to the owning client, or (shared mode)
    /// published to the pub/sub broker (and the store, through the link's
    /// backlog, which the reader hands off before it reads on).
    fn upstream_notification(&self, method: Method, params: Option<Payload>) {
        match &self.owner {
            Some(owner) => owner.push_notification(&method, params),
            None => self
                .shared
                .publish_notification(&method, params, &self.backlog),
        }
    }

    /// Answers an upstream-originated request with its upstream id.
    pub(crate) fn send_reply(&self, id: WireId, reply: Result<Message, GatewayError>) {
        let msg = match reply {
            Ok(Message::Response { result, .. }) => Message::Response { id, result },
            Ok(Message::Error { error, .. }) => Message::Error {
                id: Some(id),
                error,
            },
            Ok(_) => Message::error(
                Some(id),
                errors::render(
                    &GatewayError::new(ErrorKind::Internal),
                    self.shared.cfg.dialect,
                ),
            ),
            Err(e) => Message::error(Some(id), errors::render(&e, self.shared.cfg.dialect)),
        };
        self.send_reply_message(&msg);
    }

    fn send_reply_message(&self, msg: &Message) {
        match self.encode(msg) {
            // A full queue means the upstream is not reading; the reply can go.
            Ok(text) => {
                if self.out.try_send(text).is_err() {
                    self.shared.count_dropped(DropReason::UpstreamQueueFull);
                }
            }
            Err(e) => {
                tracing::debug!(upstream = %self.shared.cfg.name, error = %e, "reply to upstream not sent")
            }
        }
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
