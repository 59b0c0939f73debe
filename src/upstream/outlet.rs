//! A link's write queue: what callers hand to the link's writer task, in
//! the order they hand it over.
//!
//! - WebSocket links queue whole messages (one per frame) on a bounded
//!   channel.
//! - NDJSON links append each line, and its `\n`, to one buffer; the writer
//!   task takes the whole buffer at once and writes it with one
//!   `write_all`. The writer is woken only when the buffer turns non-empty,
//!   and a line costs a copy, not a message on a channel.
//!
//! Either way at most `capacity` messages wait for the writer (the link's
//! in-flight cap plus room for notifications and refusals), besides the
//! batch the writer is writing. An NDJSON link keeps at most
//! [`KEPT_BYTES`] of buffer capacity in each of its two buffers between
//! batches.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};

use super::link::Wire;

/// Buffer capacity an NDJSON link keeps between batches, per buffer (it
/// has two: the one filling and the one being written).
pub(crate) const KEPT_BYTES: usize = 64 * 1024;

/// Where a link's messages wait for its writer.
#[derive(Debug)]
pub(crate) enum Outlet {
    /// WebSocket links: one message per frame.
    Frames(mpsc::Sender<Wire>),
    /// NDJSON links: lines in one buffer.
    Lines(Arc<LineQueue>),
}

/// The lines an NDJSON link's writer has not taken yet.
#[derive(Debug)]
pub(crate) struct LineQueue {
    pending: Mutex<Pending>,
    /// Signalled when the buffer turns non-empty.
    ready: Notify,
    /// Most lines waiting at once.
    capacity: usize,
}

#[derive(Debug, Default)]
struct Pending {
    /// The lines, each ending in `\n`.
    bytes: Vec<u8>,
    /// How many.
    lines: usize,
}

// === impl Outlet ===

impl Outlet {
    /// Queues one message; gives it back when the queue is full (or its
    /// writer is gone).
    pub(crate) fn try_send(&self, wire: Wire) -> Result<(), Wire> {
        match (self, wire) {
            (Outlet::Frames(tx), wire) => tx.try_send(wire).map_err(|e| e.into_inner()),
            (Outlet::Lines(queue), Wire::Text(line)) => {
                queue.push(&line).map_err(|()| Wire::Text(line))
            }
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

    /// Appends `line` and its `\n`; `Err` when `capacity` lines wait.
    pub(crate) fn push(&self, line: &str) -> Result<(), ()> {
        let mut pending = self.pending.lock();
        if pending.lines >= self.capacity {
            return Err(());
        }
        pending.bytes.reserve(line.len() + 1);
        pending.bytes.extend_from_slice(line.as_bytes());
        pending.bytes.push(b'\n');
        pending.lines += 1;
        let first = pending.lines == 1;
        drop(pending);
        if first {
            // Stored as a permit if the writer is not waiting yet.
            self.ready.notify_one();
        }
        Ok(())
    }

    /// Waits until lines wait, then swaps them into `batch`, which must be
    /// empty: the queue keeps `batch`'s buffer for the next lines.
    /// Cancel-safe: nothing is taken until it returns.
    pub(crate) async fn take(&self, batch: &mut Vec<u8>) {
        debug_assert!(batch.is_empty());
        loop {
            {
                let mut pending = self.pending.lock();
                if pending.lines > 0 {
                    std::mem::swap(&mut pending.bytes, batch);
                    pending.lines = 0;
                    return;
                }
            }
            self.ready.notified().await;
        }
    }
}

/// Empties a written batch, keeping at most [`KEPT_BYTES`] of capacity.
pub(crate) fn recycle(batch: &mut Vec<u8>) {
    batch.clear();
    batch.shrink_to(KEPT_BYTES);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_come_out_in_order_with_newlines_and_the_queue_is_bounded() {
        let queue = LineQueue::new(2);
        assert_eq!(queue.push("a"), Ok(()));
        assert_eq!(queue.push("bc"), Ok(()));
        assert_eq!(
            queue.push("d"),
            Err(()),
            "a third line waits beyond capacity"
        );
        let mut batch = Vec::new();
        queue.take(&mut batch).await;
        assert_eq!(batch, b"a\nbc\n");
        // Taking makes room again; the next batch holds only what came after.
        recycle(&mut batch);
        assert_eq!(queue.push("d"), Ok(()));
        queue.take(&mut batch).await;
        assert_eq!(batch, b"d\n");
    }

    #[tokio::test]
    async fn a_waiting_writer_wakes_for_the_first_line() {
        let queue = LineQueue::new(4);
        let writer = {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut batch = Vec::new();
                queue.take(&mut batch).await;
                batch
            })
        };
        // One runtime thread: the writer runs until it waits for a line.
        tokio::task::yield_now().await;
        queue.push("x").expect("room");
        let batch = tokio::time::timeout(std::time::Duration::from_secs(30), writer)
            .await
            .expect("the writer was woken");
        assert_eq!(batch.expect("writer"), b"x\n");
    }

    #[test]
    fn recycled_batches_keep_a_bounded_buffer() {
        let mut batch = vec![0u8; 4 * KEPT_BYTES];
        recycle(&mut batch);
        assert!(batch.is_empty());
        assert!(batch.capacity() <= KEPT_BYTES, "{}", batch.capacity());
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
