//! The broker: every connection's subscriptions in one subject index, and
//! the fan-out of a published event to the connections it matches.
//!
//! One [`Broker`] is shared by all connections (`Arc<Broker>`). A
//! connection [`Broker::register`]s its [`Subscriber`] and holds the
//! returned [`Registration`]: it subscribes and unsubscribes through it,
//! and dropping it removes all of its subscriptions.
//!
//! Bounds ([`Limits`]): a subscription accounts for
//! [`index::cost`](super::index::cost) bytes of index, `2 × bytes + 128 ×
//! tokens + 256`, an upper bound on what holding it takes (shared trie
//! nodes only make it less). A connection holds at most
//! `max_subscriptions` patterns of at most `max_pattern_tokens` tokens
//! and [`MAX_TOPIC_BYTES`](super::topic::MAX_TOPIC_BYTES) bytes each, and at
//! most `index_bytes_per_connection` bytes of index; the connections of one
//! client address hold at most `index_bytes_per_ip`, and all of them at most
//! `index_bytes_total`. Past any of them a subscribe is refused
//! (`resource_exhausted`) and nothing changes. Connections are bounded by
//! the listeners' connection caps, and feed-interest watches by the
//! configured feeds.
//!
//! With a [`Backbone`] (NATS core, `[pubsub] backend = "nats"`) attached,
//! [`Broker::publish`] hands an event to it instead of delivering it, the
//! backbone learns when a distinct pattern gains its first local holder or
//! loses its last (under the state's lock, so in order), and what it
//! receives for a pattern goes to that pattern's holders only
//! ([`Broker::through`], then [`Broker::deliver`]). Feed interest is then
//! fixed: the backbone's instance keeps its feeds open (others may listen),
//! and one that does not publish never opens them.
//!
//! Locking: one `RwLock` around the state. A publish takes it for reading
//! only long enough to collect the matching subscribers, then delivers
//! outside it, so a subscribe never waits for a fan-out and a
//! [`Subscriber`] can never deadlock the broker.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use prometheus::IntGauge;
use rustc_hash::FxHashMap;
use tokio::sync::watch;

use super::event::{Delivery, Event, Published, Subscriber};
use super::index::Index;
use super::topic::{self, TopicError};
use crate::envelope::Payload;

/// The default cap on one connection's subscriptions (jsonrpc-ws.md §7.2).
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 1_000;

/// The default cap on a pattern's tokens.
pub const DEFAULT_MAX_PATTERN_TOKENS: usize = 16;

/// The default bytes of index one connection's patterns may account for:
/// 1,000 patterns such as `daemon.events` fit.
pub const DEFAULT_INDEX_BYTES_PER_CONNECTION: usize = 1 << 20;

/// The default bytes of index the connections of one client address may
/// account for.
pub const DEFAULT_INDEX_BYTES_PER_IP: usize = 64 << 20;

/// The default bytes of index all connections' patterns may account for.
pub const DEFAULT_INDEX_BYTES_TOTAL: usize = 256 << 20;

/// What the broker holds at most (`[pubsub]` in the configuration). Each
/// is at least 1 once validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Patterns per connection.
    pub max_subscriptions: usize,
    /// Tokens per pattern (wildcards included).
    pub max_pattern_tokens: usize,
    /// Bytes of index ([`index::cost`](crate::pubsub::index::cost)) per connection.
    pub index_bytes_per_connection: usize,
    /// Bytes of index over the connections of one client address (Unix
    /// socket clients have none, and only count in the total).
    pub index_bytes_per_ip: usize,
    /// Bytes of index over all connections.
    pub index_bytes_total: usize,
}

/// Subscriptions of all connections, and the publish side.
pub struct Broker {
    /// Issues registration keys; never reused, so a late removal cannot
    /// touch a newer connection's entries.
    next_key: AtomicU64,
    state: RwLock<State>,
    /// The backbone events go through, if any (set once, at start).
    backbone: OnceLock<Arc<dyn Backbone>>,
}

/// A broker spanning instances (NATS core): what this broker publishes
/// goes to it, and it delivers back per pattern ([`Broker::through`]).
///
/// Its methods are called with the broker's state locked (`interest`) or
/// from a publisher's task (`publish`): they must never block or call
/// back into the broker.
pub trait Backbone: Send + Sync + fmt::Debug {
    /// The distinct `pattern` gained its first local subscriber (`true`)
    /// or lost its last (`false`).
    fn interest(&self, pattern: &str, on: bool);
    /// An event published on this instance (its topic valid).
    fn publish(&self, topic: &str, data: &Payload);
    /// Whether this instance publishes its upstream events: its feeds then
    /// stay open, else they never open.
    fn publishes(&self) -> bool;
}

/// A connection's handle on the broker. Dropping it removes all of the
/// connection's subscriptions.
pub struct Registration {
    broker: Arc<Broker>,
    key: u64,
}

type Key = u64;

#[derive(Debug)]
struct State {
    /// The bounds; a reload replaces them (held patterns stay).
    limits: Limits,
    index: Index<Key>,
    conns: FxHashMap<Key, Conn>,
    /// Bytes of index held by the connections of each client address; an
    /// address leaves when its last byte goes.
    per_ip: HashMap<IpAddr, usize>,
    /// Bytes of index held over all connections.
    total: usize,
    /// Feed-interest watches by concrete topic: true while a pattern
    /// matches. One per configured feed; closed ones are pruned on change.
    feeds: HashMap<Box<str>, watch::Sender<bool>>,
    /// With a backbone: local holders of each distinct pattern (one more
    /// copy of each pattern, bounded with them by [`Limits`]), and the
    /// backbone to tell when a count leaves or reaches 0.
    held: Option<Held>,
}

struct Held {
    counts: HashMap<Box<str>, usize>,
    backbone: Arc<dyn Backbone>,
}

#[derive(Debug)]
struct Conn {
    subscriber: Arc<dyn Subscriber>,
    /// The client's address (none for Unix socket clients).
    peer: Option<IpAddr>,
    /// The patterns as subscribed, at most `max_subscriptions`, each with
    /// its place in the order they were subscribed (1, 2, …): the oldest
    /// matching pattern is the one a backbone delivers through.
    patterns: HashMap<Box<str>, u64>,
    /// The place the next subscribed pattern takes.
    next_place: u64,
    /// Bytes of index the patterns account for.
    bytes: usize,
    /// Kept equal to `patterns.len()`; summed per listener by the owner.
    gauge: IntGauge,
}

// === impl Limits ===

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            max_pattern_tokens: DEFAULT_MAX_PATTERN_TOKENS,
            index_bytes_per_connection: DEFAULT_INDEX_BYTES_PER_CONNECTION,
            index_bytes_per_ip: DEFAULT_INDEX_BYTES_PER_IP,
            index_bytes_total: DEFAULT_INDEX_BYTES_TOTAL,
        }
    }
}

// === impl Broker ===

impl Broker {
    /// A broker allowing at most `max` subscriptions per connection, and
    /// the default [`Limits`] otherwise.
    pub fn new(max: usize) -> Self {
        Broker::with_limits(Limits {
            max_subscriptions: max,
            ..Limits::default()
        })
    }

    /// A broker holding at most what `limits` allow.
    pub fn with_limits(limits: Limits) -> Self {
        Broker {
            next_key: AtomicU64::new(1),
            state: RwLock::new(State {
                limits,
                index: Index::new(),
                conns: FxHashMap::default(),
                per_ip: HashMap::new(),
                total: 0,
                feeds: HashMap::new(),
                held: None,
            }),
            backbone: OnceLock::new(),
        }
    }

    /// Makes `backbone` carry this broker's events (once; a second call
    /// is ignored). The patterns held now are announced to it.
    pub fn set_backbone(&self, backbone: Arc<dyn Backbone>) {
        if self.backbone.set(Arc::clone(&backbone)).is_err() {
            return;
        }
        let mut state = self.state.write();
        let mut counts: HashMap<Box<str>, usize> = HashMap::new();
        for conn in state.conns.values() {
            for pattern in conn.patterns.keys() {
                *counts.entry(pattern.clone()).or_insert(0) += 1;
            }
        }
        for pattern in counts.keys() {
            backbone.interest(pattern, true);
        }
        state.held = Some(Held { counts, backbone });
        state.refresh_interest();
    }

    /// The bounds now in force.
    pub fn limits(&self) -> Limits {
        self.state.read().limits
    }

    /// Replaces the bounds (a reload): they apply to the next subscribe;
    /// patterns held stay, even past them.
    pub fn set_limits(&self, limits: Limits) {
        self.state.write().limits = limits;
    }

    /// Registers a connection's `subscriber`, from client address `peer`
    /// (none for a Unix socket client). `gauge` is kept equal to the
    /// connection's number of subscriptions (incremented and decremented,
    /// so one gauge may be shared by a whole listener).
    pub fn register(
        self: &Arc<Self>,
        subscriber: Arc<dyn Subscriber>,
        gauge: IntGauge,
        peer: Option<IpAddr>,
    ) -> Registration {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let conn = Conn {
            subscriber,
            peer,
            patterns: HashMap::new(),
            next_place: 1,
            bytes: 0,
            gauge,
        };
        self.state.write().conns.insert(key, conn);
        Registration {
            broker: Arc::clone(self),
            key,
        }
    }

    /// Delivers `data` published under the concrete `topic` to every
    /// connection with a matching pattern, once per connection; with a
    /// backbone, hands it to the backbone instead (an empty tally: it
    /// comes back through the backbone's subscriptions on every instance,
    /// see [`Broker::through`]).
    pub fn publish(&self, topic: &str, data: &Payload) -> Result<Published, TopicError> {
        topic::validate_topic(topic)?;
        if let Some(backbone) = self.backbone.get() {
            backbone.publish(topic, data);
            return Ok(Published::default());
        }
        Ok(self.fan_out(topic, data))
    }

    /// Delivers `data` under the concrete, valid `topic` to this
    /// instance's matching connections, once per connection.
    pub fn fan_out(&self, topic: &str, data: &Payload) -> Published {
        Broker::deliver(&self.matching(topic), topic, data)
    }

    /// The connections that an event under the concrete `topic`, received
    /// through a backbone's subscription of the distinct `pattern`, goes
    /// to: those holding `pattern` for which it is the oldest of their
    /// patterns matching `topic`. So each subscription serves its own
    /// pattern's holders and no one else's (opening or closing one never
    /// changes what another delivers), and a connection holding several
    /// matching patterns gets the event through one of them only. Costs
    /// the trie walk of [`Broker::fan_out`], a lookup per matching
    /// connection and, for one holding several patterns, a match test per
    /// pattern it holds (at most `max_subscriptions`).
    pub fn through(&self, pattern: &str, topic: &str) -> Vec<Arc<dyn Subscriber>> {
        let mut keys = Vec::new();
        let state = self.state.read();
        state.index.matches(topic, &mut keys);
        keys.iter()
            .filter_map(|key| state.conns.get(key))
            .filter(|conn| conn.delivers_through(pattern, topic))
            .map(|conn| Arc::clone(&conn.subscriber))
            .collect()
    }

    /// Delivers `data` under the concrete `topic` to `subscribers`, each
    /// once.
    pub fn deliver(subscribers: &[Arc<dyn Subscriber>], topic: &str, data: &Payload) -> Published {
        let event = Event::new(topic, data);
        let mut published = Published {
            matched: subscribers.len(),
            ..Published::default()
        };
        for subscriber in subscribers {
            match subscriber.deliver(&event) {
                Delivery::Delivered => published.delivered += 1,
                Delivery::Dropped => published.dropped += 1,
                Delivery::Gone => published.gone += 1,
            }
        }
        published
    }

    /// A watch that is true while at least one subscription matches the
    /// concrete `topic`: the owner of a streaming feed opens it while true
    /// and closes it when false. `topic` is expected valid (it comes from
    /// checked configuration).
    pub fn watch_interest(&self, topic: &str) -> watch::Receiver<bool> {
        let mut state = self.state.write();
        if let Some(tx) = state.feeds.get(topic) {
            return tx.subscribe();
        }
        let on = state.interest_in(topic);
        let (tx, rx) = watch::channel(on);
        state.feeds.insert(Box::from(topic), tx);
        rx
    }

    /// The number of subscriptions held, over all connections.
    pub fn subscriptions(&self) -> usize {
        self.state.read().index.len()
    }

    /// The number of registered connections.
    pub fn connections(&self) -> usize {
        self.state.read().conns.len()
    }

    /// The bytes of index ([`index::cost`](crate::pubsub::index::cost)) all subscriptions account for.
    pub fn index_bytes(&self) -> usize {
        self.state.read().total
    }

    fn matching(&self, topic: &str) -> Vec<Arc<dyn Subscriber>> {
        let mut keys = Vec::new();
        let state = self.state.read();
        state.index.matches(topic, &mut keys);
        keys.iter()
            .filter_map(|key| state.conns.get(key))
            .map(|conn| Arc::clone(&conn.subscriber))
            .collect()
    }

    fn unregister(&self, key: Key) {
        let mut state = self.state.write();
        let Some(conn) = state.conns.remove(&key) else {
            return;
        };
        for pattern in conn.patterns.keys() {
            state.index.remove(pattern, key);
            state.hold(pattern, false);
        }
        state.release(conn.peer, conn.bytes);
        conn.gauge.sub(gauge_value(conn.patterns.len()));
        if !conn.patterns.is_empty() {
            state.refresh_interest();
        }
    }
}

impl Default for Broker {
    fn default() -> Self {
        Broker::with_limits(Limits::default())
    }
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.read();
        f.debug_struct("Broker")
            .field("limits", &state.limits)
            .field("connections", &state.conns.len())
            .field("subscriptions", &state.index.len())
            .field("index_bytes", &state.total)
            .field("feeds", &state.feeds.len())
            .finish()
    }
}

// === impl Conn ===

impl Conn {
    /// Whether the connection holds `pattern` and it is the oldest of its
    /// patterns matching `topic` (which `pattern` matches).
    fn delivers_through(&self, pattern: &str, topic: &str) -> bool {
        let Some(&place) = self.patterns.get(pattern) else {
            return false;
        };
        self.patterns.len() == 1
            || !self
                .patterns
                .iter()
                .any(|(other, &at)| at < place && topic::matches(other, topic))
    }
}

// === impl State ===

impl State {
    /// Gives back `bytes` of index held by a connection from `peer`.
    fn release(&mut self, peer: Option<IpAddr>, bytes: usize) {
        self.total = self.total.saturating_sub(bytes);
        if let Some(ip) = peer {
            if let Some(held) = self.per_ip.get_mut(&ip) {
                *held = held.saturating_sub(bytes);
                if *held == 0 {
                    self.per_ip.remove(&ip);
                }
            }
        }
    }

    /// Brings every feed-interest watch up to date after a change of
    /// subscriptions, waking a watcher only when its value flips. Feeds are
    /// few (configured), so recomputing them all is cheap.
    fn refresh_interest(&mut self) {
        let State {
            index, feeds, held, ..
        } = self;
        let fixed = held.as_ref().map(|h| h.backbone.publishes());
        feeds.retain(|topic, tx| {
            if tx.is_closed() {
                return false;
            }
            let on = fixed.unwrap_or_else(|| index.has_match(topic));
            tx.send_if_modified(|value| std::mem::replace(value, on) != on);
            true
        });
    }
}

impl State {
    /// Whether a feed of `topic` is wanted now.
    fn interest_in(&self, topic: &str) -> bool {
        match &self.held {
            Some(held) => held.backbone.publishes(),
            None => self.index.has_match(topic),
        }
    }

    /// Counts a local holder of `pattern` in (`on`) or out, telling the
    /// backbone (if any) when the count leaves or reaches 0.
    fn hold(&mut self, pattern: &str, on: bool) {
        let Some(held) = &mut self.held else { return };
        if on {
            let count = held.counts.entry(Box::from(pattern)).or_insert(0);
            *count += 1;
            if *count == 1 {
                held.backbone.interest(pattern, true);
            }
        } else if let Some(count) = held.counts.get_mut(pattern) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.counts.remove(pattern);
                held.backbone.interest(pattern, false);
            }
        }
    }
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("patterns", &self.counts.len())
            .finish()
    }
}

/// A count as a gauge delta (counts are bounded by `max_subscriptions`,
/// far below i64).
fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

mod registration;

#[cfg(test)]
mod backbone_tests;
#[cfg(test)]
mod bounds;
#[cfg(test)]
mod tests;
