//! Per-client routing state: dedicated upstream links (per-client mode) and
//! requests switchyard pushes to the client (`s1`, `s2`, …).
//!
//! In per-client mode each client connection gets its own upstream
//! connection, opened with its first routed message and closed with the
//! client. What that upstream originates is pushed to the client: requests
//! get a fresh client-side id and the client's reply goes back under the
//! upstream's id; notifications arrive as notifications (JSON dialects) or
//! as `s<N>` requests whose replies switchyard consumes (holon-rpc). If the
//! upstream link drops, [`ClientLinks::lost`] fires and the transport closes
//! the client (WebSocket 1001). The links themselves are the upstream's
//! ([`Dedicated`]): the client only keeps them.

use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::limits::identity::Identity;
use crate::persist::hub::Attachment;
use crate::pubsub::Registration;
use crate::upstream::{Client, Dedicated, OwnerRef};

use super::pusher::Pusher;

/// Dedicated upstream links of one client connection.
#[derive(Debug)]
pub struct ClientLinks {
    /// The client's own upstream links (per-client mode).
    links: Dedicated,
    pusher: Pusher,
    /// The client's address (none for a Unix socket client): its
    /// subscriptions count against the per-address bound, and log lines
    /// name it.
    peer: Option<IpAddr>,
    /// Cancelled when the client is gone: links and push tasks stop.
    gone: CancellationToken,
    /// The client's pub/sub subscriptions, registered on first use and
    /// removed when the client is gone.
    subscriptions: Mutex<Option<Registration>>,
    /// The client's persistent subscriptions, attached on first use and
    /// detached (positions kept) when the client is gone.
    persistent: Mutex<Option<Arc<Attachment>>>,
    /// Who the client is on its listener (set once, at the upgrade): its
    /// method policy, the owner of its persistent subscriptions, its logs.
    who: std::sync::OnceLock<Identity>,
}

// === impl ClientLinks ===

impl ClientLinks {
    /// State for a client at `peer` (`None`: a Unix socket), pushed to
    /// through `pusher`.
    pub fn new(pusher: Pusher, peer: Option<IpAddr>) -> Self {
        ClientLinks {
            links: Dedicated::default(),
            pusher,
            peer,
            gone: CancellationToken::new(),
            subscriptions: Mutex::new(None),
            persistent: Mutex::new(None),
            who: std::sync::OnceLock::new(),
        }
    }

    /// Records the client's identity (once, before its first request).
    pub fn identify(&self, who: Identity) {
        // Set once per connection; a second call changes nothing.
        let _ = self.who.set(who);
    }

    /// The client's named client, if any (`None`: the listener's unnamed
    /// client).
    pub fn client_name(&self) -> Option<&str> {
        self.who.get().and_then(Identity::client)
    }

    /// The identity this client's persistent subscriptions belong to on
    /// `listener` (see [`crate::persist::owner`]).
    pub(crate) fn owner(&self, listener: &str) -> crate::persist::Owner {
        match self.client_name() {
            Some(name) => crate::persist::Owner::client(listener, name),
            None => crate::persist::Owner::listener(listener),
        }
    }

    /// The client's attachment to the persistent-subscription hub, made by
    /// `attach` on first use.
    pub(crate) fn persistent(&self, attach: impl FnOnce() -> Attachment) -> Arc<Attachment> {
        let mut slot = self.persistent.lock();
        slot.get_or_insert_with(|| Arc::new(attach())).clone()
    }

    /// Runs `f` on the client's broker registration, made by `register` on
    /// first use.
    pub(crate) fn with_subscriptions<R>(
        &self,
        register: impl FnOnce() -> Registration,
        f: impl FnOnce(&Registration) -> R,
    ) -> R {
        let mut slot = self.subscriptions.lock();
        f(slot.get_or_insert_with(register))
    }

    /// Cancelled when the client is gone (by [`close`](Self::close), or
    /// earlier by its session): its links, push tasks and the session's
    /// own tasks stop.
    pub fn on_gone(&self) -> &CancellationToken {
        &self.gone
    }

    /// Fires when a dedicated upstream link of this client dropped.
    pub fn lost(&self) -> &CancellationToken {
        self.links.lost()
    }

    /// The client's address (none for a Unix socket client).
    pub fn peer(&self) -> Option<IpAddr> {
        self.peer
    }

    /// The pusher for this client.
    pub fn pusher(&self) -> &Pusher {
        &self.pusher
    }

    /// The client is gone: close its dedicated links.
    pub async fn close(&self) {
        self.gone.cancel();
        // Its subscriptions go with it; persistent ones detach.
        drop(self.subscriptions.lock().take());
        drop(self.persistent.lock().take());
        self.links.close().await;
    }
}

impl Client for ClientLinks {
    fn owner(&self) -> OwnerRef {
        Arc::new(self.pusher.clone())
    }

    fn gone(&self) -> CancellationToken {
        self.gone.clone()
    }

    fn dedicated(&self) -> &Dedicated {
        &self.links
    }
}
