//! Limits and protection: rate limits ([`rate`]), connection caps
//! ([`conns`]) and browser safety for
//! WebSocket upgrades ([`origin`]). Every rejection is counted and answered
//! in the client's dialect; nothing is dropped silently.

pub mod conns;
pub mod origin;
pub mod rate;
