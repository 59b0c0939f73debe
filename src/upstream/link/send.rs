//! What a [`Link`] writes: calls registered in its correlator and their
//! requests, batches, notifications and answers, encoded by the link's
//! codec and queued for its writer, in id order; refused locally when the
//! upstream could not take them (too long, queue full, link gone).
//!
//! NDJSON and JSON-RPC requests are rendered from their borrowed parts
//! (no message is built per request): on an NDJSON link straight into the
//! write queue, else up to the id before the correlator's lock. Requests
//! of the other dialects are encoded whole in a per-thread scratch buffer
//! and copied into the link's frame buffer.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use crate::dialect::jsonrpc::{
    finish_request, finish_request_into, render_request_head_into, render_request_into,
    request_len, Style,
};
use crate::dialect::link::{not_json, Frame, Scratch};
use crate::envelope::{Kind, Message, Method, Payload, WireId};
use crate::error::{ErrorKind, GatewayError, Side};
use crate::telemetry::metrics::Direction;

use super::super::correlator::Correlator;
use super::super::outlet::{LineQueue, Refused, Wire, MOVE_BYTES};
use super::{Link, Waiter};

/// Room for a request's end after its head: the longest id, `}` and `\n`.
const ID_ROOM: usize = 24;

/// How many recent batches are remembered for batch-wide error replies.
const BATCHES_REMEMBERED: usize = 64;

thread_local! {
    /// A request head's buffer between calls on this thread: taken by
    /// [`Link::request_head`] and given back by [`give_back_head`] once the
    /// head was copied (into a write queue), so that a head rendered
    /// before the locks costs no allocation.
    static HEAD: std::cell::Cell<String> = const { std::cell::Cell::new(String::new()) };
}

/// Largest head buffer a thread keeps between calls: a longer line is
/// moved into the write queue whole (`outlet::MOVE_BYTES`), not copied.
const HEAD_KEPT: usize = MOVE_BYTES;

/// Gives back a head taken by [`Link::request_head`] after its text was
/// copied, for the next request on this thread.
fn give_back_head(mut head: String) {
    if head.capacity() <= HEAD_KEPT {
        head.clear();
        HEAD.set(head);
    }
}

/// The upstream does not read its requests as fast as they come.
fn queue_full() -> GatewayError {
    GatewayError::with_detail(ErrorKind::ResourceExhausted, "upstream write queue full")
        .on(Side::Upstream)
}

fn connection_lost() -> GatewayError {
    GatewayError::with_detail(ErrorKind::Unavailable, "upstream connection lost").on(Side::Upstream)
}

/// What a line rendered into an NDJSON write queue gives `queue_request`:
/// its length to count, or why it was not queued.
fn rendered_in_queue(
    link: &Link,
    rendered: Result<usize, Refused<GatewayError>>,
) -> Result<Option<usize>, GatewayError> {
    match rendered {
        Ok(len) => Ok(Some(len)),
        Err(Refused::Full) => Err(link.queue_refusal()),
        Err(Refused::Render(e)) => Err(e),
    }
}

/// Takes back the ids of a batch that could not be sent.
fn cancel_all(table: &mut Correlator<Waiter>, ids: &[Option<u64>]) {
    for id in ids.iter().flatten() {
        table.cancel(*id);
    }
}

/// How a request's text is made once its gateway id is known.
enum Text<'a> {
    /// Rendered straight into this NDJSON link's write queue.
    InQueue(&'a LineQueue),
    /// Its text up to the id, rendered before the correlator's lock
    /// (CBOR params transcoded there); on an NDJSON link a short one is
    /// then copied into the write queue with its id.
    Head(String),
    /// Encoded whole (holon, Sideband) in a scratch buffer and queued as a
    /// frame.
    Whole,
}

// === impl Link ===

impl Link {
    /// Why the write queue refused a message: the link is gone
    /// (`unavailable`, as for a call in flight when it drops), or the queue
    /// is full.
    fn queue_refusal(&self) -> GatewayError {
        if self.out.is_closed() {
            connection_lost()
        } else {
            queue_full()
        }
    }

    /// Registers a call and queues its request. Returns the gateway id, or
    /// the error with the waiter back (it was never sent).
    // The waiter comes back by value, as it went in: a refusal allocates
    // nothing, and the common path never builds the error.
    #[allow(clippy::result_large_err)]
    pub(crate) fn send_request(
        &self,
        method: &str,
        params: Option<&Payload>,
        waiter: Waiter,
    ) -> Result<u64, (GatewayError, Option<Waiter>)> {
        // Params checked and the text rendered up to its id (NDJSON and
        // JSON-RPC) before the lock: the id is taken under it.
        let params = match self.codec.params(params) {
            Ok(p) => p,
            Err(e) => return Err((e, Some(waiter))),
        };
        // An NDJSON line whose params are JSON is rendered straight into
        // the write queue instead, under its lock: a copy. CBOR params
        // (Sideband v2 clients) are transcoded here, before any lock.
        let text = match self.out.lines() {
            Some(lines) if !matches!(params.as_deref(), Some(Payload::Cbor(_))) => {
                Text::InQueue(lines)
            }
            _ => match self.request_head(method, params.as_deref()) {
                Ok(Some(head)) => Text::Head(head),
                Ok(None) => Text::Whole,
                Err(e) => return Err((e, Some(waiter))),
            },
        };
        let direct = matches!(waiter, Waiter::Direct(..));
        let mut table = self.correlator.lock();
        let gid = table
            .insert(waiter)
            .map_err(|w| (GatewayError::new(ErrorKind::Unavailable), Some(w)))?;
        // Ordered (hld) connections rely on write order equal to id order:
        // the request is queued under the lock. Otherwise only the id is
        // taken under it: rendering and queueing (which may wake the writer
        // task, and a parked worker thread with it) happen after, while
        // client readers and the link's reader may want the table.
        let held = if self.shared.cfg.ordered_replies {
            Some(table)
        } else {
            drop(table);
            None
        };
        let queued = self.queue_request(text, gid, method, params.as_deref());
        let count_later = match queued {
            Ok(count_later) => count_later,
            Err(e) => {
                // Registered just above: `cancel` gives the waiter back
                // (unless the call was abandoned since the lock was let go),
                // and a Sideband link forgets the cid it issued for it.
                let mut table = held.unwrap_or_else(|| self.correlator.lock());
                let waiter = table.cancel(gid);
                drop(table);
                self.codec.forget(gid);
                return Err((e, waiter));
            }
        };
        drop(held);
        if let Some(len) = count_later {
            self.count_out([Kind::Request], len);
        }
        self.shared.entries_gauge().inc();
        // The flag is read after the lock that registered the call (see
        // `Link::sweep`).
        if direct && self.sweeper_idle.load(Ordering::SeqCst) {
            self.direct_added.notify_one();
        }
        Ok(gid)
    }

    /// Renders request `gid` as `text` says and queues it for the writer.
    /// Returns the length to count.
    fn queue_request(
        &self,
        text: Text<'_>,
        gid: u64,
        method: &str,
        params: Option<&Payload>,
    ) -> Result<Option<usize>, GatewayError> {
        let line = match text {
            Text::InQueue(lines) => {
                let rendered = lines.push_with(request_len(method, params), |out| {
                    let start = out.len();
                    render_request_into(gid, method, params, self.codec.style(), out)
                        .map_err(|_| not_json())?;
                    self.check_len(out.len() - start)
                });
                return rendered_in_queue(self, rendered);
            }
            Text::Head(head) => match self.out.lines() {
                Some(lines) if head.len() + ID_ROOM <= MOVE_BYTES => {
                    let rendered = lines.push_with(head.len() + ID_ROOM, |out| {
                        let start = out.len();
                        out.push_str(&head);
                        finish_request_into(out, gid);
                        self.check_len(out.len() - start)
                    });
                    give_back_head(head);
                    return rendered_in_queue(self, rendered);
                }
                Some(_) => {
                    let line = finish_request(head, gid);
                    self.check_len(line.len())?;
                    Wire::Text(line)
                }
                // A WebSocket link: the frame is copied into the link's
                // frame buffer (a small one) and the head's buffer kept.
                None => {
                    let mut text = head;
                    finish_request_into(&mut text, gid);
                    let checked = self.check_len(text.len());
                    let sent = checked.is_ok()
                        && self.out.frames().is_some_and(|f| f.try_send_text(&text));
                    let len = text.len();
                    give_back_head(text);
                    checked?;
                    return if sent {
                        Ok(Some(len))
                    } else {
                        Err(self.queue_refusal())
                    };
                }
            },
            Text::Whole => {
                let msg = Message::Request {
                    id: self.codec.wire_id(gid),
                    method: method.into(),
                    params: params.cloned(),
                };
                if let Some(frames) = self.out.frames() {
                    let queued = self.codec.encode_scratch(&msg, |frame| {
                        let (len, sent) = match frame {
                            Scratch::Text(text) => {
                                self.check_len(text.len())?;
                                (text.len(), frames.try_send_text(text))
                            }
                            Scratch::Binary(bytes) => {
                                self.check_len(bytes.len())?;
                                (bytes.len(), frames.try_send_binary(bytes))
                            }
                        };
                        if sent {
                            Ok(Some(len))
                        } else {
                            Err(self.queue_refusal())
                        }
                    });
                    if let Some(queued) = queued {
                        return queued;
                    }
                }
                // Counted as it is encoded.
                let wire = self.encode(&msg)?;
                self.out.try_send(wire).map_err(|_| self.queue_refusal())?;
                return Ok(None);
            }
        };
        let len = line.len();
        self.out.try_send(line).map_err(|_| self.queue_refusal())?;
        Ok(Some(len))
    }

    /// For NDJSON and JSON-RPC upstreams, a request's text up to its id
    /// (the id comes last): [`Link::send_request`] renders it before it
    /// takes the correlator's lock, which then only adds the id. `None`
    /// for the dialects whose requests are encoded whole. The head is this
    /// thread's buffer when it has one: give it back ([`give_back_head`])
    /// if it is copied rather than sent.
    fn request_head(
        &self,
        method: &str,
        params: Option<&Payload>,
    ) -> Result<Option<String>, GatewayError> {
        if !self.codec.renders_heads() {
            return Ok(None);
        }
        // The same text as `encode` of that message: these dialects' wire
        // id is the number itself.
        let mut head = HEAD.take();
        head.reserve(request_len(method, params));
        match render_request_head_into(method, params, self.codec.style(), &mut head) {
            Ok(()) => Ok(Some(head)),
            Err(_) => {
                give_back_head(head);
                Err(not_json())
            }
        }
    }

    /// Registers the requests of a batch and queues it as one JSON array.
    /// `waiters[i]` is `Some` for requests and `None` for notifications;
    /// returns the gateway id of each request (`None` for notifications).
    pub(crate) fn send_batch(
        &self,
        calls: &[(&str, Option<&Payload>)],
        waiters: Vec<Option<Waiter>>,
    ) -> Result<Vec<Option<u64>>, GatewayError> {
        let mut table = self.correlator.lock();
        let mut ids = Vec::with_capacity(calls.len());
        let mut msgs = Vec::with_capacity(calls.len());
        for ((method, params), waiter) in calls.iter().zip(waiters) {
            let params = match self.codec.params(*params) {
                Ok(p) => p.map(Cow::into_owned),
                Err(e) => {
                    cancel_all(&mut table, &ids);
                    return Err(e);
                }
            };
            let method = Method::from(*method);
            match waiter {
                Some(w) => {
                    let Ok(gid) = table.insert(w) else {
                        cancel_all(&mut table, &ids);
                        return Err(GatewayError::new(ErrorKind::Unavailable));
                    };
                    ids.push(Some(gid));
                    // A batch is JSON-RPC's: its items carry the number itself.
                    msgs.push(Message::Request {
                        id: WireId::number(gid),
                        method,
                        params,
                    });
                }
                None => {
                    ids.push(None);
                    msgs.push(Message::Notification { method, params });
                }
            }
        }
        let sent = self.codec.encode_batch(&msgs).and_then(|text| {
            self.check_len(text.len())?;
            self.count_out(msgs.iter().map(Message::kind), text.len());
            self.out
                .try_send(Wire::Text(text))
                .map_err(|_| self.queue_refusal())
        });
        if let Err(e) = sent {
            cancel_all(&mut table, &ids);
            return Err(e);
        }
        // Lock order is batches → correlator (see fail_oldest_batch).
        drop(table);
        let requests: Vec<u64> = ids.iter().flatten().copied().collect();
        self.shared.entries_gauge().add(requests.len() as i64);
        let mut batches = self.batches.lock();
        batches.push_back(requests);
        if batches.len() > BATCHES_REMEMBERED {
            batches.pop_front();
        }
        Ok(ids)
    }

    /// Queues a notification.
    pub(crate) fn send_notification(
        &self,
        method: &str,
        params: Option<&Payload>,
    ) -> Result<(), GatewayError> {
        let msg = Message::Notification {
            method: method.into(),
            params: self.codec.params(params)?.map(Cow::into_owned),
        };
        let line = self.encode(&msg)?;
        self.out.try_send(line).map_err(|_| self.queue_refusal())
    }

    /// Encodes a message for this upstream, enforcing its size limit, and
    /// counts it as written.
    pub(super) fn encode(&self, msg: &Message) -> Result<Wire, GatewayError> {
        let wire = match self.codec.encode(msg)? {
            Frame::Text(text) => Wire::Text(text),
            Frame::Binary(bytes) => Wire::Binary(bytes.into()),
        };
        self.check_len(wire.len())?;
        self.count_out([msg.kind()], wire.len());
        Ok(wire)
    }

    /// Counts what is about to be written to the upstream: messages of
    /// `kinds` in one frame of `len` bytes.
    fn count_out(&self, kinds: impl IntoIterator<Item = Kind>, len: usize) {
        let m = &self.shared.metrics;
        let d = self.shared.cfg.dialect;
        for kind in kinds {
            m.count_message(d, Side::Upstream, Direction::Out, kind);
        }
        m.count_frame(d, Side::Upstream, Direction::Out, len);
    }

    /// Refuses a text of `len` bytes the upstream would not accept (a
    /// line's `\n` counts).
    fn check_len(&self, len: usize) -> Result<(), GatewayError> {
        let framed_len = len + usize::from(self.codec.style() == Style::Line);
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
