//! Topic pub/sub (jsonrpc-ws.md §7.1–7.2).

pub mod broker;
pub mod event;
pub mod index;
pub mod topic;

pub use broker::{Broker, Registration, DEFAULT_MAX_SUBSCRIPTIONS};
pub use event::{Delivery, Event, Published, Subscriber};
