//! The broker: every connection's subscriptions in one subject index, and
//! the fan-out of a published event to the connections it matches.
//!
//! One [`Broker`] is shared by all connections (`Arc<Broker>`). A
//! connection [`Broker::register`]s its [`Subscriber`] and holds the
//! returned [`Registration`]: it subscribes and unsubscribes through it,
//! and dropping it removes all of its subscriptions.
//!
//! Bounds: at most `max` patterns per connection (default
//! [`DEFAULT_MAX_SUBSCRIPTIONS`]), each at most
//! [`MAX_TOPIC_BYTES`](super::topic::MAX_TOPIC_BYTES); the index holds one
//! node per distinct token path. The number of connections is bounded by
//! the listeners' connection caps, and feed-interest watches by the
//! configured feeds.
//!
//! Locking: one `RwLock` around the state. A publish takes it for reading
//! only long enough to collect the matching subscribers, then delivers
//! outside it, so a subscribe never waits for a fan-out and a
//! [`Subscriber`] can never deadlock the broker.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use prometheus::IntGauge;
use rustc_hash::FxHashMap;
use tokio::sync::watch;

use super::event::{Delivery, Event, Published, Subscriber};
use super::index::Index;
use super::topic::{self, TopicError};
use crate::envelope::Payload;
use crate::error::{ErrorKind, GatewayError};

/// The default cap on one connection's subscriptions (jsonrpc-ws.md §7.2).
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 1_000;

/// Subscriptions of all connections, and the publish side.
pub struct Broker {
    /// The cap on one connection's patterns: past it, -32007.
    max: usize,
    /// Issues registration keys; never reused, so a late removal cannot
    /// touch a newer connection's entries.
    next_key: AtomicU64,
    state: RwLock<State>,
}

/// A connection's handle on the broker. Dropping it removes all of the
/// connection's subscriptions.
pub struct Registration {
    broker: Arc<Broker>,
    key: u64,
}

type Key = u64;

#[derive(Debug, Default)]
struct State {
    index: Index<Key>,
    conns: FxHashMap<Key, Conn>,
    /// Feed-interest watches by concrete topic: true while a pattern
    /// matches. One per configured feed; closed ones are pruned on change.
    feeds: HashMap<Box<str>, watch::Sender<bool>>,
}

#[derive(Debug)]
struct Conn {
    subscriber: Arc<dyn Subscriber>,
    /// The patterns as subscribed, at most `max`.
    patterns: HashSet<Box<str>>,
    /// Kept equal to `patterns.len()`; summed per listener by the owner.
    gauge: IntGauge,
}

// === impl Broker ===

impl Broker {
    /// A broker allowing at most `max` subscriptions per connection.
    pub fn new(max: usize) -> Self {
        Broker {
            max,
            next_key: AtomicU64::new(1),
            state: RwLock::new(State::default()),
        }
    }

    /// The cap on one connection's subscriptions.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Registers a connection's `subscriber`. `gauge` is kept equal to the
    /// connection's number of subscriptions (incremented and decremented,
    /// so one gauge may be shared by a whole listener).
    pub fn register(
        self: &Arc<Self>,
        subscriber: Arc<dyn Subscriber>,
        gauge: IntGauge,
    ) -> Registration {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let conn = Conn {
            subscriber,
            patterns: HashSet::new(),
            gauge,
        };
        self.state.write().conns.insert(key, conn);
        Registration {
            broker: Arc::clone(self),
            key,
        }
    }

    /// Delivers `data` published under the concrete `topic` to every
    /// connection with a matching pattern, once per connection.
    pub fn publish(&self, topic: &str, data: &Payload) -> Result<Published, TopicError> {
        topic::validate_topic(topic)?;
        let subscribers = self.matching(topic);
        let event = Event::new(topic, data);
        let mut published = Published {
            matched: subscribers.len(),
            ..Published::default()
        };
        for subscriber in &subscribers {
            match subscriber.deliver(&event) {
                Delivery::Delivered => published.delivered += 1,
                Delivery::Dropped => published.dropped += 1,
                Delivery::Gone => published.gone += 1,
            }
        }
        Ok(published)
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
        let (tx, rx) = watch::channel(state.index.has_match(topic));
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
        for pattern in &conn.patterns {
            state.index.remove(pattern, key);
        }
        conn.gauge.sub(gauge_value(conn.patterns.len()));
        if !conn.patterns.is_empty() {
            state.refresh_interest();
        }
    }
}

impl Default for Broker {
    fn default() -> Self {
        Broker::new(DEFAULT_MAX_SUBSCRIPTIONS)
    }
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.read();
        f.debug_struct("Broker")
            .field("max", &self.max)
            .field("connections", &state.conns.len())
            .field("subscriptions", &state.index.len())
            .field("feeds", &state.feeds.len())
            .finish()
    }
}

// === impl Registration ===

impl Registration {
    /// Subscribes to `pattern`; a no-op if already subscribed.
    pub fn subscribe(&self, pattern: &str) -> Result<(), GatewayError> {
        topic::validate_pattern(pattern).map_err(invalid)?;
        self.add(&[pattern])
    }

    /// Subscribes to every pattern, or to none: each is validated and the
    /// cap checked before anything changes.
    pub fn subscribe_all(&self, patterns: &[&str]) -> Result<(), GatewayError> {
        validate_all(patterns)?;
        self.add(patterns)
    }

    /// Unsubscribes from `pattern` (as it was subscribed); idempotent.
    pub fn unsubscribe(&self, pattern: &str) -> Result<(), GatewayError> {
        topic::validate_pattern(pattern).map_err(invalid)?;
        self.remove(&[pattern]);
        Ok(())
    }

    /// Unsubscribes from every pattern, or from none if one is invalid.
    pub fn unsubscribe_all(&self, patterns: &[&str]) -> Result<(), GatewayError> {
        validate_all(patterns)?;
        self.remove(patterns);
        Ok(())
    }

    /// This connection's number of subscriptions.
    pub fn len(&self) -> usize {
        let state = self.broker.state.read();
        state.conns.get(&self.key).map_or(0, |c| c.patterns.len())
    }

    /// Whether this connection holds no subscription.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The broker this registration belongs to.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    fn add(&self, patterns: &[&str]) -> Result<(), GatewayError> {
        let max = self.broker.max;
        let mut guard = self.broker.state.write();
        let state = &mut *guard;
        let Some(conn) = state.conns.get_mut(&self.key) else {
            return Err(GatewayError::new(ErrorKind::Internal));
        };
        let fresh: HashSet<&str> = patterns
            .iter()
            .copied()
            .filter(|p| !conn.patterns.contains(*p))
            .collect();
        if conn.patterns.len() + fresh.len() > max {
            return Err(GatewayError::with_detail(
                ErrorKind::ResourceExhausted,
                format!("at most {max} subscriptions per connection"),
            ));
        }
        if fresh.is_empty() {
            return Ok(());
        }
        for pattern in &fresh {
            conn.patterns.insert(Box::from(*pattern));
            state.index.insert(pattern, self.key);
        }
        conn.gauge.add(gauge_value(fresh.len()));
        state.refresh_interest();
        Ok(())
    }

    fn remove(&self, patterns: &[&str]) {
        let mut guard = self.broker.state.write();
        let state = &mut *guard;
        let Some(conn) = state.conns.get_mut(&self.key) else {
            return;
        };
        let mut removed = 0;
        for pattern in patterns {
            if conn.patterns.remove(*pattern) {
                state.index.remove(pattern, self.key);
                removed += 1;
            }
        }
        if removed > 0 {
            conn.gauge.sub(gauge_value(removed));
            state.refresh_interest();
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.broker.unregister(self.key);
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("key", &self.key)
            .finish()
    }
}

// === impl State ===

impl State {
    /// Brings every feed-interest watch up to date after a change of
    /// subscriptions, waking a watcher only when its value flips. Feeds are
    /// few (configured), so recomputing them all is cheap.
    fn refresh_interest(&mut self) {
        let State { index, feeds, .. } = self;
        feeds.retain(|topic, tx| {
            if tx.is_closed() {
                return false;
            }
            let on = index.has_match(topic);
            tx.send_if_modified(|value| std::mem::replace(value, on) != on);
            true
        });
    }
}

fn validate_all(patterns: &[&str]) -> Result<(), GatewayError> {
    for (i, pattern) in patterns.iter().enumerate() {
        topic::validate_pattern(pattern).map_err(|e| {
            GatewayError::with_detail(ErrorKind::InvalidParams, format!("topics[{i}]: {e}"))
        })?;
    }
    Ok(())
}

fn invalid(e: TopicError) -> GatewayError {
    GatewayError::with_detail(ErrorKind::InvalidParams, e.to_string())
}

/// A count as a gauge delta (counts are bounded by `max`, far below i64).
fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
