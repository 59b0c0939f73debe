//! Limits and protection: rate limits ([`rate`]), connection caps
//! ([`conns`]), caps on calls in flight ([`cap`]), who a connection is ([`identity`]: named clients and their
//! credentials), browser safety for WebSocket upgrades ([`origin`]) and the
//! per-listener method policy ([`policy`]). Every rejection is counted and
//! answered in the client's dialect; nothing is dropped silently.

pub(crate) mod cap;
pub mod conns;
pub mod identity;
pub mod jwt;
pub mod origin;
pub mod policy;
pub mod rate;
