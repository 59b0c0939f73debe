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

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_util::sync::CancellationToken;

use crate::close::CloseCode;
use crate::dialect::client::ClientCodec;
use crate::envelope::Message;

pub(crate) mod arena;
mod budget;
pub(crate) mod codec;
mod outgoing;
mod queue;

use budget::{Budget, Waited};
use queue::{Inner, Now};

pub(crate) use codec::OutCodec;
pub use outgoing::Outgoing;
pub use queue::Gauges;

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

#[cfg(test)]
mod tests;
