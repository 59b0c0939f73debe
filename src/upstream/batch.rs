//! Client batches sent to an upstream that accepts batches: admitted as
//! one unit, written as one JSON array with gateway ids, and settled item
//! by item; a caller that stops waiting abandons whatever is unsettled.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::admission::Held;
use super::link::Link;
use super::waiter::ReplyResult;
use super::Upstream;
use crate::envelope::{Message, Payload};
use crate::error::{ErrorKind, GatewayError};

/// The receivers of a started batch, its guard, and the permits it holds.
type Started = (
    Vec<Option<oneshot::Receiver<ReplyResult>>>,
    BatchGuard,
    Vec<Held>,
);

// === impl Upstream ===

impl Upstream {
    /// Sends several calls as one batch (for upstreams that accept batches).
    /// `calls[i].2` tells whether call `i` is a request (expects a reply).
    /// Returns one entry per call: the reply for requests, `None` for
    /// notifications. Requests unanswered at `deadline` get `timeout`.
    pub async fn call_batch(
        &self,
        calls: &[(&str, Option<&Payload>, bool)],
        deadline: tokio::time::Instant,
    ) -> Vec<Option<Result<Message, GatewayError>>> {
        let requests = calls.iter().filter(|c| c.2).count();
        let fail_all = |err: GatewayError| {
            calls
                .iter()
                .map(|c| c.2.then(|| Err(err.clone())))
                .collect()
        };
        let started = tokio::time::timeout_at(deadline, self.start_batch(calls, requests)).await;
        let (receivers, mut guard, _permits) = match started {
            Ok(Ok(started)) => started,
            Ok(Err(e)) => return fail_all(e),
            Err(_) => return fail_all(GatewayError::new(ErrorKind::Timeout)),
        };
        let mut out = Vec::with_capacity(calls.len());
        for (i, rx) in receivers.into_iter().enumerate() {
            let Some(rx) = rx else {
                out.push(None);
                continue;
            };
            let reply = match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(reply)) => {
                    guard.settled(i);
                    reply
                }
                Ok(Err(_)) => {
                    guard.settled(i);
                    Err(GatewayError::new(ErrorKind::Unavailable))
                }
                Err(_) => Err(GatewayError::new(ErrorKind::Timeout)),
            };
            out.push(Some(reply));
        }
        guard.timed_out = true;
        out
    }

    /// Admits, places and sends a batch; returns the reply receivers.
    async fn start_batch(
        &self,
        calls: &[(&str, Option<&Payload>, bool)],
        requests: usize,
    ) -> Result<Started, GatewayError> {
        let depth = self.shared.cfg.max_in_flight_per_connection.get();
        if requests > depth.min(self.shared.cfg.max_pending.get()) {
            return Err(GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                "batch larger than the upstream's in-flight limit",
            ));
        }
        let mut permits = Vec::with_capacity(2);
        if requests > 0 {
            permits.push(self.admission.admit_many(requests as u32).await?);
        }
        let link = self.admission.pick_link().await?;
        if requests > 0 {
            permits.push(self.admission.link_slots(&link, requests as u32).await?);
        }
        let (waiters, receivers): (Vec<_>, Vec<_>) = calls
            .iter()
            .map(|c| {
                if c.2 {
                    let (tx, rx) = oneshot::channel();
                    (Some(tx.into()), Some(rx))
                } else {
                    (None, None)
                }
            })
            .unzip();
        let pairs: Vec<(&str, Option<&Payload>)> = calls.iter().map(|c| (c.0, c.1)).collect();
        let ids = link.send_batch(&pairs, waiters)?;
        let guard = BatchGuard {
            link,
            ids,
            timed_out: false,
        };
        Ok((receivers, guard, permits))
    }
}

/// Gives a batch's unsettled gateway ids up when the caller stops waiting.
struct BatchGuard {
    link: Arc<Link>,
    ids: Vec<Option<u64>>,
    timed_out: bool,
}

impl BatchGuard {
    fn settled(&mut self, i: usize) {
        if let Some(id) = self.ids.get_mut(i) {
            *id = None;
        }
    }
}

impl Drop for BatchGuard {
    fn drop(&mut self) {
        for gid in self.ids.iter().flatten() {
            let _ = self.link.abandon(*gid, self.timed_out);
        }
    }
}
