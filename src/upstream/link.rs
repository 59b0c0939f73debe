//! One live upstream connection, independent of its transport.
//!
//! A `Link` owns the connection's [`Correlator`], a bounded queue to the
//! writer task, and the per-connection in-flight semaphore. The transport
//! (NDJSON lines, WebSocket text) supplies a stream of inbound texts and a
//! writer task; [`Link::run_reader`] settles replies from that stream.
//! When the connection ends, every call in flight on it is failed with
//! `unavailable` at once: none is left hanging, none is retried. What a
//! link writes is in `outbound`, what it reads in `inbound`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytestring::ByteString;
use futures_util::{Stream, StreamExt};
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Utf8Bytes;
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorKind, GatewayError};
use crate::persist::recorder::Backlog;
use crate::telemetry::metrics::ProtocolError;
use crate::upstream::correlator::Correlator;

use super::error::LinkError;
use super::outlet::Outlet;
use super::UpstreamShared;

pub(crate) use super::link_dialect::{LinkDialect, SidebandState};
pub(crate) use super::owner::{Client, LinkFuture, Owner, OwnerRef, PendingPush};
pub(crate) use super::waiter::{Caller, ReplyResult, Settle, Waiter};

/// A live connection to an upstream.
#[derive(Debug)]
pub(crate) struct Link {
    /// Gateway ids in flight on this connection.
    pub(super) correlator: Mutex<Correlator<Waiter>>,
    /// Lines/frames to write, in order. Bounded: the in-flight semaphore
    /// keeps requests below its capacity.
    pub(super) out: Outlet,
    /// Requests in flight on this connection (`max_in_flight_per_connection`).
    pub(crate) depth: Arc<Semaphore>,
    /// Cancelled when the connection is gone (or must go).
    pub(crate) closed: CancellationToken,
    /// Set with `closed` (read without the token's lock).
    down: AtomicBool,
    /// Set when the connection must take no new calls (a call timed out on
    /// an ordered connection: the daemon is still busy with it).
    pub(super) retiring: AtomicBool,
    /// Cancelled when `retiring` is set, so the supervisor replaces the link.
    pub(crate) retired: CancellationToken,
    /// Gateway ids of recent batches, to apply a batch-wide error reply.
    pub(super) batches: Mutex<VecDeque<Vec<u64>>>,
    /// The client session that owns this link (per-client mode): it gets
    /// upstream-originated requests and notifications. `None` when shared.
    pub(super) owner: Option<OwnerRef>,
    /// What only links of the upstream's dialect keep.
    pub(super) dialect: LinkDialect,
    /// Signalled when a call settled in place is registered while the
    /// deadline sweeper waits idle, so that it wakes.
    pub(super) direct_added: tokio::sync::Notify,
    /// Set while the deadline sweeper waits idle (no call with a deadline
    /// pending). Read on every call: a load, where signalling every call
    /// would write the `Notify`'s state, shared by all worker threads.
    pub(super) sweeper_idle: AtomicBool,
    /// Events of persistent topics read on this link that the store's
    /// queue had no room for: the reader hands them off before it reads
    /// on (at most one frame's events; see `persist::recorder`).
    pub(super) backlog: Backlog,
    /// Upstream-wide settings and metrics.
    pub(super) shared: Arc<UpstreamShared>,
}

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

// === impl Link ===

impl Link {
    /// A link writing to `out`, made with [`outlet::capacity`](super::outlet::capacity)
    /// for this upstream (room beyond `depth`).
    pub(crate) fn new(
        out: Outlet,
        shared: Arc<UpstreamShared>,
        owner: Option<OwnerRef>,
    ) -> Arc<Self> {
        Self::with_sideband(out, shared, owner, None)
    }

    /// A link carrying Sideband frames, after the handshake in `sbp`.
    pub(crate) fn with_sideband(
        out: Outlet,
        shared: Arc<UpstreamShared>,
        owner: Option<OwnerRef>,
        sbp: Option<crate::dialect::sideband::session::Sbp>,
    ) -> Arc<Self> {
        let depth = shared.cfg.max_in_flight_per_connection.get();
        let dialect = match sbp {
            Some(sbp) => LinkDialect::Sideband(Box::new(Mutex::new(SidebandState {
                sbp,
                cids: Default::default(),
                farewell: None,
                refused: false,
            }))),
            None if shared.cfg.dialect == crate::dialect::Dialect::Holon => {
                LinkDialect::Holon(Mutex::new(None))
            }
            None => LinkDialect::Plain,
        };
        Arc::new(Link {
            correlator: Mutex::new(Correlator::new(shared.cfg.ordered_replies)),
            out,
            depth: Arc::new(Semaphore::new(depth)),
            closed: CancellationToken::new(),
            down: AtomicBool::new(false),
            retiring: AtomicBool::new(false),
            retired: CancellationToken::new(),
            batches: Mutex::new(VecDeque::new()),
            owner,
            dialect,
            direct_added: tokio::sync::Notify::new(),
            sweeper_idle: AtomicBool::new(false),
            backlog: Backlog::default(),
            shared,
        })
    }

    /// The Sideband session state, on a Sideband link.
    pub(super) fn sideband(&self) -> Option<&Mutex<SidebandState>> {
        match &self.dialect {
            LinkDialect::Sideband(sb) => Some(sb),
            LinkDialect::Plain | LinkDialect::Holon(_) => None,
        }
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

    /// Calls in flight (for least-loaded selection), read without a lock
    /// from the in-flight semaphore.
    pub(crate) fn in_flight(&self) -> usize {
        self.shared
            .cfg
            .max_in_flight_per_connection
            .get()
            .saturating_sub(self.depth.available_permits())
    }

    /// Gives up on a call that timed out or whose client left, and returns
    /// its waiter if it was still pending. On ordered connections a timeout
    /// retires the link: the daemon is still working on it.
    pub(crate) fn abandon(&self, gid: u64, timed_out: bool) -> Option<Waiter> {
        self.forget_gid(gid);
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
    pub(crate) fn expire_due(&self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
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
            self.forget_gid(gid);
            waiter.complete(Err(GatewayError::new(ErrorKind::Timeout)));
        }
        next
    }

    /// Closes the link because the client owning it has gone.
    pub(crate) fn client_gone(&self) {
        self.fail_all(&LinkError::ClientGone);
    }

    /// Reads inbound texts until the stream ends or the link is closed,
    /// then fails every call still in flight. Events of persistent topics
    /// that found the store's queue full are handed off before the next
    /// read (and after the last one): a store that falls behind stops the
    /// reading, it never loses them.
    pub(crate) async fn run_reader<S>(self: Arc<Self>, mut inbound: S, shutdown: CancellationToken)
    where
        S: Stream<Item = Result<ByteString, LinkError>> + Unpin,
    {
        let closed = self.closed.clone();
        let (closed, shutdown) = (closed.cancelled(), shutdown.cancelled());
        tokio::pin!(closed, shutdown);
        loop {
            let next = tokio::select! {
                biased;
                next = inbound.next() => next,
                () = &mut closed => break,
                () = &mut shutdown => break,
            };
            match next {
                Some(Ok(text)) => {
                    if !self.on_text(&text) {
                        break;
                    }
                    if !self.backlog.is_empty() {
                        tokio::select! {
                            biased;
                            () = self.shared.hand_off(&self.backlog) => {}
                            () = &mut closed => break,
                            () = &mut shutdown => break,
                        }
                    }
                }
                Some(Err(e)) => {
                    self.read_failed(&e);
                    break;
                }
                None => {
                    tracing::debug!(upstream = %self.shared.cfg.name, "upstream closed the connection");
                    break;
                }
            }
        }
        self.fail_all(&LinkError::Lost);
        self.hand_off_rest().await;
    }

    /// After the link closed: what it read is still stored (this waits
    /// for the store, or for it to stop, not for the link).
    pub(super) async fn hand_off_rest(&self) {
        self.shared.hand_off(&self.backlog).await;
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
}

#[cfg(test)]
mod tests;
