//! A connection's [`Registration`]: its subscribes and unsubscribes,
//! checked against the broker's [`Limits`](super::Limits) before anything
//! changes.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use super::{gauge_value, Broker, Registration};
use crate::error::{ErrorKind, GatewayError};
use crate::pubsub::index;
use crate::pubsub::topic::{self, TopicError};

// === impl Registration ===

impl Registration {
    /// Subscribes to `pattern`; a no-op if already subscribed.
    pub fn subscribe(&self, pattern: &str) -> Result<(), GatewayError> {
        topic::validate_pattern(pattern).map_err(invalid)?;
        self.add(&[pattern], false)
    }

    /// Subscribes to every pattern, or to none: each is validated and the
    /// bounds checked before anything changes.
    pub fn subscribe_all(&self, patterns: &[&str]) -> Result<(), GatewayError> {
        validate_all(patterns)?;
        self.add(patterns, true)
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

    /// Adds the patterns not held yet, or none if they would take the
    /// connection, its address or the gateway past a bound. `batch`: a
    /// refused pattern is named by its index in `patterns`.
    fn add(&self, patterns: &[&str], batch: bool) -> Result<(), GatewayError> {
        let mut guard = self.broker.state.write();
        let state = &mut *guard;
        let limits = state.limits;
        let Some(conn) = state.conns.get_mut(&self.key) else {
            return Err(GatewayError::new(ErrorKind::Internal));
        };
        let mut fresh: HashSet<&str> = HashSet::new();
        for (i, pattern) in patterns.iter().enumerate() {
            if conn.patterns.contains_key(*pattern) || !fresh.insert(*pattern) {
                continue;
            }
            let tokens = index::tokens(pattern);
            if tokens > limits.max_pattern_tokens {
                let which = if batch {
                    format!("topics[{i}]")
                } else {
                    "topic".to_owned()
                };
                return Err(exhausted(format!(
                    "{which} has {tokens} tokens, at most {} are allowed",
                    limits.max_pattern_tokens
                )));
            }
        }
        if fresh.is_empty() {
            return Ok(());
        }
        let max = limits.max_subscriptions;
        if conn.patterns.len() + fresh.len() > max {
            return Err(exhausted(format!(
                "at most {max} subscriptions per connection"
            )));
        }
        let bytes: usize = fresh.iter().map(|p| index::cost(p)).sum();
        let after = conn.bytes + bytes;
        let max = limits.index_bytes_per_connection;
        if after > max {
            return Err(exhausted(format!(
                "the subscriptions would take {after} bytes of index, at most {max} per connection"
            )));
        }
        if let Some(ip) = conn.peer {
            let held = state.per_ip.get(&ip).copied().unwrap_or(0);
            let max = limits.index_bytes_per_ip;
            if held + bytes > max {
                return Err(exhausted(format!(
                    "the subscriptions of this client address would take {} bytes of index, \
                     at most {max} per address",
                    held + bytes
                )));
            }
        }
        if state.total + bytes > limits.index_bytes_total {
            return Err(exhausted(format!(
                "the gateway holds as many subscriptions as it may ({} bytes of index)",
                limits.index_bytes_total
            )));
        }
        // In the order asked for: a pattern's place is its age.
        for pattern in patterns {
            if fresh.contains(pattern) && !conn.patterns.contains_key(*pattern) {
                conn.patterns.insert(Box::from(*pattern), conn.next_place);
                conn.next_place += 1;
                state.index.insert(pattern, self.key);
            }
        }

        conn.bytes = after;
        conn.gauge.add(gauge_value(fresh.len()));
        if let Some(ip) = conn.peer {
            *state.per_ip.entry(ip).or_insert(0) += bytes;
        }
        state.total += bytes;
        for pattern in &fresh {
            state.hold(pattern, true);
        }
        state.refresh_interest();
        Ok(())
    }

    fn remove(&self, patterns: &[&str]) {
        let mut guard = self.broker.state.write();
        let state = &mut *guard;
        let Some(conn) = state.conns.get_mut(&self.key) else {
            return;
        };
        let (mut removed, mut bytes) = (Vec::new(), 0);
        for pattern in patterns {
            if conn.patterns.remove(*pattern).is_some() {
                state.index.remove(pattern, self.key);
                removed.push(*pattern);
                bytes += index::cost(pattern);
            }
        }
        if !removed.is_empty() {
            // At most 16/7 buckets per pattern held, as after it grew.
            if conn.patterns.capacity() > 2 * conn.patterns.len() {
                conn.patterns.shrink_to_fit();
            }
            conn.bytes = conn.bytes.saturating_sub(bytes);
            conn.gauge.sub(gauge_value(removed.len()));
            let peer = conn.peer;
            state.release(peer, bytes);
            for pattern in removed {
                state.hold(pattern, false);
            }
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

fn validate_all(patterns: &[&str]) -> Result<(), GatewayError> {
    for (i, pattern) in patterns.iter().enumerate() {
        topic::validate_pattern(pattern).map_err(|e| {
            GatewayError::with_detail(ErrorKind::InvalidParams, format!("topics[{i}]: {e}"))
        })?;
    }
    Ok(())
}

fn exhausted(detail: String) -> GatewayError {
    GatewayError::with_detail(ErrorKind::ResourceExhausted, detail)
}

fn invalid(e: TopicError) -> GatewayError {
    GatewayError::with_detail(ErrorKind::InvalidParams, e.to_string())
}
