//! A client's own connections (per-client mode), and the client as the
//! modes that give it connections of its own see it ([`Client`]).
//!
//! In per-client mode each client gets its own connection to each
//! per-client upstream, opened with its first routed message and closed
//! when the client leaves; what the upstream originates on it goes to the
//! client ([`Owner`]). If one drops, [`Dedicated::lost`] fires and the
//! client is closed (WebSocket 1001). The client keeps the table; the
//! links in it are the upstream's own business.

use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::error::LinkError;
use super::link::Link;
use super::owner::{Owner, OwnerRef};
use super::pool;
use super::shared::UpstreamShared;
use crate::error::{ErrorKind, GatewayError};

/// The client a call comes from, as the modes that give it connections of
/// its own see it: per-client mode writes on the client's own link (opened
/// with its first call, kept by the client); per-stream mode opens a link
/// for each streaming call, owned by the client until it leaves.
pub(crate) trait Client: Send + Sync {
    /// Who receives what the upstream originates on the client's links.
    fn owner(&self) -> OwnerRef;
    /// Cancelled when the client leaves: its links close.
    fn gone(&self) -> CancellationToken;
    /// The client's own links (per-client mode).
    fn dedicated(&self) -> &Dedicated;
}

/// One client's own links, by upstream name.
#[derive(Debug, Default)]
pub(crate) struct Dedicated {
    /// At most one per per-client upstream; a lock held across the dial,
    /// so that two calls of the client open one link.
    links: tokio::sync::Mutex<HashMap<String, Arc<Link>>>,
    /// Cancelled when one of the links drops: the client must be closed.
    lost: CancellationToken,
}

// === impl Dedicated ===

impl Dedicated {
    /// Fires when one of the client's links dropped.
    pub(crate) fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// The client's link to the upstream of `shared`, opened on first use
    /// (what the upstream originates on it goes to the client; it closes
    /// when the client leaves).
    pub(super) async fn link(
        &self,
        shared: &Arc<UpstreamShared>,
        client: &dyn Client,
    ) -> Result<Arc<Link>, GatewayError> {
        let name = &shared.cfg.name;
        let mut links = self.links.lock().await;
        if let Some(link) = links.get(name) {
            if link.closed().is_cancelled() {
                return Err(GatewayError::with_detail(
                    ErrorKind::Unavailable,
                    "upstream connection lost",
                ));
            }
            return Ok(link.clone());
        }
        let gone = client.gone();
        let link = connect(shared, client.owner(), gone.clone()).await?;
        let (closed, lost) = (link.closed().clone(), self.lost.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = closed.cancelled() => lost.cancel(),
                () = gone.cancelled() => {}
            }
        });
        links.insert(name.clone(), link.clone());
        Ok(link)
    }

    /// The client is gone: close its links.
    pub(crate) async fn close(&self) {
        for link in self.links.lock().await.values() {
            link.client_gone();
        }
    }
}

/// Opens a link owned by one client: what the upstream originates on it
/// goes to `owner`.
async fn connect(
    shared: &Arc<UpstreamShared>,
    owner: Arc<dyn Owner>,
    shutdown: CancellationToken,
) -> Result<Arc<Link>, GatewayError> {
    // Boxed: dialing (a WebSocket handshake) is a large future, and
    // inline it would make every request's and notification's future
    // as large (each waiting request is a task of that size).
    let connected = tokio::time::timeout(
        shared.cfg.connect_timeout,
        Box::pin(pool::dial(shared, Some(owner), shutdown)),
    )
    .await;
    match connected {
        Ok(Ok(link)) => Ok(link),
        // `command` upstreams: no room for one more process.
        Ok(Err(e @ LinkError::ProcessCap { .. })) => Err(GatewayError::with_detail(
            ErrorKind::ResourceExhausted,
            format!("upstream {}: {e}", shared.cfg.name),
        )),
        Ok(Err(e)) => Err(GatewayError::with_detail(
            ErrorKind::Unavailable,
            format!("upstream {} is not reachable: {e}", shared.cfg.name),
        )),
        Err(_) => Err(GatewayError::with_detail(
            ErrorKind::Unavailable,
            format!(
                "upstream {} did not accept a connection in time",
                shared.cfg.name
            ),
        )),
    }
}
