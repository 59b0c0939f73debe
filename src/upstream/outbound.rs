//! What a [`Link`] writes: calls registered in its correlator and their
//! requests, batches and notifications queued for its writer task, in id
//! order. (What it reads is in `inbound`, how a message is rendered for
//! the upstream in `encode`.)

use std::sync::atomic::Ordering;

use crate::dialect::render::{finish_request_into, request_len};
use crate::envelope::{Message, Method, Payload, WireId};
use crate::error::{ErrorKind, GatewayError, Side};
use crate::upstream::correlator::Correlator;

use super::encode::give_back_head;
use super::link::{Link, Waiter};
use super::outlet::{LineQueue, Refused, MOVE_BYTES};

/// Room for a request's end after its head: the longest id, `}` and `\n`.
const ID_ROOM: usize = 24;

/// How many recent batches are remembered for batch-wide error replies.
const BATCHES_REMEMBERED: usize = 64;

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
    /// frame (`queue_whole_frame`).
    Whole,
}

// === impl Link ===

impl Link {
    /// Why the write queue refused a message: the link is gone
    /// (`unavailable`, as for a call in flight when it drops), or the queue
    /// is full.
    pub(super) fn queue_refusal(&self) -> GatewayError {
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
        let params = match self.params(params) {
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
                self.forget_gid(gid);
                return Err((e, waiter));
            }
        };
        drop(held);
        if let Some(len) = count_later {
            self.count_request(len);
        }
        self.shared.entries_gauge().inc();
        // The flag is read after the lock that registered the call (see
        // `direct::sweep`).
        if direct && self.sweeper_idle.load(Ordering::SeqCst) {
            self.direct_added.notify_one();
        }
        Ok(gid)
    }

    /// Renders request `gid` as `text` says and queues it for the writer.
    /// Returns the length to count when the rendering did not count it.
    fn queue_request(
        &self,
        text: Text<'_>,
        gid: u64,
        method: &str,
        params: Option<&Payload>,
    ) -> Result<Option<usize>, GatewayError> {
        // `encode_request` counts what it encodes; a finished head or a
        // line rendered in the queue is counted once the call is queued.
        let (line, count_later) = match text {
            Text::InQueue(lines) => {
                let rendered = lines.push_with(request_len(method, params), |out| {
                    self.render_request_into(gid, method, params, out)
                });
                return rendered_in_queue(self, rendered);
            }
            Text::Head(head) => match self.out.lines() {
                Some(lines) if head.len() + ID_ROOM <= MOVE_BYTES => {
                    let rendered = lines.push_with(head.len() + ID_ROOM, |out| {
                        self.finish_request_into(&head, gid, out)
                    });
                    give_back_head(head);
                    return rendered_in_queue(self, rendered);
                }
                Some(_) => {
                    let line = self.finish_request(head, gid)?;
                    let len = line.len();
                    (line, Some(len))
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
                if let Some(queued) = self.queue_whole_frame(gid, method, params) {
                    return queued;
                }
                (self.encode_request(gid, method, params)?, None)
            }
        };
        self.out.try_send(line).map_err(|_| self.queue_refusal())?;
        Ok(count_later)
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
            let params = match self.params(*params) {
                Ok(p) => p.map(std::borrow::Cow::into_owned),
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
        let sent = self
            .encode_batch(&msgs)
            .and_then(|text| self.out.try_send(text).map_err(|_| self.queue_refusal()));
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
            params: self.params(params)?.map(std::borrow::Cow::into_owned),
        };
        let line = self.encode(&msg)?;
        self.out.try_send(line).map_err(|_| self.queue_refusal())
    }
}
