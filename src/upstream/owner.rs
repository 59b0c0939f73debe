//! The client session that owns a per-client link ([`Owner`]): what the
//! upstream originates on that link is handed to it; and the client as
//! the per-client and per-stream modes need it ([`Client`]).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::envelope::Payload;
use crate::error::GatewayError;

use super::waiter::ReplyResult;

/// The client session owning a per-client link. What the upstream
/// originates is handed over synchronously, in the order it arrived, so a
/// push the upstream sent before a reply reaches the client before it.
pub(crate) trait Owner: Send + Sync + std::fmt::Debug {
    /// Sends the client a request now; the future resolves to its reply.
    fn push_request(
        &self,
        method: &str,
        params: Option<Payload>,
    ) -> Result<PendingPush, GatewayError>;
    /// Sends the client a notification now (dropped and counted if it
    /// cannot be queued).
    fn push_notification(&self, method: &str, params: Option<Payload>);
}

/// The client's reply to a pushed request, still to come.
pub(crate) type PendingPush =
    std::pin::Pin<Box<dyn std::future::Future<Output = ReplyResult> + Send>>;

/// A shared handle to a link's owner.
pub(crate) type OwnerRef = Arc<dyn Owner>;

/// The client a call comes from, as the modes that give it connections of
/// its own see it: per-client mode writes on the client's own link (opened
/// with its first call, kept by the client); per-stream mode opens a link
/// for each streaming call, owned by the client until it leaves.
pub(crate) trait Client: Send + Sync {
    /// Who receives what the upstream originates on the client's links.
    fn owner(&self) -> OwnerRef;
    /// Cancelled when the client leaves: its links close.
    fn gone(&self) -> CancellationToken;
    /// The client's own link to `upstream` (per-client mode), opened on
    /// first use with [`Upstream::connect_dedicated`](super::Upstream::connect_dedicated).
    fn link<'a>(&'a self, upstream: &'a super::Upstream) -> LinkFuture<'a>;
}

/// The client's own link, still to come.
pub(crate) type LinkFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Dedicated, GatewayError>> + Send + 'a>,
>;

/// A client's own connection to a per-client upstream, as the client
/// keeps it: it can tell whether the connection is lost and close it,
/// and hands it back to its upstream for each call.
#[derive(Debug, Clone)]
pub(crate) struct Dedicated {
    /// Visible to the upstream's call path (`calls`), which writes on it.
    pub(super) link: Arc<super::Link>,
}

// === impl Dedicated ===

impl Dedicated {
    /// True once the connection is gone.
    pub(crate) fn is_lost(&self) -> bool {
        self.link.closed().is_cancelled()
    }

    /// Cancelled when the connection is gone.
    pub(crate) fn lost(&self) -> CancellationToken {
        self.link.closed().clone()
    }

    /// Closes the connection: its client has gone.
    pub(crate) fn close(&self) {
        self.link.client_gone();
    }
}
