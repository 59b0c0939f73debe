//! Who owns a persistent subscription ([`Owner`]) and how many one owner,
//! one connection and one topic may have ([`Caps`]).
//!
//! # Ownership
//!
//! A `subscription_id` is a name inside its owner's namespace, never a
//! global one: the store keeps it under [`Owner::key`], which joins the
//! owner and the id the client chose. Two identities that both name their
//! subscription `orders-1` have two subscriptions; neither can resume,
//! acknowledge, unsubscribe or even detect the other's. An id that belongs
//! to someone else is, to a client, exactly an id that does not exist: a
//! subscribe creates the caller's own subscription under that name, an
//! acknowledgement is the `-32003` of an unknown id, an unsubscribe is
//! the idempotent success of deleting nothing. No reply names another
//! owner's id, topic or position.
//!
//! The owner of a connection is its identity on its listener:
//!
//! - a named client (`[[listeners.<name>.clients]]`): the listener and the
//!   client's name;
//! - the listener's unnamed client (its `auth_token`, or no credential at
//!   all): the listener alone. Every connection to a listener without a
//!   credential is the same identity, because nothing tells them apart
//!   that would survive a reconnect — and detach/resume must work across
//!   connections. Give callers that must not share subscriptions a
//!   credential (a named client) or a listener of their own.
//!
//! The key is the JSON array `[listener, client, id]` (`client` empty for
//! the unnamed client): unambiguous whatever the names hold, and every key
//! of one owner starts with [`Owner::prefix`], which is how the store
//! counts an owner's subscriptions.
//!
//! # Caps
//!
//! - [`Caps::per_owner`]: durable subscriptions one owner may have (held or
//!   detached, counted in the store, so a restart does not reset it);
//! - [`Caps::per_connection`]: subscriptions one connection may hold;
//! - [`Caps::per_topic`]: subscriptions of one topic held at once on this
//!   instance, the fan-out of each stored message (every held subscription
//!   of the topic gets its own frame);
//! - and the store's total ([`super::DEFAULT_MAX_SUBSCRIPTIONS`]).
//!
//! Past any of them a subscribe is `-32007` (resource exhausted) naming
//! the cap, never anyone else's subscription.

use serde::Serialize;

/// Default [`Caps::per_owner`].
pub const DEFAULT_PER_OWNER: usize = 1000;
/// Default [`Caps::per_connection`]: one full batch.
pub const DEFAULT_PER_CONNECTION: usize = 1000;
/// Default [`Caps::per_topic`].
pub const DEFAULT_PER_TOPIC: usize = 1000;

/// The identity a persistent subscription belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    listener: String,
    /// Empty: the listener's unnamed client.
    client: String,
}

/// How many durable subscriptions one owner, one connection and one topic
/// may have (`[persistence]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Subscription ids one owner may have in the store, held or not.
    pub per_owner: usize,
    /// Subscription ids one connection may hold at once.
    pub per_connection: usize,
    /// Subscriptions of one topic held at once on this instance.
    pub per_topic: usize,
}

// === impl Owner ===

impl Owner {
    /// The unnamed client of `listener` (its `auth_token`, or none).
    pub fn listener(listener: &str) -> Self {
        Owner {
            listener: listener.to_owned(),
            client: String::new(),
        }
    }

    /// The named client `client` of `listener`.
    pub fn client(listener: &str, client: &str) -> Self {
        Owner {
            listener: listener.to_owned(),
            client: client.to_owned(),
        }
    }

    /// The store's key of this owner's subscription `id`.
    pub fn key(&self, id: &str) -> String {
        #[derive(Serialize)]
        struct Key<'a>(&'a str, &'a str, &'a str);
        // Serializing three strings cannot fail.
        serde_json::to_string(&Key(&self.listener, &self.client, id)).unwrap_or_default()
    }

    /// What every key of this owner starts with.
    pub fn prefix(&self) -> String {
        let mut key = self.key("");
        // `["l","c",""]` without its closing `"]`.
        key.truncate(key.len().saturating_sub(2));
        key
    }
}

// === impl Caps ===

impl Default for Caps {
    fn default() -> Self {
        Caps {
            per_owner: DEFAULT_PER_OWNER,
            per_connection: DEFAULT_PER_CONNECTION,
            per_topic: DEFAULT_PER_TOPIC,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unambiguous_and_start_with_their_owners_prefix() {
        let cases = [
            (Owner::listener("ws"), "a"),
            (Owner::client("ws", "alice"), "a"),
            (Owner::client("ws\",\"alice", ""), "a"),
            (Owner::listener("ws/alice"), "a"),
            (Owner::client("ws", ""), "x\",\"y"),
        ];
        let keys: Vec<String> = cases.iter().map(|(o, id)| o.key(id)).collect();
        for (i, k) in keys.iter().enumerate() {
            assert!(k.starts_with(&cases[i].0.prefix()), "{k}");
            for (j, other) in keys.iter().enumerate() {
                assert!(i == j || k != other, "{k} twice");
            }
            for (j, (o, _)) in cases.iter().enumerate() {
                if cases[j].0 != cases[i].0 {
                    assert!(!k.starts_with(&o.prefix()), "{k} under {o:?}");
                }
            }
        }
    }
}
