//! An [`Sbp`] shared between tasks (a client's reader and the replies to
//! it, a link's reader and the requests on it): the session's lock is
//! held only for its state, never while a frame or an envelope is decoded
//! or encoded, which is most of the work.
//!
//! `lock` hands out the session each time it is called; the guard is let
//! go at the end of each statement that takes it. `Sbp::on_frame` and
//! `Sbp::encode` run through here with a `RefCell` as the lock, so the
//! session's unit tests panic if one guard is still held when the next
//! is taken.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ops::DerefMut;

use bytes::Bytes;

use super::{Sbp, SbpEvent};
use crate::dialect::sideband::{
    decode_envelope_in, encode_envelope_into, frame, Encoding, EnvelopeError, FrameId, Subject,
};
use crate::envelope::Message;

/// What an inbound frame needs once its frame layer was read.
pub(super) enum Step<'a> {
    /// Handled: what the transport must do.
    Done(SbpEvent),
    /// An RPC envelope to decode, then to hand to `Sbp::on_envelope`.
    Envelope {
        /// The Message frame's id.
        id: FrameId,
        /// Its subject (`rpc` or `event`, or their legacy forms).
        subject: Subject,
        /// The envelope, borrowed from the frame's bytes.
        data: Cow<'a, [u8]>,
    },
}

/// [`Sbp::on_frame`] for a shared session; CBOR payloads are slices of
/// `bytes`.
pub(crate) fn on_frame_shared<S: DerefMut<Target = Sbp>>(
    lock: impl Fn() -> S,
    bytes: &Bytes,
) -> SbpEvent {
    let rules = lock().rules;
    let frame = frame::decode_with(bytes, rules);
    let step = lock().on_decoded(frame);
    match step {
        Step::Done(event) => event,
        Step::Envelope { id, subject, data } => {
            let decoded = decode_envelope_in(bytes, &data, Encoding::detect(&data));
            lock().on_envelope(id, &subject, decoded, &data)
        }
    }
}

/// Largest buffer [`encode_shared`] keeps per thread between calls.
pub(super) const SCRATCH_KEPT: usize = 64 * 1024;

thread_local! {
    /// Where [`encode_shared`] encodes a frame before it copies it.
    pub(super) static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Encodes `msg` as a Message frame of the session `lock` gives (shared
/// between tasks), as `Sbp::encode` does for the tests' one-owner
/// sessions. The frame is encoded in a per-thread buffer (at most [`SCRATCH_KEPT`] bytes kept) and copied
/// into an allocation of exactly its length: handed to the WebSocket
/// library, it becomes `Bytes` without a second allocation (a buffer with
/// spare capacity needs a shared header), and it holds no spare capacity
/// while it is queued.
pub(crate) fn encode_shared<S: DerefMut<Target = Sbp>>(
    lock: impl Fn() -> S,
    msg: &Message,
) -> Result<Vec<u8>, EnvelopeError> {
    encode_shared_with(lock, msg, <[u8]>::to_vec)
}

/// [`encode_shared`], the frame handed to `take` (which copies it where it
/// goes) while it is in the per-thread buffer.
pub(crate) fn encode_shared_with<S: DerefMut<Target = Sbp>, R>(
    lock: impl Fn() -> S,
    msg: &Message,
    take: impl FnOnce(&[u8]) -> R,
) -> Result<R, EnvelopeError> {
    let encoding = lock().encoding;
    SCRATCH.with_borrow_mut(|scratch| {
        let encoded = encode_envelope_into(msg, encoding, scratch).map(|()| {
            // The subject is chosen once the envelope is encoded: for a
            // legacy peer, `address` has a side effect that must not run
            // when encoding fails.
            let (id, subject) = lock().address(msg);
            frame::wrap_message(id, &subject, scratch);
            take(scratch.as_slice())
        });
        if scratch.capacity() > SCRATCH_KEPT {
            *scratch = Vec::new();
        }
        encoded
    })
}
