//! Topic pub/sub (jsonrpc-ws.md §7.1–7.2): `rpc.subscribe` and friends,
//! served by switchyard itself for every client dialect and never
//! forwarded upstream.
//!
//! Events come from switchyard's side only (upstream notifications, Sideband
//! events, streaming feeds), published under concrete topics; clients
//! subscribe with NATS-style patterns and receive each matching event once
//! per connection as `rpc.notification` with `{topic, data}`. There is no
//! client publish method.
//!
//! This module holds no sockets and spawns nothing: a connection registers
//! a [`Subscriber`] (a non-blocking `try_send` into its outbox) and serves
//! the methods through [`methods::call`]; an upstream feed calls
//! [`Broker::publish`], and a streaming feed follows
//! [`Broker::watch_interest`] to open its upstream stream only while
//! someone listens.
//!
//! # Layout
//!
//! - [`topic`]: pattern and topic validation (-32602 details), the
//!   single-pattern matcher.
//! - [`index`]: the token trie from patterns to subscriber keys (NATS'
//!   sublist): matching costs nothing per non-matching subscription.
//! - [`broker`]: [`Broker`] shared by all connections, [`Registration`]
//!   per connection (dropping it removes its subscriptions), feed interest.
//! - [`event`]: [`Event`] (its JSON params, JSON-RPC notification and
//!   Sideband `N` envelopes each rendered once for all subscribers),
//!   [`Subscriber`], [`Delivery`], [`Published`].
//! - [`methods`]: the four methods' params and results.
//! - [`nats`]: NATS core as the [`Backbone`] of a broker (`[pubsub]
//!   backend = "nats"`): subscribers on several instances, services
//!   publishing on NATS directly.
//! - [`topic_policy`]: which patterns a client may subscribe to (allow and
//!   deny lists), with an exact containment decision.
//!
//! # Bounds
//!
//! A subscription accounts for [`index::cost`] bytes of index
//! (`2 × bytes + 128 × tokens + 256`), an upper bound on what it takes;
//! the broker's [`Limits`] bound a connection's patterns (1,000, of at most
//! 16 tokens and [`topic::MAX_TOPIC_BYTES`] bytes each, and 1 MiB of index
//! by default), a client address's (64 MiB) and all of them (256 MiB);
//! past any, -32007. The trie shares the nodes of common prefixes and
//! prunes them as patterns go. Connections are bounded by the listeners'
//! caps, feed watches by the configured feeds. Nothing is queued here: an
//! event is delivered or dropped at once.

pub mod broker;
pub mod event;
pub mod index;
pub mod methods;
pub mod nats;
pub mod topic;
pub mod topic_policy;

pub use broker::{Backbone, Broker, Limits, Registration, DEFAULT_MAX_SUBSCRIPTIONS};
pub use event::{Delivery, Event, Published, Subscriber};
