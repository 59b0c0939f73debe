//! What a [`Link`] writes: gateway ids, params and texts in the upstream's
//! dialect, refused locally when the upstream could not take them.
//!
//! - NDJSON: JSON-RPC lines, integer ids, payloads minified onto one line.
//! - JSON-RPC WS: JSON-RPC text frames, integer ids.
//! - holon-rpc: string ids `"1"`, `"2"`, …; params always an object (absent
//!   → `{}`, anything else refused with `invalid_params`).

use std::borrow::Cow;

use parking_lot::MutexGuard;

use crate::dialect::holon::object_params;
use crate::dialect::render::{
    finish_request, finish_request_into, render, render_batch, render_request_head_into,
    render_request_into, render_scratch, request_len, Style,
};
use crate::dialect::sideband::session::{encode_shared, encode_shared_with};
use crate::dialect::sideband::{EnvelopeError, Member};
use crate::dialect::Dialect;
use crate::envelope::{raw_from_string, Kind, Message, Payload, WireId};
use crate::error::{ErrorKind, GatewayError, Side};
use crate::telemetry::metrics::Direction;
use crate::upstream::correlator::parse_gateway_id;

use super::link::{Link, Wire};
use super::outlet::MOVE_BYTES;

thread_local! {
    /// A request head's buffer between calls on this thread: taken by
    /// [`Link::request_head`] and given back by [`give_back_head`] once the
    /// head was copied (into an NDJSON link's write queue), so that a head
    /// rendered before the locks costs no allocation.
    static HEAD: std::cell::Cell<String> = const { std::cell::Cell::new(String::new()) };
}

/// Largest head buffer a thread keeps between calls: a longer line is
/// moved into the write queue whole (`outlet::MOVE_BYTES`), not copied.
const HEAD_KEPT: usize = MOVE_BYTES;

/// Gives back a head taken by [`Link::request_head`] after its text was
/// copied, for the next request on this thread.
pub(super) fn give_back_head(mut head: String) {
    if head.capacity() <= HEAD_KEPT {
        head.clear();
        HEAD.set(head);
    }
}

// === impl Link ===

impl Link {
    /// The wire id for gateway id `gid` in the upstream's dialect: a
    /// number, a decimal string (holon), or a fresh random cid (Sideband,
    /// which is also the request frame's id).
    pub(super) fn wire_id(&self, gid: u64) -> WireId {
        if let Some(sb) = self.sideband() {
            return WireId::Cid(sb.lock().cids.issue(gid));
        }
        match self.shared.cfg.dialect {
            Dialect::Holon => WireId::number_string(gid),
            // Sideband links issued a cid above.
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::Sideband | Dialect::JsonRpcHttp => {
                WireId::number(gid)
            }
        }
    }

    /// The gateway id a reply's cid stands for (Sideband); forgets it.
    pub(super) fn gid_of_cid(&self, cid: &[u8; 16]) -> Option<u64> {
        self.sideband()?.lock().cids.take(cid)
    }

    /// Forgets the cid of an abandoned or cancelled gateway id.
    pub(super) fn forget_gid(&self, gid: u64) {
        if let Some(sb) = self.sideband() {
            sb.lock().cids.forget(gid);
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
            Dialect::JsonRpc | Dialect::Ndjson | Dialect::Sideband | Dialect::JsonRpcHttp => {
                parse_gateway_id(token)
            }
        }
    }

    /// The params to send for a request or notification: the client's
    /// own (borrowed) unless the upstream needs them changed.
    pub(super) fn params<'a>(
        &self,
        params: Option<&'a Payload>,
    ) -> Result<Option<Cow<'a, Payload>>, GatewayError> {
        if self.shared.cfg.dialect == Dialect::Holon {
            return object_params(params)
                .map(|p| Some(Cow::Owned(p)))
                .ok_or_else(|| {
                    GatewayError::with_detail(
                        ErrorKind::InvalidParams,
                        "params must be an object for this upstream",
                    )
                });
        }
        Ok(match params {
            Some(p) if self.shared.cfg.dialect == Dialect::Sideband => Some(Cow::Borrowed(p)),
            Some(p) if !crate::dialect::holon::is_structured(p) => {
                return Err(GatewayError::with_detail(
                    ErrorKind::InvalidParams,
                    "params must be an array or an object for this upstream",
                ))
            }
            Some(p) => Some(Cow::Borrowed(p)),
            // Most hld handlers fail on absent params.
            None if self.shared.cfg.fill_empty_params => Some(Cow::Owned(Payload::Json(
                raw_from_string(String::from("{}")),
            ))),
            None => None,
        })
    }

    /// Renders a batch for this upstream, enforcing its size limit.
    pub(super) fn encode_batch(&self, msgs: &[Message]) -> Result<Wire, GatewayError> {
        let text = render_batch(msgs, self.style()).map_err(|_| not_json())?;
        let wire = self.check_size(Wire::Text(text))?;
        self.count_out(msgs.iter().map(Message::kind), &wire);
        Ok(wire)
    }

    /// Renders a message for this upstream, enforcing its size limit.
    pub(super) fn encode(&self, msg: &Message) -> Result<Wire, GatewayError> {
        if let Some(sb) = self.sideband() {
            let frame = encode_shared(|| MutexGuard::map(sb.lock(), |s| &mut s.sbp), msg)
                .map_err(not_encodable)?;
            let wire = self.check_size(Wire::Binary(frame.into()))?;
            self.count_out([msg.kind()], &wire);
            return Ok(wire);
        }
        let text = render(msg, self.style()).map_err(|_| not_json())?;
        let wire = self.check_size(Wire::Text(text))?;
        self.count_out([msg.kind()], &wire);
        Ok(wire)
    }

    /// Renders request `gid` for this upstream, enforcing its size limit.
    /// NDJSON and JSON-RPC upstreams get it rendered from the borrowed
    /// parts: no message is built, so the method, params and id are not
    /// copied per request (the common path).
    pub(super) fn encode_request(
        &self,
        gid: u64,
        method: &str,
        params: Option<&Payload>,
    ) -> Result<Wire, GatewayError> {
        let wire = match self.request_head(method, params)? {
            Some(head) => self.finish_request(head, gid)?,
            None => {
                let msg = Message::Request {
                    id: self.wire_id(gid),
                    method: method.into(),
                    params: params.cloned(),
                };
                return self.encode(&msg);
            }
        };
        self.count_out([Kind::Request], &wire);
        Ok(wire)
    }

    /// A request encoded whole (holon-rpc, Sideband) on a WebSocket link:
    /// encoded in this thread's scratch buffer and queued as a frame (a
    /// short one copied into the link's frame buffer: no allocation). The
    /// length to count, or why it was not queued. `None` for NDJSON links
    /// and long holon requests, which are encoded whole
    /// ([`Self::encode_request`]).
    pub(super) fn queue_whole_frame(
        &self,
        gid: u64,
        method: &str,
        params: Option<&Payload>,
    ) -> Option<Result<Option<usize>, GatewayError>> {
        let frames = self.out.frames()?;
        let msg = Message::Request {
            id: self.wire_id(gid),
            method: method.into(),
            params: params.cloned(),
        };
        if let Some(sb) = self.sideband() {
            let lock = || MutexGuard::map(sb.lock(), |s| &mut s.sbp);
            let queued = encode_shared_with(lock, &msg, |frame| {
                self.check_len(frame.len())?;
                if frames.try_send_binary(frame) {
                    Ok(Some(frame.len()))
                } else {
                    Err(self.queue_refusal())
                }
            });
            return Some(queued.map_err(not_encodable).and_then(|queued| queued));
        }
        let queued = render_scratch(&msg, self.style(), |text| {
            self.check_len(text.len())?;
            if frames.try_send_text(text) {
                Ok(Some(text.len()))
            } else {
                Err(self.queue_refusal())
            }
        })?;
        Some(queued.unwrap_or_else(|_| Err(not_json())))
    }

    /// For NDJSON and JSON-RPC upstreams, a request's text up to its id
    /// (the id comes last): [`Link::send_request`] renders it before it
    /// takes the correlator's lock, which then only adds the id. `None`
    /// for the dialects whose requests are encoded whole. The head is this
    /// thread's buffer when it has one: give it back ([`give_back_head`])
    /// if it is copied rather than sent.
    pub(super) fn request_head(
        &self,
        method: &str,
        params: Option<&Payload>,
    ) -> Result<Option<String>, GatewayError> {
        let plain = matches!(self.shared.cfg.dialect, Dialect::Ndjson | Dialect::JsonRpc);
        if !plain || self.sideband().is_some() {
            return Ok(None);
        }
        // The same text as `encode` of that message: these dialects' wire
        // id is the number itself (see `wire_id`).
        let mut head = HEAD.take();
        head.reserve(request_len(method, params));
        match render_request_head_into(method, params, self.style(), &mut head) {
            Ok(()) => Ok(Some(head)),
            Err(_) => {
                give_back_head(head);
                Err(not_json())
            }
        }
    }

    /// Ends a [`Self::request_head`] text with request id `gid`, enforcing
    /// the upstream's size limit. Not counted yet: see
    /// [`Self::count_request`].
    pub(super) fn finish_request(&self, head: String, gid: u64) -> Result<Wire, GatewayError> {
        self.check_size(Wire::Text(finish_request(head, gid)))
    }

    /// Appends a [`Self::request_head`] text ended with request id `gid`
    /// to `out` (an NDJSON link's write queue), enforcing the upstream's
    /// size limit. Not counted yet: see [`Self::count_request`].
    pub(super) fn finish_request_into(
        &self,
        head: &str,
        gid: u64,
        out: &mut String,
    ) -> Result<(), GatewayError> {
        let start = out.len();
        out.push_str(head);
        finish_request_into(out, gid);
        self.check_len(out.len() - start)
    }

    /// Appends request `gid`'s text to `out` (an NDJSON link's write
    /// queue: see `outlet::LineQueue::push_with`), enforcing the
    /// upstream's size limit. Not counted yet: see [`Self::count_request`].
    pub(super) fn render_request_into(
        &self,
        gid: u64,
        method: &str,
        params: Option<&Payload>,
        out: &mut String,
    ) -> Result<(), GatewayError> {
        let start = out.len();
        render_request_into(gid, method, params, self.style(), out).map_err(|_| not_json())?;
        self.check_len(out.len() - start)
    }

    /// Counts a request line of `len` bytes from [`Self::finish_request`]
    /// or [`Self::render_request_into`] as written.
    pub(super) fn count_request(&self, len: usize) {
        let m = &self.shared.metrics;
        let d = self.shared.cfg.dialect;
        m.count_message(d, Side::Upstream, Direction::Out, Kind::Request);
        m.count_frame(d, Side::Upstream, Direction::Out, len);
    }

    fn style(&self) -> Style {
        match self.shared.cfg.dialect {
            Dialect::Ndjson => Style::Line,
            Dialect::Holon => Style::Holon,
            Dialect::JsonRpc | Dialect::Sideband | Dialect::JsonRpcHttp => Style::Frame,
        }
    }

    /// Counts what is about to be written to the upstream.
    fn count_out(&self, kinds: impl IntoIterator<Item = Kind>, wire: &Wire) {
        let m = &self.shared.metrics;
        let d = self.shared.cfg.dialect;
        for kind in kinds {
            m.count_message(d, Side::Upstream, Direction::Out, kind);
        }
        m.count_frame(d, Side::Upstream, Direction::Out, wire.len());
    }

    /// Refuses a text the upstream would not accept.
    fn check_size(&self, text: Wire) -> Result<Wire, GatewayError> {
        self.check_len(text.len()).map(|()| text)
    }

    /// Refuses a text of `len` bytes the upstream would not accept.
    pub(super) fn check_len(&self, len: usize) -> Result<(), GatewayError> {
        let framed_len = len + usize::from(self.style() == Style::Line);
        if framed_len > self.shared.cfg.max_request_bytes {
            return Err(GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                format!(
                    "message of {framed_len} bytes exceeds the upstream limit of {} bytes",
                    self.shared.cfg.max_request_bytes
                ),
            ));
        }
        Ok(())
    }
}

/// A message the Sideband envelope cannot carry: params that do not
/// transcode are the caller's fault, anything else ours.
fn not_encodable(e: EnvelopeError) -> GatewayError {
    match e {
        EnvelopeError::Transcode {
            member: Member::P, ..
        } => GatewayError::with_detail(ErrorKind::InvalidParams, e.to_string()),
        other => GatewayError::with_detail(ErrorKind::Internal, other.to_string()),
    }
}

fn not_json() -> GatewayError {
    GatewayError::with_detail(ErrorKind::InvalidParams, "params cannot be carried as JSON")
}

#[cfg(test)]
mod tests {
    use super::{give_back_head, HEAD, HEAD_KEPT};

    /// The head buffer a thread keeps is at most `HEAD_KEPT` bytes, and it
    /// comes back empty.
    #[test]
    fn a_thread_keeps_one_head_buffer_within_its_bound() {
        let mut head = String::with_capacity(100);
        head.push_str("{\"jsonrpc\":\"2.0\"");
        give_back_head(head);
        let kept = HEAD.take();
        assert!(kept.is_empty() && kept.capacity() >= 100);
        give_back_head(String::with_capacity(HEAD_KEPT + 1));
        assert_eq!(HEAD.take().capacity(), 0, "a larger buffer is let go");
    }
}
