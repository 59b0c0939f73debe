//! One live upstream connection, independent of its transport.
//!
//! A `Link` owns the connection's [`Correlator`], a bounded queue to the
//! writer task, and the per-connection in-flight semaphore. The transport
//! (NDJSON lines, WebSocket text) supplies a stream of inbound texts and a
//! writer task; [`Link::run_reader`] settles replies from that stream.
//! When the connection ends, every call in flight on it is failed with
//! `unavailable` at once: none is left hanging, none is retried.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::dialect::jsonrpc::decode_upstream;
use crate::dialect::render::{render, render_batch, Style};
use crate::dialect::Dialect;
use crate::envelope::{ErrorObject, Message, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::router::correlator::{parse_gateway_id, Correlator, Resolution};

use super::UpstreamShared;

/// What a waiting call receives.
pub(crate) type ReplyResult = Result<Message, GatewayError>;

/// Sends a call's outcome to the task awaiting it.
pub(crate) type Waiter = oneshot::Sender<ReplyResult>;

/// A live connection to an upstream.
#[derive(Debug)]
pub(crate) struct Link {
    /// Gateway ids in flight on this connection.
    correlator: Mutex<Correlator<Waiter>>,
    /// Lines/frames to write, in order. Bounded: the in-flight semaphore
    /// keeps requests below its capacity.
    out: mpsc::Sender<String>,
    /// Requests in flight on this connection (`max_in_flight_per_connection`).
    pub(crate) depth: Arc<Semaphore>,
    /// Cancelled when the connection is gone (or must go).
    pub(crate) closed: CancellationToken,
    /// Set when the connection must take no new calls (a call timed out on
    /// an ordered connection: the daemon is still busy with it).
    retiring: AtomicBool,
    /// Cancelled when `retiring` is set, so the supervisor replaces the link.
    pub(crate) retired: CancellationToken,
    /// Gateway ids of recent batches, to apply a batch-wide error reply.
    batches: Mutex<VecDeque<Vec<u64>>>,
    /// Upstream-wide settings and metrics.
    shared: Arc<UpstreamShared>,
}

/// How many recent batches are remembered for batch-wide error replies.
const BATCHES_REMEMBERED: usize = 64;

/// Takes back the ids of a batch that could not be sent.
fn cancel_all(table: &mut Correlator<Waiter>, ids: &[Option<u64>]) {
    for id in ids.iter().flatten() {
        table.cancel(*id);
    }
}

// === impl Link ===

impl Link {
    /// A link writing to `out`. Capacity of `out` must exceed `depth`.
    pub(crate) fn new(out: mpsc::Sender<String>, shared: Arc<UpstreamShared>) -> Arc<Self> {
        let depth = shared.cfg.max_in_flight_per_connection.get();
        Arc::new(Link {
            correlator: Mutex::new(Correlator::new(shared.cfg.ordered_replies)),
            out,
            depth: Arc::new(Semaphore::new(depth)),
            closed: CancellationToken::new(),
            retiring: AtomicBool::new(false),
            retired: CancellationToken::new(),
            batches: Mutex::new(VecDeque::new()),
            shared,
        })
    }

    /// True when the link may take new calls.
    pub(crate) fn usable(&self) -> bool {
        !self.closed.is_cancelled() && !self.retiring.load(Ordering::Acquire)
    }

    /// True when the link was retired after a timeout.
    pub(crate) fn is_retiring(&self) -> bool {
        self.retiring.load(Ordering::Acquire)
    }

    /// Calls in flight (for least-loaded selection).
    pub(crate) fn in_flight(&self) -> usize {
        self.correlator.lock().len()
    }

    /// Registers a call and queues its request. Returns the gateway id.
    pub(crate) fn send_request(
        &self,
        method: &str,
        params: Option<&Payload>,
        waiter: Waiter,
    ) -> Result<u64, GatewayError> {
        let mut table = self.correlator.lock();
        let gid = table
            .insert(waiter)
            .map_err(|_| GatewayError::new(ErrorKind::Unavailable))?;
        let msg = Message::Request {
            id: WireId::number(gid),
            method: method.to_owned(),
            params: self.fill(params),
        };
        let line = match self.encode(&msg) {
            Ok(line) => line,
            Err(e) => {
                table.cancel(gid);
                return Err(e);
            }
        };
        // Queued under the lock so that write order equals id order, which
        // ordered (hld) connections rely on.
        if self.out.try_send(line).is_err() {
            table.cancel(gid);
            return Err(GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                "upstream write queue full",
            ));
        }
        self.shared.entries_gauge().inc();
        Ok(gid)
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
            let params = self.fill(*params);
            let method = (*method).to_owned();
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
        let sent = self.encode_batch(&msgs).and_then(|text| {
            self.out.try_send(text).map_err(|_| {
                GatewayError::with_detail(ErrorKind::ResourceExhausted, "upstream write queue full")
            })
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
            method: method.to_owned(),
            params: self.fill(params),
        };
        let line = self.encode(&msg)?;
        self.out.try_send(line).map_err(|_| {
            GatewayError::with_detail(ErrorKind::ResourceExhausted, "upstream write queue full")
        })
    }

    /// Gives up on a call that timed out or whose client left. On ordered
    /// connections the link is retired: the daemon is still working on it.
    pub(crate) fn abandon(&self, gid: u64, timed_out: bool) {
        let mut table = self.correlator.lock();
        if table.abandon(gid).is_some() {
            self.shared.entries_gauge().dec();
            if timed_out && self.shared.cfg.ordered_replies {
                self.retiring.store(true, Ordering::Release);
                self.retired.cancel();
            }
        }
        if self.is_retiring() && table.is_empty() && table.unanswered() == 0 {
            self.closed.cancel();
        }
    }

    /// Reads inbound texts until the stream ends or the link is closed,
    /// then fails every call still in flight.
    pub(crate) async fn run_reader<S, E>(
        self: Arc<Self>,
        mut inbound: S,
        shutdown: CancellationToken,
    ) where
        S: Stream<Item = Result<String, E>> + Unpin,
        E: std::fmt::Display,
    {
        loop {
            let next = tokio::select! {
                next = inbound.next() => next,
                () = self.closed.cancelled() => break,
                () = shutdown.cancelled() => break,
            };
            match next {
                Some(Ok(text)) => {
                    if !self.on_text(&text) {
                        break;
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(upstream = %self.shared.cfg.name, error = %e, "upstream read failed");
                    break;
                }
                None => {
                    tracing::debug!(upstream = %self.shared.cfg.name, "upstream closed the connection");
                    break;
                }
            }
        }
        self.fail_all("upstream connection lost");
    }

    /// Closes the link and fails every pending call with `unavailable`.
    pub(crate) fn fail_all(&self, detail: &str) {
        self.closed.cancel();
        let waiters = self.correlator.lock().close();
        self.shared.entries_gauge().sub(waiters.len() as i64);
        for waiter in waiters {
            let err = GatewayError::with_detail(ErrorKind::Unavailable, detail);
            // The caller may have gone away meanwhile; nothing to tell then.
            let _ = waiter.send(Err(err));
        }
    }

    /// Handles one inbound text (a message or a batch reply). Returns false
    /// when the link must close.
    fn on_text(&self, text: &str) -> bool {
        if text.trim_start().starts_with('[') {
            let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) else {
                self.shared.count_protocol_error("invalid_message");
                return true;
            };
            return items.iter().all(|item| self.on_message(item.get(), true));
        }
        self.on_message(text, false)
    }

    /// Handles one inbound message. Returns false when the link must close.
    fn on_message(&self, text: &str, in_batch: bool) -> bool {
        let msg = match decode_upstream(text) {
            Ok(msg) => msg,
            Err(e) => {
                tracing::debug!(upstream = %self.shared.cfg.name, error = %e, "invalid message from upstream");
                self.shared.count_protocol_error("invalid_message");
                return true;
            }
        };
        match msg {
            Message::Response { ref id, .. }
            | Message::Error {
                id: Some(ref id), ..
            } if id.as_json() != Some("null") => {
                let gid = id.as_json().and_then(parse_gateway_id);
                self.settle(gid, msg)
            }
            Message::Error { error, .. } => {
                if self.shared.cfg.ordered_replies {
                    self.settle(None, Message::Error { id: None, error })
                } else if !in_batch && self.fail_oldest_batch(&error) {
                    true
                } else {
                    self.shared.count_unmatched("no_id");
                    true
                }
            }
            Message::Request { id, method, .. } => {
                self.refuse_upstream_request(id, &method);
                true
            }
            Message::Notification { .. } => {
                self.shared.count_dropped("no_subscriber");
                true
            }
            Message::Response { .. } => {
                self.shared.count_unmatched("no_id");
                true
            }
        }
    }

    /// Delivers a reply to its waiter. Returns false when the connection is
    /// out of sync and must close.
    fn settle(&self, gid: Option<u64>, reply: Message) -> bool {
        let mut table = self.correlator.lock();
        let resolution = if self.shared.cfg.ordered_replies {
            match table.resolve_ordered(gid) {
                Ok(r) => r,
                Err(e) => {
                    drop(table);
                    tracing::warn!(upstream = %self.shared.cfg.name, error = %e, "upstream replies out of order; closing the connection");
                    self.shared.count_protocol_error("out_of_order");
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
                if waiter.send(Ok(reply)).is_err() {
                    self.shared.count_dropped("client_gone");
                }
            }
            Resolution::Stale => self.shared.count_unmatched("stale"),
            Resolution::Duplicate => self.shared.count_unmatched("duplicate"),
            Resolution::Unknown => self.shared.count_unmatched("unknown"),
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
                if w.send(Ok(reply)).is_err() {
                    self.shared.count_dropped("client_gone");
                }
            }
            return true;
        }
        false
    }

    /// Shared mode: an upstream-originated request has no owner.
    fn refuse_upstream_request(&self, id: WireId, method: &str) {
        tracing::debug!(upstream = %self.shared.cfg.name, method, "refusing upstream-originated request");
        self.shared.count_dropped("upstream_request");
        let err = GatewayError::new(ErrorKind::MethodNotFound).to_object(Dialect::JsonRpc);
        if let Ok(line) = self.encode(&Message::error(Some(id), err)) {
            // A full queue means the upstream is not reading; the refusal can go.
            let _ = self.out.try_send(line);
        }
    }

    /// The params to send: `{}` for absent params when the upstream needs
    /// them (`fill_empty_params`, hld).
    fn fill(&self, params: Option<&Payload>) -> Option<Payload> {
        match params {
            Some(p) => Some(p.clone()),
            None if self.shared.cfg.fill_empty_params => Some(Payload::Json(
                crate::envelope::raw_from_string(String::from("{}")),
            )),
            None => None,
        }
    }

    /// Renders a batch for this upstream, enforcing its size limit.
    fn encode_batch(&self, msgs: &[Message]) -> Result<String, GatewayError> {
        let text = render_batch(msgs, self.style()).map_err(|_| {
            GatewayError::with_detail(ErrorKind::InvalidParams, "params cannot be carried as JSON")
        })?;
        self.check_size(text)
    }

    fn style(&self) -> Style {
        match self.shared.cfg.dialect {
            Dialect::Ndjson => Style::Line,
            _ => Style::Frame,
        }
    }

    /// Renders a message for this upstream, enforcing its size limit.
    fn encode(&self, msg: &Message) -> Result<String, GatewayError> {
        let text = render(msg, self.style()).map_err(|_| {
            GatewayError::with_detail(ErrorKind::InvalidParams, "params cannot be carried as JSON")
        })?;
        self.check_size(text)
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
