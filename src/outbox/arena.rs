//! Where a connection's small frames are kept while queued: one
//! buffer that each frame is copied into and split off as shared bytes,
//! so that queueing a frame costs no allocation. Once the writer has sent
//! every frame split off the buffer, the next frame reuses it in place.
//!
//! Bound: the outbox holds the buffer's lock from rendering a frame to
//! queueing it, and a frame that has to wait for room is copied out of
//! the buffer first ([`Arena::detach`]), so the frames alive in buffers
//! are the ones queued (and the one being written), split off in queue
//! order: contiguous. A frame goes into a buffer only if it is at most
//! [`SMALL`] bytes, and a buffer is given up for a fresh one only when the
//! next frame does not fit in what is left of it, so every buffer given up
//! holds at least `CHUNK - SMALL` bytes of frames. A connection's buffers
//! hold at most `CHUNK / (CHUNK - SMALL)` (4/3) × the bytes of its queued
//! small frames, plus one [`CHUNK`]: with the outbox's own budget
//! (`outbox_max_bytes`), at most 4/3 × that budget + 16 KiB. A connection
//! keeps one `CHUNK` from its first small frame on; one that never got a
//! reply has none, and one that rendered nothing for a tick of its
//! connection's clock (at most 5 s) lets go of it ([`Arena::tidy`]).
//!
//! A WebSocket upstream link keeps one too, for its request frames
//! (`upstream::outlet`): there nothing waits for room (a full queue
//! refuses the request), so the same bound holds over the link's queue.

use bytes::{Bytes, BytesMut};
use tokio_tungstenite::tungstenite::Utf8Bytes;

use super::outgoing::Outgoing;

/// The size of a connection's frame buffer.
pub(crate) const CHUNK: usize = 16 * 1024;

/// The largest frame copied into the buffer; a larger one keeps an
/// allocation of its own (where the copy costs more than the allocation).
pub(crate) const SMALL: usize = 4 * 1024;

/// A connection's frame buffer (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Arena {
    buf: BytesMut,
    /// A frame went into the buffer since the last [`Arena::tidy`].
    used: bool,
}

impl Arena {
    /// `text` as a frame in the buffer, or `None` when it is larger than
    /// [`SMALL`] (the caller gives it an allocation of its own). The bytes
    /// are copied from a `str`: UTF-8, and not checked again.
    pub(super) fn text(&mut self, text: &str) -> Option<Bytes> {
        self.frame(text.as_bytes())
    }

    /// `bytes` as a frame in the buffer, or `None` when it is larger than
    /// [`SMALL`] (the caller gives it an allocation of its own).
    pub(crate) fn frame(&mut self, bytes: &[u8]) -> Option<Bytes> {
        if bytes.len() > SMALL {
            return None;
        }
        if self.buf.capacity() < bytes.len() {
            // Nothing is left in the buffer (every frame is split off):
            // reclaimed in place when every frame split off it is gone,
            // else a fresh buffer of `CHUNK` bytes.
            self.buf.reserve(CHUNK);
        }
        self.used = true;
        self.buf.extend_from_slice(bytes);
        Some(self.buf.split().freeze())
    }

    /// Called now and then (each tick of the connection's clock): lets go
    /// of the buffer if no frame went into it since the last call. Frames
    /// still queued keep their part of it until they are written.
    pub(crate) fn tidy(&mut self) {
        if !std::mem::take(&mut self.used) {
            self.buf = BytesMut::new();
        }
    }

    /// A frame that is about to wait for room: a small one (which may lie
    /// in a buffer) is copied out, so that no buffer is held by a frame
    /// outside the queue; a larger one has an allocation of its own.
    pub(super) fn detach(out: Outgoing) -> Outgoing {
        match out {
            Outgoing::Text(t) if t.len() <= SMALL => Outgoing::Text(Utf8Bytes::from(t.as_str())),
            Outgoing::Rendered(b) if b.len() <= SMALL => {
                Outgoing::Rendered(Bytes::copy_from_slice(&b))
            }
            Outgoing::Binary(b) if b.len() <= SMALL => Outgoing::Binary(Bytes::copy_from_slice(&b)),
            other => other,
        }
    }

    /// Bytes allocated for the buffer still writable (for tests).
    #[cfg(test)]
    pub(super) fn room(&self) -> usize {
        self.buf.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames are split off one buffer; once they are all dropped the
    /// buffer is reused in place, and while one is held a fresh buffer
    /// takes the next frames. Large frames stay out.
    #[test]
    fn frames_share_one_buffer_reused_once_they_are_gone() {
        let mut arena = Arena::default();
        assert_eq!(arena.room(), 0, "no buffer before the first frame");
        let text = "x".repeat(1000);
        let first = arena.text(&text).expect("small");
        let base = first.as_ptr();
        let second = arena.text(&text).expect("small");
        assert_eq!(
            second.as_ptr(),
            base.wrapping_add(1000),
            "split off the same buffer"
        );
        assert_eq!(first, text.as_bytes());
        assert_eq!(second, text.as_bytes());

        // Fill the buffer to its end while the frames are alive.
        let mut held = vec![first, second];
        while arena.room() >= text.len() {
            held.push(arena.text(&text).expect("small"));
        }
        // Held frames: the next frame goes into a fresh buffer.
        let fresh = arena.text(&text).expect("small");
        let fresh_base = fresh.as_ptr();
        assert!(
            !(base..base.wrapping_add(CHUNK)).contains(&fresh_base),
            "a held buffer is not written over"
        );
        assert!(
            held.iter().all(|f| f == text.as_bytes()),
            "frames unchanged"
        );
        drop(held);
        // Every frame of the fresh buffer gone too: it is reused in place.
        while arena.room() >= text.len() {
            drop(arena.text(&text).expect("small"));
        }
        drop(fresh);
        let again = arena.text(&text).expect("small");
        assert_eq!(again.as_ptr(), fresh_base, "reused in place");

        let large = "y".repeat(SMALL + 1);
        assert!(arena.text(&large).is_none());
        assert!(arena.text(&"z".repeat(SMALL)).is_some());
        assert!(arena.text("").is_some_and(|f| f.is_empty()));
    }

    /// An arena that was used since the last tidy keeps its buffer; one
    /// that was not lets it go, and a frame still held keeps its bytes.
    #[test]
    fn a_quiet_arena_lets_go_of_its_buffer() {
        let mut arena = Arena::default();
        arena.tidy();
        assert_eq!(arena.room(), 0);
        let held = arena.text("[1]").expect("small");
        arena.tidy();
        assert!(arena.room() > 0, "used since the last tidy: kept");
        arena.tidy();
        assert_eq!(arena.room(), 0, "quiet for a tidy: let go");
        assert_eq!(&held[..], b"[1]");
        let again = arena.text("[2]").expect("small");
        assert_eq!(&again[..], b"[2]");
        assert!(arena.room() >= CHUNK - 3, "a fresh buffer");
    }

    #[test]
    fn a_detached_frame_holds_no_buffer() {
        let mut arena = Arena::default();
        let frame = arena.text("{\"id\":1}").expect("small");
        let Outgoing::Rendered(copy) = Arena::detach(Outgoing::Rendered(frame.clone())) else {
            panic!("a text frame");
        };
        assert_eq!(copy, frame);
        assert_ne!(copy.as_ptr(), frame.as_ptr());
        let frame = arena.frame(&[1, 2, 3]).expect("small");
        let Outgoing::Binary(copy) = Arena::detach(Outgoing::Binary(frame.clone())) else {
            panic!("a binary frame");
        };
        assert_eq!(copy, frame);
        assert_ne!(copy.as_ptr(), frame.as_ptr());
    }
}
