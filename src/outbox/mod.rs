//! The one way anything is written to a client: its [`Outbox`].
//!
//! Replies (single, batch, settled in place), switchyard's pushes to the
//! client and pub/sub events all go through the connection's `Outbox`,
//! which owns the bounded queue the connection's writer drains, the
//! client's codec (with its dialect's state), the high-water gauges and the slow-consumer
//! policy:
//!
//! - a **reply** waits for room ([`Outbox::send`]) at most the
//!   slow-consumer timeout; the reply the client asked for is never
//!   dropped while the client reads and its replies waiting for room stay
//!   within the byte budget (see below);
//! - a **push or event** never waits ([`Outbox::offer`]): a full queue
//!   drops it, and the caller counts the drop;
//! - either way, a queue that stays full for the slow-consumer timeout
//!   fires [`Outbox::slow`]: the transport closes the client (1008);
//! - so does, at once, a reply that would take the bytes of the replies
//!   waiting for room over `outbox_max_bytes` while another reply waits
//!   already (a single reply of any size may wait): that reply is dropped
//!   with the client, and frees its in-flight slot. "Reply" here is
//!   anything that waits as a reply does (a push awaiting delivery, a
//!   persistent delivery, a handshake frame).
//!
//! "Full" is either of two limits: `outbox_capacity` messages, or
//! `outbox_max_bytes` bytes (the byte budget, see `budget`). A frame whose
//! bytes would take the queue over the budget does not fit, except that an
//! empty queue takes one frame of any size: a reply larger than the whole
//! budget still goes out, alone. While a reply waits for room, offers are
//! refused, so that events cannot keep a reply out.
//!
//! Bound: what one client makes switchyard hold in its outbox is
//!
//! - the queue: at most `max(outbox_max_bytes, F)` bytes, where `F` is the
//!   largest frame rendered for the client (a reply is at most the routed
//!   upstream's `max_response_bytes` as read, plus the client's id), so at
//!   most `outbox_max_bytes + F`; and at most `outbox_capacity` messages;
//! - plus the frames waiting for room (replies, each in its request's
//!   in-flight slot; pushes awaiting delivery, each in its unanswered-push
//!   claim; one delivery per persistent subscription): at most
//!   `max(outbox_max_bytes, F)` bytes, so at most `outbox_max_bytes + F`
//!   (one more makes the client slow, above);
//! - plus the one frame the writer is writing (at most `F`).
//!
//! Small frames (at most 4 KiB) are queued in the connection's frame
//! buffer (`arena`) rather than in allocations of their own: its buffers
//! hold at most 4/3 × the bytes of the small frames queued, plus 16 KiB.
//!
//! In all at most `2 × max(outbox_max_bytes, F) + F` (so at most
//! `2 × outbox_max_bytes + 3F`, and `2 × outbox_max_bytes + F` when no
//! frame is larger than the budget). With the defaults (`outbox_max_bytes`
//! 4 MiB) a client that never reads, its frames at most 4 MiB, holds at
//! most 8 MiB plus the frame being written.
//! `switchyard_outbox_queued_bytes_max` shows the most bytes ever queued or
//! waiting for room for one connection, per listener: at most
//! `2 × max(outbox_max_bytes, F)`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::mpsc::{
    self,
    error::{SendTimeoutError, TrySendError},
};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_util::sync::CancellationToken;

use crate::close::CloseCode;
use crate::dialect::{ClientCodec, Encoded, Frame};
use crate::envelope::Message;
use crate::error::{ErrorKind, GatewayError, Side};
use crate::telemetry::metrics::{Direction, MessageCounter, Metrics};

pub(crate) mod arena;
mod budget;
mod outgoing;

use arena::Arena;
use budget::{Admitted, Budget, Waited};

pub use outgoing::Outgoing;

/// A client connection's outbox: cheap to clone, shared by everything that
/// writes to the client.
#[derive(Debug, Clone)]
pub struct Outbox {
    inner: Arc<Inner>,
}

/// The writer's end: what it takes out stops counting as queued.
#[derive(Debug)]
pub struct OutboxReader {
    rx: mpsc::Receiver<Outgoing>,
    inner: Arc<Inner>,
}

/// What became of an offered push or event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Queued.
    Queued,
    /// The queue is full: dropped.
    Full,
    /// The client is gone.
    Closed,
    /// The dialect cannot carry it: dropped.
    Untranslatable,
}

// === impl Outbox ===

impl Outbox {
    /// An outbox of `capacity` messages and `max_bytes` bytes (see
    /// `budget`) rendered by `codec`; a queue that stays full for
    /// `patience` makes the client a slow consumer.
    pub(crate) fn channel(
        capacity: usize,
        max_bytes: usize,
        codec: OutCodec,
        patience: Duration,
        gauges: Gauges,
    ) -> (Outbox, OutboxReader) {
        let (inner, rx) = Inner::new(capacity, max_bytes, codec, patience, gauges);
        let reader = OutboxReader {
            rx,
            inner: inner.clone(),
        };
        (Outbox { inner }, reader)
    }

    /// The client's codec, and its dialect's state for the connection.
    pub(crate) fn codec(&self) -> &ClientCodec {
        self.inner.codec()
    }

    /// Fires when the client stopped reading for the slow-consumer timeout.
    pub fn slow(&self) -> &CancellationToken {
        self.inner.slow()
    }

    /// Queues a reply, waiting for room at most the slow-consumer timeout
    /// (then the client is slow and the reply is dropped with it), and only
    /// while the replies waiting fit the byte budget (else the client is
    /// slow at once). A gone client drops it too.
    pub async fn send(&self, msg: &Message) {
        if let Now::Full(out) = self.inner.queue_now(msg, Budget::try_admit) {
            self.send_frame(out).await;
        }
    }

    /// Queues a persistent delivery as a reply is queued (waiting for
    /// room; a persistent message is never dropped on the way to a client
    /// that reads): `Queued`, `Untranslatable` (the dialect cannot carry
    /// it), or `Closed` (the client is gone, or stayed slow for the
    /// slow-consumer timeout and is being closed).
    pub async fn deliver(&self, msg: &Message) -> Offer {
        match self.inner.queue_now(msg, Budget::try_admit) {
            Now::Queued => Offer::Queued,
            Now::Full(out) => self.deliver_frame(out).await,
            Now::Closed => Offer::Closed,
            Now::Untranslatable => Offer::Untranslatable,
        }
    }

    /// [`deliver`](Self::deliver) for a frame rendered already.
    pub async fn deliver_frame(&self, out: Outgoing) -> Offer {
        match self.inner.queue(out).await {
            Waited::Ready => Offer::Queued,
            Waited::Timeout | Waited::Over | Waited::Closed => Offer::Closed,
        }
    }

    /// Resolves once the client is gone (the writer stopped reading).
    pub async fn closed(&self) {
        self.inner.closed().await;
    }

    /// Queues a batch reply, as [`send`](Self::send).
    pub async fn send_batch(&self, msgs: &[Message]) {
        if let Some(out) = self.inner.encode_batch(msgs) {
            self.send_frame(out).await;
        }
    }

    /// Queues a reply from code that cannot wait (a reply settled by an
    /// upstream link's reader): at once when there is room (messages and
    /// bytes), else by a task that waits as [`send`](Self::send) does.
    /// `slot` (the request's in-flight slot) is released once the reply is
    /// queued (or dropped), so a client cannot make replies pile up beyond
    /// its in-flight cap, nor their bytes beyond the budget (then the
    /// client is slow). False when the client is gone.
    pub(crate) fn settle<S: Send + 'static>(&self, msg: &Message, slot: S) -> bool {
        match self.inner.queue_now(msg, Budget::try_admit) {
            Now::Queued | Now::Untranslatable => true,
            Now::Full(out) => {
                let this = self.clone();
                tokio::spawn(async move {
                    this.inner.queue(out).await;
                    drop(slot);
                });
                true
            }
            Now::Closed => false,
        }
    }

    /// Offers a push or an event: queued if there is room (messages and
    /// bytes, and no reply waiting for room), else dropped (the caller
    /// counts it) and the queue watched for the slow-consumer timeout.
    pub fn offer(&self, msg: &Message) -> Offer {
        match self.inner.queue_now(msg, Budget::try_admit_offer) {
            Now::Queued => Offer::Queued,
            Now::Full(out) => {
                self.inner.watch_full(out.size());
                Offer::Full
            }
            Now::Closed => Offer::Closed,
            Now::Untranslatable => Offer::Untranslatable,
        }
    }

    /// [`offer`](Self::offer) for a frame rendered already (an event
    /// rendered once for many subscribers).
    pub fn offer_frame(&self, out: Outgoing) -> Offer {
        let size = out.size();
        match self.inner.try_queue(out, Budget::try_admit_offer) {
            Ok(()) => Offer::Queued,
            Err(TrySendError::Full(_)) => {
                self.inner.watch_full(size);
                Offer::Full
            }
            Err(TrySendError::Closed(_)) => Offer::Closed,
        }
    }

    /// Queues a frame as a reply is queued (handshakes, control frames).
    pub async fn send_frame(&self, out: Outgoing) {
        self.inner.queue(out).await;
    }

    /// Queues the close frame; the writer sends it last and stops. Waits
    /// for room like a reply.
    pub async fn close(&self, code: CloseCode, reason: impl Into<std::borrow::Cow<'static, str>>) {
        self.send_frame(Outgoing::Close(code, reason.into())).await;
    }

    /// Queues the close frame only if there is room now (a client that is
    /// not reading is cut off without it). True when queued. It holds no
    /// bytes, so only the message count can refuse it.
    pub fn try_close(
        &self,
        code: CloseCode,
        reason: impl Into<std::borrow::Cow<'static, str>>,
    ) -> bool {
        self.inner.try_send(Outgoing::Close(code, reason.into()))
    }

    /// Lets go of the frame buffer if nothing was rendered into it since
    /// the last call (the connection's clock calls it on each tick).
    pub(crate) fn tidy(&self) {
        self.inner.tidy();
    }

    /// Queues a WebSocket ping unless the queue is full (a full queue
    /// shows the peer is slow already).
    pub(crate) fn try_ping(&self) {
        // Dropped when full or closed: see above.
        self.inner.try_send(Outgoing::Ping);
    }
}

// === impl OutboxReader ===

impl OutboxReader {
    /// The next frame to write; `None` once every [`Outbox`] is dropped.
    pub async fn recv(&mut self) -> Option<Outgoing> {
        let out = self.rx.recv().await?;
        self.inner.taken(out.size());
        Some(out)
    }

    /// True when nothing is queued (time to flush).
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

// === The queue ===
//
// An outbox's queue (`Inner`), and how a frame gets into it: at once when
// there is room (a message slot and the bytes), or, for a reply, waiting
// for room at most the slow-consumer timeout. A message is rendered and queued under
// the frame buffer's lock (`queue_now`, see `arena`). See the module
// doc above for the policy and `budget` for the bytes.

/// What became of a message rendered and offered to the queue at once.
enum Now {
    /// Queued.
    Queued,
    /// No room now: the frame, holding no frame buffer.
    Full(Outgoing),
    /// The client is gone.
    Closed,
    /// The dialect cannot carry it.
    Untranslatable,
}

/// Gauges an outbox keeps current (per listener). Its fields are public:
/// it is only the pair of series the session resolves for its listener and
/// hands to [`Outbox::channel`](Outbox::channel).
#[derive(Debug, Clone)]
pub struct Gauges {
    /// Most messages ever queued in one outbox.
    pub messages: prometheus::IntGauge,
    /// Most bytes ever queued (or waiting for room) in one outbox.
    pub bytes: prometheus::IntGauge,
}

/// An outbox's queue and everything that writes into it: shared by the
/// [`Outbox`] handles and the writer's end.
#[derive(Debug)]
struct Inner {
    tx: mpsc::Sender<Outgoing>,
    codec: OutCodec,
    /// How long the queue may stay full before the client is slow.
    patience: Duration,
    /// Fired when the queue stayed full for `patience`.
    slow: CancellationToken,
    gauges: Gauges,
    /// Bytes queued (`outbox_max_bytes`), and replies waiting for room.
    budget: Budget,
    /// A watch on a full queue is running (started by a dropped offer).
    watching: AtomicBool,
    /// Where small frames are rendered to; locked from rendering a
    /// frame to queueing it (see `arena`).
    arena: Mutex<Arena>,
}

// === impl Inner ===

impl Inner {
    /// A queue of `capacity` messages and `max_bytes` bytes rendered by
    /// `codec`, and the receiver its writer drains.
    fn new(
        capacity: usize,
        max_bytes: usize,
        codec: OutCodec,
        patience: Duration,
        gauges: Gauges,
    ) -> (Arc<Self>, mpsc::Receiver<Outgoing>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let inner = Inner {
            tx,
            codec,
            patience,
            slow: CancellationToken::new(),
            gauges,
            budget: Budget::new(max_bytes),
            watching: AtomicBool::new(false),
            arena: Mutex::new(Arena::default()),
        };
        (Arc::new(inner), rx)
    }

    /// The client's codec.
    fn codec(&self) -> &ClientCodec {
        self.codec.client()
    }

    /// Renders a batch reply.
    fn encode_batch(&self, msgs: &[Message]) -> Option<Outgoing> {
        self.codec.encode_batch(msgs)
    }

    /// Fires when the queue stayed full for the slow-consumer timeout.
    fn slow(&self) -> &CancellationToken {
        &self.slow
    }

    /// Resolves once the writer stopped reading.
    async fn closed(&self) {
        self.tx.closed().await;
    }

    /// Queues `out` if a message slot is free now, whatever its bytes (a
    /// close or a ping holds none).
    fn try_send(&self, out: Outgoing) -> bool {
        self.tx.try_send(out).is_ok()
    }

    /// The writer took a frame of `size` bytes out of the queue.
    fn taken(&self, size: i64) {
        self.budget.taken(size);
    }

    /// Lets go of the frame buffer if nothing was rendered into it since
    /// the last call.
    fn tidy(&self) {
        self.arena.lock().tidy();
    }

    /// The byte budget, for tests that check it.
    #[cfg(test)]
    fn budget(&self) -> &Budget {
        &self.budget
    }

    /// True while a watch on a full queue runs, for tests that check it.
    #[cfg(test)]
    fn watching(&self) -> bool {
        self.watching.load(Ordering::Acquire)
    }

    /// After a dropped offer of `size` bytes: if the queue gets no room
    /// for it (a message slot, and the bytes) within the slow-consumer
    /// timeout, the client is slow. One watch at a time.
    fn watch_full(self: &Arc<Self>, size: i64) {
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + inner.patience;
            let room = || inner.tx.capacity() > 0 && inner.budget.fits(size);
            let waited = inner
                .budget
                .wait_for(deadline, inner.tx.closed(), room)
                .await;
            if waited == Waited::Timeout {
                inner.slow.cancel();
            }
            inner.watching.store(false, Ordering::Release);
        });
    }

    /// Renders `msg` (a small frame into the frame buffer) and queues
    /// it if `admit` and the message count let it in now. A frame given
    /// back is first copied out of the frame buffer, so that a frame
    /// waiting for room never holds one (see `arena`).
    fn queue_now(
        &self,
        msg: &Message,
        admit: for<'a> fn(&'a Budget, i64) -> Option<(Admitted<'a>, i64)>,
    ) -> Now {
        let mut arena = self.arena.lock();
        let Some(out) = self.codec.encode(msg, Some(&mut arena)) else {
            return Now::Untranslatable;
        };
        match self.try_queue(out, admit) {
            Ok(()) => Now::Queued,
            Err(TrySendError::Full(out)) => Now::Full(Arena::detach(out)),
            Err(TrySendError::Closed(_)) => Now::Closed,
        }
    }

    /// Queues `out` now if it fits (`admit` decides for the bytes) and
    /// the count queue has room; gives it back as `Full` otherwise.
    fn try_queue(
        &self,
        out: Outgoing,
        admit: for<'a> fn(&'a Budget, i64) -> Option<(Admitted<'a>, i64)>,
    ) -> Result<(), TrySendError<Outgoing>> {
        let Some((admitted, held)) = admit(&self.budget, out.size()) else {
            return Err(match self.tx.is_closed() {
                true => TrySendError::Closed(out),
                false => TrySendError::Full(out),
            });
        };
        self.tx.try_send(out)?;
        admitted.queued();
        self.high_bytes(held);
        self.queued();
        Ok(())
    }

    /// Queues `out`, waiting for room (bytes, then a message slot) at most
    /// the slow-consumer timeout in all; a queue that stays full that long
    /// makes the client slow, and `out` is dropped. So does a reply that
    /// the budget of replies waiting has no room for (`Over`, at once).
    async fn queue(&self, out: Outgoing) -> Waited {
        let deadline = Instant::now() + self.patience;
        let size = out.size();
        let admitted = match self.budget.try_admit(size) {
            Some((admitted, held)) => {
                self.high_bytes(held);
                admitted
            }
            None => match self.wait_admit(size, deadline).await {
                Ok(admitted) => admitted,
                Err(waited) => return waited,
            },
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match self.tx.send_timeout(out, left).await {
            Ok(()) => {
                admitted.queued();
                self.queued();
                Waited::Ready
            }
            Err(SendTimeoutError::Timeout(_)) => {
                self.slow.cancel();
                Waited::Timeout
            }
            Err(SendTimeoutError::Closed(_)) => Waited::Closed,
        }
    }

    /// Waits until `size` bytes fit the budget (offers yield meanwhile).
    /// A reply whose bytes would take those of the replies waiting over the
    /// budget does not wait: the client is slow now, and `out` is dropped.
    async fn wait_admit(&self, size: i64, deadline: Instant) -> Result<Admitted<'_>, Waited> {
        let Some((waiting, held)) = self.budget.reply_waits(size) else {
            self.slow.cancel();
            return Err(Waited::Over);
        };
        self.high_bytes(held);
        let mut admitted = None;
        let waited = self
            .budget
            .wait_for(deadline, self.tx.closed(), || {
                admitted = self.budget.try_admit(size).map(|(a, _)| a);
                admitted.is_some()
            })
            .await;
        // Admitted: no longer waiting. (Its bytes count as both queued and
        // waiting for the few instructions in between.)
        drop(waiting);
        match (waited, admitted) {
            (Waited::Ready, Some(admitted)) => Ok(admitted),
            (Waited::Timeout, _) => {
                self.slow.cancel();
                Err(Waited::Timeout)
            }
            _ => Err(Waited::Closed),
        }
    }

    /// Raises the bytes high-water mark to `held` if above it.
    fn high_bytes(&self, held: i64) {
        if held > self.gauges.bytes.get() {
            self.gauges.bytes.set(held);
        }
    }

    /// Updates the message high-water mark after a message was queued.
    fn queued(&self) {
        let queued = self.tx.max_capacity() - self.tx.capacity();
        let queued = i64::try_from(queued).unwrap_or(i64::MAX);
        if queued > self.gauges.messages.get() {
            self.gauges.messages.set(queued);
        }
    }
}

// === The codec ===
//
// How the outbox writes through the client's `ClientCodec`: a small
// frame into the connection's frame buffer, counted on its way out. A
// reply that cannot be rendered (a payload that cannot be transcoded)
// becomes the dialect's `internal` error, never a silent drop.

/// The output side of a client connection's dialect; counts what it
/// writes (`switchyard_messages_total`, side `client`, direction `out`).
#[derive(Debug)]
pub(crate) struct OutCodec {
    codec: ClientCodec,
    /// `messages` of the client's dialect, side `client`, direction `out`
    /// (resolved once).
    counted: MessageCounter,
}

// === impl OutCodec ===

impl OutCodec {
    /// Writes through `codec`, counting into `metrics`.
    pub(crate) fn new(codec: ClientCodec, metrics: &Metrics) -> Self {
        let counted = metrics.message_counter(codec.dialect(), Side::Client, Direction::Out);
        OutCodec { codec, counted }
    }

    /// The client's codec.
    fn client(&self) -> &ClientCodec {
        &self.codec
    }

    /// Encodes one message; an unrenderable reply becomes `internal`. A
    /// small frame is split off `arena` when given (see `arena`).
    fn encode(&self, msg: &Message, mut arena: Option<&mut Arena>) -> Option<Outgoing> {
        if let Some(out) = self.try_encode(msg, arena.as_deref_mut()) {
            return Some(out);
        }
        let id = match msg {
            Message::Response { id, .. } | Message::Error { id: Some(id), .. } => id.clone(),
            _ => return None,
        };
        let err = GatewayError::with_detail(
            ErrorKind::Internal,
            "the reply cannot be carried in this dialect",
        );
        self.try_encode(&self.codec.error_reply(id, &err), arena)
    }

    /// Encodes a batch reply (text dialects only).
    fn encode_batch(&self, msgs: &[Message]) -> Option<Outgoing> {
        for m in msgs {
            self.counted.count(m.kind());
        }
        if let Ok(text) = self.codec.encode_batch(msgs)? {
            return Some(Outgoing::Text(text.into()));
        }
        // One item could not be rendered: render item by item, replacing it.
        let parts: Vec<Utf8Bytes> = msgs
            .iter()
            .filter_map(|m| match self.encode(m, None) {
                Some(Outgoing::Text(t)) => Some(t),
                _ => None,
            })
            .collect();
        let parts: Vec<&str> = parts.iter().map(Utf8Bytes::as_str).collect();
        Some(Outgoing::Text(format!("[{}]", parts.join(",")).into()))
    }

    fn try_encode(&self, msg: &Message, arena: Option<&mut Arena>) -> Option<Outgoing> {
        let out = match self.codec.encode(msg, |frame| take(frame, arena))? {
            Encoded::Taken(out) => out,
            Encoded::Text(text) => Outgoing::Text(Utf8Bytes::from(text)),
        };
        self.counted.count(msg.kind());
        Some(out)
    }
}

/// A rendered frame as queued: a small one split off `arena` when given,
/// else (and when it came out larger than the arena takes) copied into an
/// allocation of its own.
fn take(frame: Frame<'_>, arena: Option<&mut Arena>) -> Outgoing {
    match (frame, arena) {
        // Split off the arena: bytes copied from the rendered `str`, so
        // UTF-8 without a check (see `Outgoing::Rendered`).
        (Frame::Text(text), Some(arena)) => match arena.text(text) {
            Some(bytes) => {
                debug_assert!(std::str::from_utf8(&bytes).is_ok());
                Outgoing::Rendered(bytes)
            }
            None => Outgoing::Text(Utf8Bytes::from(text)),
        },
        (Frame::Text(text), None) => Outgoing::Text(Utf8Bytes::from(text)),
        (Frame::Binary(bytes), Some(arena)) => Outgoing::Binary(
            arena
                .frame(bytes)
                .unwrap_or_else(|| Bytes::copy_from_slice(bytes)),
        ),
        (Frame::Binary(bytes), None) => Outgoing::Binary(Bytes::copy_from_slice(bytes)),
    }
}

#[cfg(test)]
mod tests;
