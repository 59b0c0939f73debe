//! Topic pub/sub (jsonrpc-ws.md §7.1–7.2).

pub mod index;
pub mod topic;
