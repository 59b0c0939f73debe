//! Admission of calls to one upstream: a slot under the upstream-wide
//! pending cap (`max_pending`), waiting in the bounded queue (`max_queued`,
//! `queue_timeout_ms`) when it is reached, and the least-loaded live link.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::link::Link;
use super::Upstream;
use crate::error::{ErrorKind, GatewayError};

// === impl Upstream ===

impl Upstream {
    /// Takes a slot under the upstream-wide pending cap, waiting in the
    /// bounded queue when the cap is reached.
    pub(super) async fn admit(&self) -> Result<OwnedSemaphorePermit, GatewayError> {
        self.admit_many(1).await
    }

    pub(super) async fn admit_many(&self, n: u32) -> Result<OwnedSemaphorePermit, GatewayError> {
        if let Ok(permit) = self.pending.clone().try_acquire_many_owned(n) {
            return Ok(permit);
        }
        let exhausted = || {
            // The upstream's capacity ran out, not the client's.
            GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                "upstream pending limit reached",
            )
            .on(crate::error::Side::Upstream)
        };
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.shared.cfg.max_queued {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(exhausted());
        }
        let patience = self.shared.cfg.queue_timeout;
        let permit =
            tokio::time::timeout(patience, self.pending.clone().acquire_many_owned(n)).await;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        match permit {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(exhausted()),
            Err(_) => Err(GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                format!(
                    "no upstream capacity within the queue timeout ({} ms)",
                    patience.as_millis()
                ),
            )
            .on(crate::error::Side::Upstream)),
        }
    }

    /// The least-loaded live link, waiting up to the connect timeout for one.
    pub(super) async fn pick_link(&self) -> Result<Arc<Link>, GatewayError> {
        let deadline = tokio::time::Instant::now() + self.shared.cfg.connect_timeout;
        let mut changed = self.changed.clone();
        loop {
            let best = self
                .slots
                .iter()
                .filter_map(|s| s.borrow().as_ref().filter(|l| l.usable()).cloned())
                .min_by_key(|l| l.in_flight());
            if let Some(link) = best {
                return Ok(link);
            }
            let wait = tokio::time::timeout_at(deadline, changed.changed()).await;
            if !matches!(wait, Ok(Ok(()))) {
                return Err(GatewayError::with_detail(
                    ErrorKind::Unavailable,
                    format!("upstream {} is not connected", self.shared.cfg.name),
                ));
            }
        }
    }
}
