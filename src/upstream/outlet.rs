//! A link's write queue: what callers hand to the link's writer task, in
//! the order they hand it over.
//!
//! - WebSocket links queue whole messages (one per frame) on a bounded
//!   channel. A request frame of at most 4 KiB is copied into the link's
//!   frame buffer and split off it as shared bytes
//!   ([`crate::outbox::arena`]: the same bound as a client's, over the
//!   link's queue), so that queueing it costs no allocation.
//! - NDJSON links queue lines, each with its `\n`, as segments: a short
//!   line is rendered (requests) or copied onto the end of the last
//!   segment when it fits in its spare room (else it starts a new
//!   [`SEGMENT_BYTES`] one), a long line (from [`MOVE_BYTES`]) becomes a
//!   segment of its own without a copy. The writer task takes every
//!   segment queued so far at once and writes them with one vectored
//!   write. It is woken only when the queue turns non-empty, and a line
//!   costs a copy or a move, not a message on a channel.
//!
//! Either way a message queued once the writer has stopped is refused
//! (the caller answers its call at once), and at most `capacity` messages
//! wait for the writer (the link's in-flight cap plus room for
//! notifications and refusals), besides the batch the writer is writing.
//! An NDJSON link keeps one spare segment ([`SEGMENT_BYTES`]) between
//! batches, so that short lines seldom allocate.

use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{mpsc, Notify};
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::outbox::arena::{Arena, SMALL};

/// One message for the upstream, in its transport's kind of frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wire {
    /// An NDJSON line (without `\n`) or a WebSocket text frame.
    Text(String),
    /// A WebSocket text frame split off the link's frame buffer.
    Shared(Utf8Bytes),
    /// A WebSocket binary frame (Sideband): split off the link's frame
    /// buffer, or an allocation of its own of exactly its length.
    Binary(bytes::Bytes),
}

// === impl Wire ===

impl Wire {
    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Wire::Text(t) => t.len(),
            Wire::Shared(t) => t.len(),
            Wire::Binary(b) => b.len(),
        }
    }
}

/// The size of a segment of short lines.
pub(crate) const SEGMENT_BYTES: usize = 16 * 1024;

/// Lines from this long are queued as they are, not copied.
pub(crate) const MOVE_BYTES: usize = 4 * 1024;

/// Room beyond a link's in-flight cap, for notifications and the refusals
/// of upstream-originated requests.
const EXTRA: usize = 64;

/// How many messages may wait for the writer of a link whose in-flight
/// cap is `max_in_flight`; the link's semaphore keeps its requests below.
pub(crate) fn capacity(max_in_flight: NonZeroUsize) -> usize {
    max_in_flight.get() + EXTRA
}

/// Where a link's messages wait for its writer.
#[derive(Debug)]
pub(crate) enum Outlet {
    /// WebSocket links: one message per frame.
    Frames(FrameQueue),
    /// NDJSON links: lines in segments.
    Lines(Arc<LineQueue>),
}

/// The frames a WebSocket link's writer has not taken yet.
#[derive(Debug)]
pub(crate) struct FrameQueue {
    tx: mpsc::Sender<Wire>,
    /// Where small text frames are copied to, locked from the copy to
    /// the send so that the frames in it are contiguous in queue order.
    arena: Mutex<Arena>,
}

/// The lines an NDJSON link's writer has not taken yet.
#[derive(Debug)]
pub(crate) struct LineQueue {
    pending: Mutex<Pending>,
    /// Signalled when the queue turns non-empty.
    ready: Notify,
    /// Most lines waiting at once.
    capacity: usize,
}

/// A batch of lines, in order, each ending in `\n`.
pub(crate) type Segments = VecDeque<String>;

/// Why [`LineQueue::push_with`] queued nothing.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused<E> {
    /// `capacity` lines wait, or the writer is gone.
    Full,
    /// The line's rendering failed with this error.
    Render(E),
}

#[derive(Debug, Default)]
struct Pending {
    segments: Segments,
    /// How many lines the segments hold.
    lines: usize,
    /// An empty segment of [`SEGMENT_BYTES`], given back by the writer.
    spare: Option<String>,
    /// The writer is gone: nothing queued now would be written.
    closed: bool,
}

// === impl Outlet ===

impl Outlet {
    /// Queues one message; gives it back when the queue is full (or its
    /// writer is gone).
    pub(crate) fn try_send(&self, wire: Wire) -> Result<(), Wire> {
        match (self, wire) {
            (Outlet::Frames(frames), wire) => frames.try_send(wire),
            (Outlet::Lines(queue), Wire::Text(line)) => queue.push(line).map_err(Wire::Text),
            // Only WebSocket links send binary frames (Sideband) and
            // shared ones.
            (Outlet::Lines(_), wire @ (Wire::Binary(_) | Wire::Shared(_))) => Err(wire),
        }
    }

    /// True once the writer is gone: nothing queued now would be written.
    pub(crate) fn is_closed(&self) -> bool {
        match self {
            Outlet::Frames(frames) => frames.tx.is_closed(),
            Outlet::Lines(queue) => queue.pending.lock().closed,
        }
    }

    /// Lets a WebSocket link's frame buffer go if nothing went into it
    /// since the last call (see [`Arena::tidy`]).
    pub(crate) fn tidy(&self) {
        if let Outlet::Frames(frames) = self {
            frames.arena.lock().tidy();
        }
    }

    /// The frame queue of a WebSocket link.
    pub(crate) fn frames(&self) -> Option<&FrameQueue> {
        match self {
            Outlet::Frames(frames) => Some(frames),
            Outlet::Lines(_) => None,
        }
    }

    /// The line queue of an NDJSON link.
    pub(crate) fn lines(&self) -> Option<&LineQueue> {
        match self {
            Outlet::Frames(_) => None,
            Outlet::Lines(queue) => Some(queue),
        }
    }
}

// === impl FrameQueue ===

impl FrameQueue {
    /// Frames queued on `tx`.
    pub(crate) fn new(tx: mpsc::Sender<Wire>) -> Self {
        FrameQueue {
            tx,
            arena: Mutex::new(Arena::default()),
        }
    }

    fn try_send(&self, wire: Wire) -> Result<(), Wire> {
        self.tx.try_send(wire).map_err(|e| e.into_inner())
    }

    /// Queues `text` as a text frame: a short one is copied into the
    /// link's frame buffer, a longer one into an allocation of its own.
    /// False when the queue is full (or its writer is gone).
    pub(crate) fn try_send_text(&self, text: &str) -> bool {
        self.copy_in(text.as_bytes(), |copied| match copied {
            // Copied from a `str`: the check cannot fail (no `unsafe` here).
            Some(bytes) => Utf8Bytes::try_from(bytes)
                .map(Wire::Shared)
                .unwrap_or_else(|_| Wire::Text(text.to_owned())),
            None => Wire::Text(text.to_owned()),
        })
    }

    /// Queues `frame` as a binary frame (Sideband), copied as
    /// [`Self::try_send_text`] copies a text. False when the queue is full
    /// (or its writer is gone).
    pub(crate) fn try_send_binary(&self, frame: &[u8]) -> bool {
        self.copy_in(frame, |copied| {
            Wire::Binary(copied.unwrap_or_else(|| bytes::Bytes::copy_from_slice(frame)))
        })
    }

    /// Queues the frame `wire` makes of `bytes`: given the copy split off
    /// the frame buffer when `bytes` is short (and the buffer has room),
    /// `None` otherwise. The buffer stays locked from the copy to the send,
    /// so the frames in it are the queued ones, in order (the bound in the
    /// module docs).
    fn copy_in(&self, bytes: &[u8], wire: impl FnOnce(Option<bytes::Bytes>) -> Wire) -> bool {
        if bytes.len() > SMALL {
            return self.try_send(wire(None)).is_ok();
        }
        let mut arena = self.arena.lock();
        let copied = arena.frame(bytes);
        let sent = self.try_send(wire(copied)).is_ok();
        drop(arena);
        sent
    }
}

// === impl LineQueue ===

impl LineQueue {
    /// An empty queue holding at most `capacity` lines.
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(LineQueue {
            pending: Mutex::new(Pending::default()),
            ready: Notify::new(),
            capacity,
        })
    }

    /// Queues `line` and its `\n` (copied onto the end of a segment when
    /// it is short); gives it back when `capacity` lines wait or the
    /// writer is gone.
    pub(crate) fn push(&self, line: String) -> Result<(), String> {
        let mut pending = self.pending.lock();
        if pending.lines >= self.capacity || pending.closed {
            return Err(line);
        }
        if line.len() >= MOVE_BYTES {
            let mut line = line;
            line.push('\n');
            pending.segments.push_back(line);
        } else {
            let mut last = pending.take_room(line.len() + 1);
            last.push_str(&line);
            last.push('\n');
            pending.segments.push_back(last);
        }
        self.queued(pending);
        Ok(())
    }

    /// Queues the line `render` appends to the string it is given, and its
    /// `\n`. A line expected to take at most [`MOVE_BYTES`] (`len`, with
    /// its `\n`: an estimate, which the segment outgrows if it must) is
    /// rendered straight onto the end of a segment, without an allocation
    /// of its own; a longer one into its own string of `len`, outside the
    /// queue's lock, and moved in. When `render` fails, what it wrote is
    /// taken back. Returns the line's length, without its `\n`.
    pub(crate) fn push_with<E>(
        &self,
        len: usize,
        render: impl FnOnce(&mut String) -> Result<(), E>,
    ) -> Result<usize, Refused<E>> {
        if len > MOVE_BYTES {
            let mut line = String::with_capacity(len);
            render(&mut line).map_err(Refused::Render)?;
            let written = line.len();
            return self.push(line).map(|()| written).map_err(|_| Refused::Full);
        }
        let mut pending = self.pending.lock();
        if pending.lines >= self.capacity || pending.closed {
            return Err(Refused::Full);
        }
        let mut last = pending.take_room(len);
        let start = last.len();
        match render(&mut last) {
            Ok(()) => {
                let written = last.len() - start;
                last.push('\n');
                pending.segments.push_back(last);
                self.queued(pending);
                Ok(written)
            }
            Err(e) => {
                last.truncate(start);
                if !last.is_empty() {
                    pending.segments.push_back(last);
                } else if pending.spare.is_none() && last.capacity() == SEGMENT_BYTES {
                    // A segment started for this line alone (and not grown
                    // by it past the estimate): the spare again.
                    pending.spare = Some(last);
                }
                Err(Refused::Render(e))
            }
        }
    }

    /// Counts the line just queued; wakes the writer if it is the first.
    fn queued(&self, mut pending: MutexGuard<'_, Pending>) {
        let first = pending.lines == 0;
        pending.lines += 1;
        drop(pending);
        if first {
            // Stored as a permit if the writer is not waiting yet.
            self.ready.notify_one();
        }
    }

    /// Waits until lines wait, then moves every segment into `batch`,
    /// which must be empty. Cancel-safe: nothing is taken until it returns.
    pub(crate) async fn take(&self, batch: &mut Segments) {
        debug_assert!(batch.is_empty());
        loop {
            {
                let mut pending = self.pending.lock();
                if pending.lines > 0 {
                    std::mem::swap(&mut pending.segments, batch);
                    pending.lines = 0;
                    return;
                }
            }
            self.ready.notified().await;
        }
    }

    /// Called by the writer when it stops: later lines are refused, as a
    /// channel refuses messages once its receiver is gone, and what waits
    /// is let go.
    pub(crate) fn close(&self) {
        let mut pending = self.pending.lock();
        pending.closed = true;
        pending.segments = Segments::new();
        pending.lines = 0;
        pending.spare = None;
    }

    /// Takes back a written segment as the spare, if it is a short-line
    /// segment and there is none.
    pub(crate) fn recycle(&self, mut segment: String) {
        if segment.capacity() != SEGMENT_BYTES {
            return;
        }
        segment.clear();
        let mut pending = self.pending.lock();
        if pending.spare.is_none() {
            pending.spare = Some(segment);
        }
    }
}

// === impl Pending ===

impl Pending {
    /// The segment to append a short line of `need` bytes to, taken off
    /// the queue (the caller puts it back): the last one if it has the
    /// room, else a new one (the spare, if there is one).
    fn take_room(&mut self, need: usize) -> String {
        match self.segments.pop_back() {
            Some(last) if last.capacity() - last.len() >= need => last,
            full => {
                self.segments.extend(full);
                self.spare
                    .take()
                    .unwrap_or_else(|| String::with_capacity(SEGMENT_BYTES))
            }
        }
    }
}

#[cfg(test)]
mod tests;
