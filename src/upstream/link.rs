//! One live upstream connection, independent of its transport and its
//! dialect: the state the link driver (`driver`) runs.
//!
//! A `Link` owns the connection's [`Correlator`], its write queue
//! ([`Outlet`]), the per-connection in-flight cap and its dialect's
//! codec ([`UpstreamCodec`], with what the dialect keeps per link). The
//! driver's reader hands each inbound frame to [`Link::on_text`] or
//! [`Link::on_binary`]: the codec says what it means ([`Event`]) and the
//! link settles replies by gateway id, answers or passes on what the
//! upstream originates, and counts the rest. When the connection ends,
//! every call in flight on it is failed with `unavailable` at once: none
//! is left hanging, none is retried.
//!
//! ## Writing
//!
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
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytestring::ByteString;
use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::correlator::{Correlator, ReplyResult, Resolution, TakeBack, Waiter};
use super::error::LinkError;
use super::outlet::{LineQueue, Outlet, Refused, Wire, MOVE_BYTES};
use super::owner::OwnerRef;
use super::shared::UpstreamShared;
use crate::dialect::jsonrpc::{
    finish_request, finish_request_into, render_request_head_into, render_request_into,
    request_len, Style,
};
use crate::dialect::link::{not_json, Event, Farewell, Fault, Frame, Scratch};
use crate::dialect::UpstreamCodec;
use crate::envelope::{ErrorObject, Kind, Message, Method, Payload, WireId};
use crate::error::{ErrorKind, GatewayError, Side};
use crate::limits::cap::Cap;
use crate::persist::recorder::Backlog;
use crate::telemetry::metrics::{DropReason, ProtocolError, Unmatched};

/// Longest sleep of a link's deadline sweeper while calls are pending, so a
/// call with an earlier deadline than the ones seen is late by at most this.
const SWEEP_AT_LEAST_EVERY: Duration = Duration::from_millis(50);

/// A live connection to an upstream.
#[derive(Debug)]
pub(crate) struct Link {
    /// Gateway ids in flight on this connection.
    correlator: Mutex<Correlator<Waiter>>,
    /// Lines/frames to write, in order. Bounded: the in-flight cap (`depth`)
    /// keeps requests below its capacity.
    out: Outlet,
    /// Requests in flight on this connection (`max_in_flight_per_connection`).
    depth: Arc<Cap>,
    /// Cancelled when the connection is gone (or must go).
    closed: CancellationToken,
    /// Set with `closed` (read without the token's lock).
    down: AtomicBool,
    /// Set when the connection must take no new calls (a call timed out on
    /// an ordered connection: the daemon is still busy with it).
    retiring: AtomicBool,
    /// Cancelled when `retiring` is set, so the supervisor replaces the link.
    retired: CancellationToken,
    /// Gateway ids of recent batches, to apply a batch-wide error reply.
    batches: Mutex<VecDeque<Vec<u64>>>,
    /// The client session that owns this link (per-client mode): it gets
    /// upstream-originated requests and notifications. `None` when shared.
    owner: Option<OwnerRef>,
    /// The upstream's dialect, with what it keeps for this link.
    codec: UpstreamCodec,
    /// Signalled when a call settled in place is registered while the
    /// deadline sweeper waits idle, so that it wakes.
    direct_added: tokio::sync::Notify,
    /// Set while the deadline sweeper waits idle (no call with a deadline
    /// pending). Read on every call: a load, where signalling every call
    /// would write the `Notify`'s state, shared by all worker threads.
    sweeper_idle: AtomicBool,
    /// Events of persistent topics read on this link that the store's
    /// queue had no room for: the reader hands them off before it reads
    /// on (at most one frame's events; see `persist::recorder`).
    backlog: Backlog,
    /// When the upstream was last heard from (any frame, pongs included):
    /// WebSocket links close after a ping interval plus the pong timeout
    /// of silence.
    heard: Mutex<Instant>,
    /// Upstream-wide settings and metrics. Crate-visible: every part of
    /// the upstream reads its settings through the link it holds.
    pub(super) shared: Arc<UpstreamShared>,
}

// === impl Link ===

impl Link {
    /// A link writing to `out` (made with
    /// [`outlet::capacity`](super::outlet::capacity) for this upstream),
    /// speaking `codec` (its handshake, if any, done).
    pub(super) fn new(
        out: Outlet,
        codec: UpstreamCodec,
        shared: Arc<UpstreamShared>,
        owner: Option<OwnerRef>,
    ) -> Arc<Self> {
        let depth = shared.cfg.max_in_flight_per_connection.get();
        Arc::new(Link {
            correlator: Mutex::new(Correlator::new(shared.cfg.ordered_replies)),
            out,
            depth: Arc::new(Cap::new(depth)),
            closed: CancellationToken::new(),
            down: AtomicBool::new(false),
            retiring: AtomicBool::new(false),
            retired: CancellationToken::new(),
            batches: Mutex::new(VecDeque::new()),
            owner,
            codec,
            direct_added: tokio::sync::Notify::new(),
            sweeper_idle: AtomicBool::new(false),
            backlog: Backlog::default(),
            heard: Mutex::new(Instant::now()),
            shared,
        })
    }

    /// The link's dialect.
    pub(super) fn codec(&self) -> &UpstreamCodec {
        &self.codec
    }

    /// The link's write queue (its writer takes from it).
    pub(super) fn outlet(&self) -> &Outlet {
        &self.out
    }

    /// The link's in-flight slots.
    pub(super) fn depth(&self) -> &Arc<Cap> {
        &self.depth
    }

    /// Cancelled when the connection is gone (or must go).
    pub(super) fn closed(&self) -> &CancellationToken {
        &self.closed
    }

    /// Cancelled when the link takes no new calls (retired after a timeout).
    pub(super) fn retired(&self) -> &CancellationToken {
        &self.retired
    }

    /// True when the link may take new calls (atomics only: called per
    /// request).
    pub(crate) fn usable(&self) -> bool {
        !self.down.load(Ordering::Acquire) && !self.retiring.load(Ordering::Acquire)
    }

    /// Marks the link closed and cancels `closed`.
    fn shut(&self) {
        self.down.store(true, Ordering::Release);
        self.closed.cancel();
    }

    /// True when the link was retired after a timeout.
    pub(crate) fn is_retiring(&self) -> bool {
        self.retiring.load(Ordering::Acquire)
    }

    /// True when the upstream closed the link refusing our handshake.
    pub(super) fn refused(&self) -> bool {
        self.codec.refused()
    }

    /// Calls in flight (for least-loaded selection), read without a lock
    /// from the in-flight cap.
    pub(crate) fn in_flight(&self) -> usize {
        self.depth.held()
    }

    /// Notes that the upstream was heard from.
    pub(super) fn heard(&self) {
        *self.heard.lock() = Instant::now();
    }

    /// How long the upstream has been silent.
    pub(super) fn silent_for(&self) -> Duration {
        self.heard.lock().elapsed()
    }

    /// The goodbye to send now that the link closes.
    pub(super) fn farewell(&self) -> Farewell {
        self.codec.farewell(self.shared.stopping.is_cancelled())
    }

    /// Gives up on a call that timed out or whose client left, and returns
    /// its waiter if it was still pending. On ordered connections a timeout
    /// retires the link: the daemon is still working on it.
    pub(crate) fn abandon(&self, gid: u64, timed_out: bool) -> Option<Waiter> {
        self.codec.forget(gid);
        let mut table = self.correlator.lock();
        let waiter = table.abandon(gid);
        if waiter.is_some() {
            self.shared.entries_gauge().dec();
            if timed_out && self.shared.cfg.ordered_replies {
                self.retiring.store(true, Ordering::Release);
                self.retired.cancel();
            }
        }
        if self.is_retiring() && table.is_empty() && table.unanswered() == 0 {
            self.shut();
        }
        waiter
    }

    /// Times out the calls settled in place whose deadline has passed (as
    /// a caller's timeout would: an ordered connection is retired) and
    /// returns the earliest deadline still pending, if any.
    pub(crate) fn expire_due(&self, now: Instant) -> Option<Instant> {
        let mut table = self.correlator.lock();
        let expired = table.abandon_where(|w| w.deadline().is_some_and(|d| d <= now));
        let next = table.pending_values().filter_map(Waiter::deadline).min();
        if !expired.is_empty() {
            self.shared.entries_gauge().sub(expired.len() as i64);
            if self.shared.cfg.ordered_replies {
                self.retiring.store(true, Ordering::Release);
                self.retired.cancel();
            }
        }
        if self.is_retiring() && table.is_empty() && table.unanswered() == 0 {
            self.shut();
        }
        drop(table);
        for (gid, waiter) in expired {
            self.codec.forget(gid);
            waiter.complete(Err(GatewayError::new(ErrorKind::Timeout)));
        }
        next
    }

    /// Times out the link's in-place calls at their deadlines until the
    /// link closes (a pooled link's third task, beside its reader and
    /// writer). Sleeps while none is pending.
    pub(super) async fn sweep(self: Arc<Self>) {
        loop {
            let next = self.expire_due(Instant::now());
            let wake = match next {
                Some(at) => at.min(Instant::now() + SWEEP_AT_LEAST_EVERY),
                None => {
                    // Registrations signal only while the flag is set. It
                    // is set before looking again (under the correlator
                    // lock), so a call registered meanwhile is either seen
                    // here or sees the flag and signals (the permit waits
                    // for `notified`).
                    self.sweeper_idle.store(true, Ordering::SeqCst);
                    if self.expire_due(Instant::now()).is_some() {
                        self.sweeper_idle.store(false, Ordering::SeqCst);
                        continue;
                    }
                    tokio::select! {
                        () = self.direct_added.notified() => {}
                        () = self.closed.cancelled() => return,
                    }
                    self.sweeper_idle.store(false, Ordering::SeqCst);
                    continue;
                }
            };
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                () = self.closed.cancelled() => return,
            }
        }
    }

    /// Closes the link because the client owning it has gone.
    pub(crate) fn client_gone(&self) {
        self.fail_all(&LinkError::ClientGone);
    }

    /// Events the store's queue had no room for: the reader hands them
    /// off before it reads on.
    pub(super) fn backlog(&self) -> &Backlog {
        &self.backlog
    }

    /// Notes why reading the upstream failed: logged, and counted when the
    /// upstream sent more than can be read.
    pub(super) fn read_failed(&self, e: &LinkError) {
        if let LinkError::TooLarge { .. } = e {
            self.shared
                .count_protocol_error(ProtocolError::ResponseTooLarge);
        }
        tracing::warn!(upstream = %self.shared.cfg.name, error = %e, "upstream read failed");
    }

    /// Closes the link and fails every pending call with `unavailable`,
    /// saying `why`.
    pub(crate) fn fail_all(&self, why: &LinkError) {
        let detail = why.to_string();
        self.shut();
        let waiters = self.correlator.lock().close();
        self.shared.entries_gauge().sub(waiters.len() as i64);
        for waiter in waiters {
            let err = GatewayError::with_detail(ErrorKind::Unavailable, detail.as_str());
            // The caller may have gone away meanwhile; nothing to tell then.
            let _ = waiter.complete(Err(err));
        }
    }

    /// Handles one inbound text (a message or a batch reply). Returns false
    /// when the link must close.
    pub(super) fn on_text(self: &Arc<Self>, text: &ByteString) -> bool {
        self.shared.traffic.frames_in.count(text.len());
        if text.len() > self.shared.cfg.max_response_bytes {
            return self.too_large(text);
        }
        self.codec.on_text(text, |event| self.on_event(event))
    }

    /// Handles one inbound binary frame (Sideband). Returns false when the
    /// link must close.
    pub(super) fn on_binary(self: &Arc<Self>, bytes: &bytes::Bytes) -> bool {
        self.shared.traffic.frames_in.count(bytes.len());
        self.codec.on_binary(bytes, |event| self.on_event(event))
    }

    /// A reply above `max_response_bytes`: its own call fails with
    /// `resource_exhausted`; the connection and every other call live on.
    fn too_large(&self, text: &str) -> bool {
        self.shared
            .count_protocol_error(ProtocolError::ResponseTooLarge);
        let gid = self.codec.oversize_id(text);
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

    /// Acts on what the codec read. Returns false when the link must close.
    fn on_event(self: &Arc<Self>, event: Event) -> bool {
        let count = |kind| self.shared.traffic.messages_in.count(kind);
        match event {
            Event::Reply { gid, reply } => {
                count(reply.kind());
                self.settle(gid, Ok(reply))
            }
            Event::Alive(kind) => {
                count(kind);
                true
            }
            Event::NoId { reply, in_batch } => {
                count(reply.kind());
                self.no_id(reply, in_batch)
            }
            Event::Request { id, method, params } => {
                count(crate::envelope::Kind::Request);
                self.upstream_request(id, method, params);
                true
            }
            Event::Answer(reply) => {
                count(crate::envelope::Kind::Request);
                self.send_reply_message(&reply);
                true
            }
            Event::Notification { method, params } => {
                count(crate::envelope::Kind::Notification);
                self.upstream_notification(method, params);
                true
            }
            Event::Failed { gid, error, fault } => {
                if let Some(fault) = fault {
                    self.shared.count_protocol_error(protocol_error(fault));
                }
                self.settle(gid, Err(error))
            }
            Event::Fault { fault, reply } => {
                tracing::debug!(upstream = %self.shared.cfg.name, ?fault, "invalid message from upstream");
                self.shared.count_protocol_error(protocol_error(fault));
                if let Some(frame) = reply {
                    self.send_frame(Wire::Binary(frame.into()));
                }
                true
            }
            Event::Send(frame) => {
                self.send_frame(Wire::Binary(frame.into()));
                true
            }
            Event::Dropped(reason) => {
                self.shared.count_dropped(DropReason::Sideband(reason));
                true
            }
            Event::Close(bye) => {
                tracing::warn!(upstream = %self.shared.cfg.name, code = bye.code.as_u16(), reason = %bye.reason, "upstream session ends; closing the link");
                false
            }
        }
    }

    /// A reply without a usable id: on an ordered link an error settles the
    /// oldest call; else a lone error applies to the oldest batch waiting.
    fn no_id(&self, reply: Message, in_batch: bool) -> bool {
        let Message::Error { error, .. } = reply else {
            self.shared.count_unmatched(Unmatched::NoId);
            return true;
        };
        if self.shared.cfg.ordered_replies {
            self.settle(None, Ok(Message::Error { id: None, error }))
        } else if !in_batch && self.fail_oldest_batch(&error) {
            true
        } else {
            self.shared.count_unmatched(Unmatched::NoId);
            true
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
                    Resolution::Stale | Resolution::Duplicate | Resolution::Unknown => None,
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
    /// mode), or refused here (shared mode has no owner).
    fn upstream_request(self: &Arc<Self>, id: WireId, method: Method, params: Option<Payload>) {
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
    fn send_reply(&self, id: WireId, reply: ReplyResult) {
        let msg = match reply {
            Ok(Message::Response { result, .. }) => Message::Response { id, result },
            Ok(Message::Error { error, .. }) => Message::Error {
                id: Some(id),
                error,
            },
            Ok(Message::Request { .. } | Message::Notification { .. }) => Message::error(
                Some(id),
                self.codec
                    .render_error(&GatewayError::new(ErrorKind::Internal)),
            ),
            Err(e) => Message::error(Some(id), self.codec.render_error(&e)),
        };
        self.send_reply_message(&msg);
    }

    fn send_reply_message(&self, msg: &Message) {
        match self.encode(msg) {
            Ok(wire) => self.send_frame(wire),
            Err(e) => {
                tracing::debug!(upstream = %self.shared.cfg.name, error = %e, "reply to upstream not sent")
            }
        }
    }

    /// Queues a frame that needs no answer: a full queue means the
    /// upstream is not reading, and it is dropped (counted).
    fn send_frame(&self, wire: Wire) {
        if self.out.try_send(wire).is_err() {
            self.shared.count_dropped(DropReason::UpstreamQueueFull);
        }
    }
}

impl TakeBack for Link {
    fn take_back(&self, gid: u64) {
        // Nobody waits for it any more: its waiter is dropped.
        drop(self.abandon(gid, false));
    }
}

/// The metric label of a protocol error the codec found.
fn protocol_error(fault: Fault) -> ProtocolError {
    match fault {
        Fault::InvalidMessage => ProtocolError::InvalidMessage,
        Fault::InvalidReply => ProtocolError::InvalidReply,
        Fault::InvalidEnvelope => ProtocolError::InvalidEnvelope,
        Fault::PeerErrorFrame => ProtocolError::PeerErrorFrame,
    }
}

// === Writing ===

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

// === impl Link: writing ===

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
        let traffic = &self.shared.traffic;
        for kind in kinds {
            traffic.messages_out.count(kind);
        }
        traffic.frames_out.count(len);
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
mod send_tests {
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

#[cfg(test)]
mod tests;
