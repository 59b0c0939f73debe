//! A link's write queue: what callers hand to the link's writer task, in
//! the order they hand it over.
//!
//! - WebSocket links queue whole messages (one per frame) on a bounded
//!   channel.
//! - NDJSON links queue lines, each with its `\n`, as segments: a short
//!   line is copied onto the end of the last segment when it fits in its
//!   spare room (else it starts a new [`SEGMENT_BYTES`] one), a long line
//!   (from [`MOVE_BYTES`]) becomes a segment of its own without a copy. The
//!   writer task takes every segment queued so far at once and writes each
//!   with one `write_all`. It is woken only when the queue turns non-empty,
//!   and a line costs a copy or a move, not a message on a channel.
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

use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};

use super::link::Wire;

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
    Frames(mpsc::Sender<Wire>),
    /// NDJSON links: lines in segments.
    Lines(Arc<LineQueue>),
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
pub(crate) type Segments = VecDeque<Vec<u8>>;

#[derive(Debug, Default)]
struct Pending {
    segments: Segments,
    /// How many lines the segments hold.
    lines: usize,
    /// An empty segment of [`SEGMENT_BYTES`], given back by the writer.
    spare: Option<Vec<u8>>,
    /// The writer is gone: nothing queued now would be written.
    closed: bool,
}

// === impl Outlet ===

impl Outlet {
    /// Queues one message; gives it back when the queue is full (or its
    /// writer is gone).
    pub(crate) fn try_send(&self, wire: Wire) -> Result<(), Wire> {
        match (self, wire) {
            (Outlet::Frames(tx), wire) => tx.try_send(wire).map_err(|e| e.into_inner()),
            (Outlet::Lines(queue), Wire::Text(line)) => queue.push(line).map_err(Wire::Text),
            // Only Sideband links send binary frames, and they are
            // WebSocket links.
            (Outlet::Lines(_), wire @ Wire::Binary(_)) => Err(wire),
        }
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

    /// Queues `line` and its `\n`; gives it back when `capacity` lines
    /// wait or the writer is gone.
    pub(crate) fn push(&self, line: String) -> Result<(), String> {
        let mut pending = self.pending.lock();
        if pending.lines >= self.capacity || pending.closed {
            return Err(line);
        }
        let first = pending.lines == 0;
        pending.lines += 1;
        let need = line.len() + 1;
        if line.len() >= MOVE_BYTES {
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            pending.segments.push_back(bytes);
        } else {
            let fits = pending
                .segments
                .back()
                .is_some_and(|last| last.capacity() - last.len() >= need);
            if !fits {
                let segment = match pending.spare.take() {
                    Some(spare) => spare,
                    None => Vec::with_capacity(SEGMENT_BYTES),
                };
                pending.segments.push_back(segment);
            }
            if let Some(last) = pending.segments.back_mut() {
                last.extend_from_slice(line.as_bytes());
                last.push(b'\n');
            }
        }
        drop(pending);
        if first {
            // Stored as a permit if the writer is not waiting yet.
            self.ready.notify_one();
        }
        Ok(())
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
    pub(crate) fn recycle(&self, mut segment: Vec<u8>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of a batch, in order.
    fn flat(batch: &mut Segments) -> Vec<u8> {
        batch.drain(..).flatten().collect()
    }

    #[tokio::test]
    async fn lines_come_out_in_order_with_newlines_and_the_queue_is_bounded() {
        let queue = LineQueue::new(2);
        assert_eq!(queue.push("a".into()), Ok(()));
        assert_eq!(queue.push("bc".into()), Ok(()));
        assert_eq!(
            queue.push("d".into()),
            Err("d".into()),
            "a third line waits beyond capacity"
        );
        let mut batch = Segments::new();
        queue.take(&mut batch).await;
        assert_eq!(batch.len(), 1, "short lines share a segment");
        assert_eq!(flat(&mut batch), b"a\nbc\n");
        // Taking makes room again; the next batch holds only what came after.
        assert_eq!(queue.push("d".into()), Ok(()));
        queue.take(&mut batch).await;
        assert_eq!(flat(&mut batch), b"d\n");
    }

    #[tokio::test]
    async fn long_lines_are_moved_and_short_ones_keep_their_place() {
        let queue = LineQueue::new(8);
        // Room for the `\n`, as a rendered request line has.
        let mut long = String::with_capacity(MOVE_BYTES + 1);
        long.push_str(&"x".repeat(MOVE_BYTES));
        let long_ptr = long.as_ptr();
        queue.push("a".into()).expect("room");
        let text = long.clone();
        queue.push(long).expect("room");
        queue.push("b".into()).expect("room");
        // Short lines that together pass a segment's size start a new one.
        let short = "y".repeat(MOVE_BYTES - 1);
        for _ in 0..5 {
            queue.push(short.clone()).expect("room");
        }
        let mut batch = Segments::new();
        queue.take(&mut batch).await;
        assert_eq!(batch[1].as_ptr(), long_ptr, "the long line was not copied");
        assert!(batch
            .iter()
            .all(|s| s.len() <= SEGMENT_BYTES.max(MOVE_BYTES + 1)));
        let mut expected = format!("a\n{text}\nb\n").into_bytes();
        for _ in 0..5 {
            expected.extend_from_slice(format!("{short}\n").as_bytes());
        }
        assert_eq!(flat(&mut batch), expected);
    }

    #[tokio::test]
    async fn a_written_segment_is_reused_and_only_one_is_kept() {
        let queue = LineQueue::new(8);
        queue.push("a".into()).expect("room");
        let mut batch = Segments::new();
        queue.take(&mut batch).await;
        let segment = batch.pop_front().expect("one segment");
        let ptr = segment.as_ptr();
        let spare = |queue: &LineQueue| queue.pending.lock().spare.as_ref().map(|s| s.as_ptr());
        queue.recycle(segment);
        assert_eq!(spare(&queue), Some(ptr), "kept as the spare");
        queue.recycle(Vec::with_capacity(SEGMENT_BYTES));
        assert_eq!(spare(&queue), Some(ptr), "a second one is let go");
        queue.push("b".into()).expect("room");
        assert_eq!(spare(&queue), None, "the spare is in use");
        queue.take(&mut batch).await;
        assert_eq!(batch[0].as_ptr(), ptr, "the spare segment was reused");
        assert_eq!(flat(&mut batch), b"b\n");
    }

    #[tokio::test]
    async fn a_waiting_writer_wakes_for_the_first_line() {
        let queue = LineQueue::new(4);
        let writer = {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut batch = Segments::new();
                queue.take(&mut batch).await;
                flat(&mut batch)
            })
        };
        // One runtime thread: the writer runs until it waits for a line.
        tokio::task::yield_now().await;
        queue.push("x".into()).expect("room");
        let batch = tokio::time::timeout(std::time::Duration::from_secs(30), writer)
            .await
            .expect("the writer was woken");
        assert_eq!(batch.expect("writer"), b"x\n");
    }

    #[test]
    fn a_closed_queue_refuses_lines() {
        let queue = LineQueue::new(4);
        queue.push("a".into()).expect("room");
        queue.close();
        assert_eq!(queue.push("b".into()), Err("b".into()));
        assert_eq!(queue.pending.lock().lines, 0, "what waited was let go");
    }

    #[test]
    fn binary_frames_are_refused_by_a_line_queue() {
        let outlet = Outlet::Lines(LineQueue::new(4));
        assert_eq!(
            outlet.try_send(Wire::Binary(vec![1])),
            Err(Wire::Binary(vec![1]))
        );
    }
}
