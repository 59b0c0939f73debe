//! How a call travels to an upstream, chosen in this one place: on the
//! shared pool, on the client's own link (per-client mode), or on a link
//! of its own (a streaming method, per-stream mode).
//!
//! The router hands every request over through one of two doors, both
//! here: [`Upstream::submit`] from the client's reader (a pooled call,
//! settled in place with no task; any other call is given back) and
//! [`Upstream::request`] from a task (any call; the task awaits the
//! reply). Notifications go through [`Upstream::notify`]: they have no
//! reply and follow the upstream's notification policy.

use std::sync::Arc;

use tokio::time::Instant;

use super::direct::Submission;
use super::owner::Client;
use super::waiter::{Caller, ReplyResult, Settle};
use super::Upstream;
use crate::config::UpstreamMode;
use crate::envelope::{Payload, WireId};
use crate::error::GatewayError;

/// How one call travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// On the shared pool.
    Pooled,
    /// On the client's own link.
    PerClient,
    /// On a link opened for this call (a streaming method).
    PerStream,
}

// === impl Upstream ===

impl Upstream {
    /// How calls of `method` travel: the only place the upstream's mode
    /// and its streaming methods are looked at.
    fn mode(&self, method: &str) -> Mode {
        if self.is_streaming(method) {
            // On a pooled connection it would take the connection over.
            return Mode::PerStream;
        }
        self.links_mode()
    }

    /// Where the upstream's calls go when they open no stream (and its
    /// notifications, always).
    fn links_mode(&self) -> Mode {
        match self.shared.cfg.mode {
            UpstreamMode::Shared => Mode::Pooled,
            UpstreamMode::PerClient => Mode::PerClient,
        }
    }

    /// True when calls of `method` are settled in place (pooled calls).
    pub(crate) fn settles_in_place(&self, method: &str) -> bool {
        self.mode(method) == Mode::Pooled
    }

    /// True when requests of `method` may go in a client batch sent as
    /// one (pooled calls to an upstream that accepts batches).
    pub(crate) fn takes_batches_of(&self, method: &str) -> bool {
        self.shared.cfg.accepts_batches && self.mode(method) == Mode::Pooled
    }

    /// Settles `call` in place: written now if there is room, else parked
    /// until there is (see `direct` and `parking`). Given back when it
    /// must take the task path ([`request`](Self::request)) instead.
    pub(crate) fn submit(&self, call: Submission) -> Result<(), Submission> {
        if !self.settles_in_place(&call.method) {
            return Err(call);
        }
        self.admission.submit(call);
        Ok(())
    }

    /// Takes out the calls `caller` has parked here (its shutdown grace
    /// period is over: it answers them itself).
    pub(crate) fn withdraw(&self, caller: &Arc<dyn Caller>) -> Vec<Settle> {
        self.admission.withdraw(caller)
    }

    /// Calls `method` for `client` and awaits the reply (still carrying
    /// the gateway id), or `timeout` at `deadline`. Cancel-safe: dropping
    /// the future abandons the call. `id` is the client's id of the call
    /// (a stream's events name it).
    pub(crate) async fn request(
        &self,
        id: &WireId,
        method: &str,
        params: Option<&Payload>,
        deadline: Instant,
        client: &dyn Client,
    ) -> ReplyResult {
        match self.mode(method) {
            Mode::Pooled => self.call_until(method, params, deadline).await,
            Mode::PerClient => {
                let own = client.link(self).await?;
                self.call_dedicated(own.link, method, params, deadline)
                    .await
            }
            Mode::PerStream => {
                let shared = self.shared.clone();
                let (owner, gone) = (client.owner(), client.gone());
                // Boxed: inline, opening a stream (a dial and a handshake)
                // would make every request's future as large, and a task
                // waits on one per request while an upstream restarts.
                Box::pin(super::stream::open(shared, method, params, id, owner, gone)).await
            }
        }
    }

    /// Forwards a client notification according to the upstream's policy,
    /// on the pool or on the client's own link.
    pub(crate) async fn notify(
        &self,
        method: &str,
        params: Option<&Payload>,
        deadline: Instant,
        client: &dyn Client,
    ) -> Result<(), GatewayError> {
        // A notification opens no stream.
        match self.links_mode() {
            Mode::Pooled | Mode::PerStream => self.notify_pooled(method, params).await,
            Mode::PerClient => {
                let own = client.link(self).await?;
                self.notify_dedicated(own.link, method, params, deadline)
                    .await
            }
        }
    }
}
