//! What a [`super::link::Link`] keeps for its dialect alone: nothing for
//! NDJSON and JSON-RPC WebSocket links, the heartbeat in flight for
//! holon-rpc, the SBP session and cids for Sideband.

use std::time::Instant;

use parking_lot::Mutex;

/// The state a link keeps for its dialect alone.
#[derive(Debug)]
pub(crate) enum LinkDialect {
    /// NDJSON and JSON-RPC WebSocket links: nothing of their own.
    Plain,
    /// holon-rpc links: the heartbeat in flight, its number and when it
    /// was sent.
    Holon(Mutex<Option<(u64, Instant)>>),
    /// Sideband links: the SBP session and the cids of pending calls.
    Sideband(Box<Mutex<SidebandState>>),
}

/// Sideband links: the session state and the cid of each gateway id.
#[derive(Debug)]
pub(crate) struct SidebandState {
    /// SBP session (handshake done before the link is published).
    pub(crate) sbp: crate::dialect::sideband::session::Sbp,
    /// cid ⇄ gateway id of the pending calls.
    pub(crate) cids: crate::dialect::sideband::cids::CidMap,
    /// The goodbye the session asked for, if any (see `sideband.rs`).
    pub(crate) farewell: Option<super::sideband::Farewell>,
    /// The upstream closed the link with 1000 `negotiation_failed`.
    pub(crate) refused: bool,
}
