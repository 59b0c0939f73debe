//! The client session that owns a per-client link ([`Owner`]): what the
//! upstream originates on that link is handed to it.

use std::sync::Arc;

use crate::envelope::Payload;
use crate::error::GatewayError;

use super::correlator::ReplyResult;

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
