//! NDJSON line framing for switchyard's own sockets (the NDJSON listener
//! and the NDJSON upstream links): `\n`-delimited lines of at most `max`
//! bytes, with a read buffer that does not keep a long line's memory.
//!
//! The framing is that of tokio-util's [`AnyDelimiterCodec`] with one
//! delimiter, with its error type: a line over `max` is
//! [`AnyDelimiterCodecError::MaxChunkLengthExceeded`], after which the rest
//! of that line is skipped; a final unterminated line is returned at EOF.
//! The search for the `\n` is `memchr` (SIMD) instead of that codec's
//! byte-by-byte lookup in a delimiter list: the codec's loop was 2.6 % of
//! the gateway's CPU under the loadgen's throughput scenario.
//!
//! What [`Lines`] adds is the buffer's shape, which `FramedRead` alone gets
//! wrong for a gateway that holds thousands of connections and sees an
//! occasional long line:
//!
//! - **one growth step.** `FramedRead` doubles its buffer from 8 KiB
//!   whenever it is full, so a line of `max` bytes (1 MiB by default) is
//!   copied through every power of two up to 2 MiB, and an over-long one
//!   grows it to 2 MiB before it is refused. Those freed steps stay
//!   resident in the allocator for a while: each long line cost the
//!   gateway several times its size in RSS (the soak saw +6 to +10 MiB per
//!   1 MiB line). Here a partial line that reaches [`GROW_AT`] gets room
//!   for the longest line allowed (`max + 1` bytes, enough to refuse a
//!   longer one) at once, so the buffer is never larger than that and a
//!   long line is copied at most once.
//! - **no high-water mark.** A line is split off the buffer without a copy,
//!   so the remaining buffer still shares the line's allocation and
//!   `BytesMut` reuses all of it once the line is dropped: one long line
//!   would make a connection hold `max` bytes for the rest of its life.
//!   After a line, a buffer whose allocation is above [`SHRINK_ABOVE`] and
//!   which holds at most [`INITIAL`] bytes of what follows is moved into a
//!   fresh [`INITIAL`]-byte buffer; the long line's memory goes when the
//!   line is dropped.
//!
//! Bound: a connection's read buffer holds at most `max + 1` bytes while a
//! line is being read, and returns to [`INITIAL`] (or what is already
//! buffered beyond the line, while that is more) after a line.

use bytes::{Buf, Bytes, BytesMut};
#[cfg(doc)]
use tokio_util::codec::AnyDelimiterCodec;
use tokio_util::codec::{AnyDelimiterCodecError, Decoder};

/// The read buffer a connection starts with and returns to after a long
/// line: `FramedRead`'s own initial capacity.
pub const INITIAL: usize = 8 * 1024;

/// A partial line this long gets room for the longest allowed line at once
/// instead of doubling its way there.
pub const GROW_AT: usize = 64 * 1024;

/// After a line, a buffer whose allocation is above this is replaced by a
/// fresh [`INITIAL`] one (when what follows the line fits in it).
pub const SHRINK_ABOVE: usize = 64 * 1024;

/// `\n`-delimited lines of at most `max` bytes (without the `\n`); see the
/// module doc.
#[derive(Debug)]
pub struct Lines {
    max: usize,
    /// Where the search for the `\n` resumes: the bytes before it hold none.
    next_index: usize,
    /// A line was too long: skip up to and including its `\n`.
    discarding: bool,
}

impl Lines {
    /// Lines of at most `max` bytes.
    pub fn new(max: usize) -> Self {
        Lines {
            max,
            next_index: 0,
            discarding: false,
        }
    }

    /// The next complete line in `buf`, as `AnyDelimiterCodec::decode`
    /// does it with the one delimiter `\n`.
    fn next_line(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, AnyDelimiterCodecError> {
        loop {
            // A line of `max` bytes plus its `\n` is the most worth searching.
            let read_to = self.max.saturating_add(1).min(buf.len());
            let found = buf
                .get(self.next_index..read_to)
                .and_then(|unsearched| memchr::memchr(b'\n', unsearched));
            match (self.discarding, found) {
                (true, Some(offset)) => {
                    buf.advance(self.next_index + offset + 1);
                    self.discarding = false;
                    self.next_index = 0;
                }
                (true, None) => {
                    buf.advance(read_to);
                    self.next_index = 0;
                    if buf.is_empty() {
                        return Ok(None);
                    }
                }
                (false, Some(offset)) => {
                    let end = self.next_index + offset;
                    self.next_index = 0;
                    let mut line = buf.split_to(end + 1);
                    line.truncate(end);
                    return Ok(Some(line.freeze()));
                }
                (false, None) if buf.len() > self.max => {
                    self.discarding = true;
                    return Err(AnyDelimiterCodecError::MaxChunkLengthExceeded);
                }
                (false, None) => {
                    self.next_index = read_to;
                    return Ok(None);
                }
            }
        }
    }

    /// A line is incomplete: once it is long, room for the longest allowed
    /// line (plus one byte, to tell a longer one) in one step.
    fn make_room(&self, buf: &mut BytesMut) {
        let whole = self.max.saturating_add(1);
        if buf.len() >= GROW_AT && buf.capacity() < whole {
            buf.reserve(whole - buf.len());
        }
    }

    /// `line` was just split off `buf`: if their allocation is large and
    /// little follows the line, `buf` moves to a small one of its own.
    fn shrink(buf: &mut BytesMut, line: &Bytes) {
        // `buf` starts right after the line and its `\n`: from the line's
        // start, the allocation is at least this long.
        let allocation = line.len() + 1 + buf.capacity();
        if allocation > SHRINK_ABOVE && buf.len() <= INITIAL {
            let mut fresh = BytesMut::with_capacity(INITIAL);
            fresh.extend_from_slice(buf);
            *buf = fresh;
        }
    }
}

impl Decoder for Lines {
    type Item = Bytes;
    type Error = AnyDelimiterCodecError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, Self::Error> {
        let line = self.next_line(buf)?;
        match &line {
            Some(line) => Self::shrink(buf, line),
            None => self.make_room(buf),
        }
        Ok(line)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, Self::Error> {
        if let Some(line) = self.next_line(buf)? {
            return Ok(Some(line));
        }
        if buf.is_empty() {
            return Ok(None);
        }
        // The final line, without its `\n`.
        self.next_index = 0;
        Ok(Some(buf.split().freeze()))
    }
}

#[cfg(test)]
#[path = "lines/tests.rs"]
mod tests;
