//! The [`Hub`]: which connection holds which subscription id, and the
//! pump from an opened subscription into a client's [`Sink`].
//!
//! One `Arc<Hub>` is shared by every listener. A connection makes an
//! [`Attachment`] on its first persistent call and serves the methods
//! through it; dropping it (the connection closed) detaches every
//! subscription it holds and keeps their positions (jsonrpc-ws.md §7.3).
//!
//! Holders (§7.3): an id is held by at most one connection. Subscribing to
//! an id held by another connection, or to an existing id with another
//! topic, is -32005; repeating it on the holding connection with the same
//! topic is a no-op that reports the current floor. Acknowledging needs
//! the id held by this connection (else -32003). Unsubscribing deletes the
//! id and is idempotent (an id held by another connection is -32003).
//!
//! A pump starts once the reply to the call that opened it is queued
//! ([`Starts`]): a client reads `rpc.subscribe.persistent`'s result before
//! the subscription's first delivery, even when retained messages are
//! ready at once.
//!
//! The pump waits for room in the client's outbox rather than dropping: a
//! persistent message is never lost on the way to a connected client (and
//! one a slow client never acknowledges is sent again anyway).
//!
//! Owners (see [`super::owner`]): every id a connection names is looked up
//! in its [`Owner`]'s namespace, so holders, conflicts and "unknown id"
//! are all within one identity's subscriptions; the store's key joins the
//! owner and the id.
//!
//! Bounds: one holder per subscription id ([`super::DEFAULT_MAX_SUBSCRIPTIONS`]
//! in the store), ids of at most [`MAX_ID_BYTES`]; the [`Caps`] per owner,
//! per connection and per topic; one pump task per held id; nothing is
//! queued here beyond the store's delivery channel.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::{Backend, Caps, Owner, PersistError, Store, Stored, Topics};
use crate::error::{ErrorKind, GatewayError};
use crate::pubsub::topic;

/// The longest subscription id accepted, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// A connection's receiving end of its persistent subscriptions.
pub trait Sink: Send + Sync + fmt::Debug + 'static {
    /// Sends `message` of subscription `id` to the client, waiting for
    /// room; false when the client is gone.
    fn deliver<'a>(&'a self, id: &'a str, message: &'a Stored) -> BoxFuture<'a, bool>;
}

/// The pumps one call opened, held until its reply is queued: the caller
/// makes one per call (a batch shares one), passes it to
/// [`super::methods::call`], and calls [`Starts::release`] once the reply
/// is in the client's outbox. Dropping it releases them too. Holds one
/// token per subscription the call opened.
#[derive(Debug, Default)]
pub struct Starts(Mutex<Vec<CancellationToken>>);

/// Holders of every subscription id, over the configured store.
pub struct Hub {
    store: Arc<Backend>,
    topics: Topics,
    /// Issues connection keys; never reused.
    next_conn: AtomicU64,
    /// By store key ([`Owner::key`]).
    holders: Mutex<HashMap<String, Holder>>,
    caps: Caps,
    /// Subscriptions being created, per owner prefix: counted with the
    /// store's so that concurrent creates cannot pass the owner cap
    /// together.
    creating: Mutex<HashMap<String, usize>>,
}

/// A connection's handle on the hub; dropping it detaches its
/// subscriptions.
pub struct Attachment {
    hub: Arc<Hub>,
    conn: u64,
    /// Whose namespace this connection's ids are in.
    owner: Owner,
    sink: Arc<dyn Sink>,
    /// Cancelled when the connection is gone: every pump stops.
    gone: CancellationToken,
}

mod attachment;

#[derive(Debug)]
struct Holder {
    conn: u64,
    topic: String,
    /// Which claim made it (a later holder of the same id is another).
    claim: u64,
    /// Stops this holder's pump.
    stop: CancellationToken,
}

/// One claim of an id: its number and the token that stops its pump.
#[derive(Debug, Clone)]
struct Ticket {
    claim: u64,
    stop: CancellationToken,
}

/// What a subscribe found for one id.
enum Claim {
    /// Claimed now: open it.
    Fresh(Ticket),
    /// Already held by this connection with this topic.
    Repeat,
}

// === impl Hub ===

impl Hub {
    /// A hub over `store`, serving the persistent `topics`.
    pub fn new(store: Arc<Backend>, topics: Topics) -> Self {
        Hub {
            store,
            topics,
            next_conn: AtomicU64::new(1),
            holders: Mutex::new(HashMap::new()),
            caps: Caps::default(),
            creating: Mutex::new(HashMap::new()),
        }
    }

    /// The same hub with `caps` instead of the defaults.
    pub fn with_caps(mut self, caps: Caps) -> Self {
        self.caps = caps;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<Backend> {
        &self.store
    }

    /// The persistent topics.
    pub fn topics(&self) -> &Topics {
        &self.topics
    }

    /// Attaches a connection of `owner` delivering through `sink`.
    pub fn attach(self: &Arc<Self>, sink: Arc<dyn Sink>, owner: Owner) -> Attachment {
        Attachment {
            hub: self.clone(),
            conn: self.next_conn.fetch_add(1, Ordering::Relaxed),
            owner,
            sink,
            gone: CancellationToken::new(),
        }
    }

    /// Subscription ids held by a connection now.
    pub fn held(&self) -> usize {
        self.holders.lock().len()
    }

    /// -32602 unless `id` and `topic` can be subscribed: an id of 1 to
    /// [`MAX_ID_BYTES`] bytes, a concrete topic configured as persistent.
    pub fn check(&self, id: &str, topic_name: &str) -> Result<(), GatewayError> {
        if id.is_empty() || id.len() > MAX_ID_BYTES {
            return Err(invalid(format!(
                "subscription_id must be 1 to {MAX_ID_BYTES} bytes"
            )));
        }
        topic::validate_topic(topic_name).map_err(|e| invalid(format!("topic: {e}")))?;
        if self.topics.policy(topic_name).is_none() {
            return Err(invalid(format!(
                "topic {topic_name:?} is not persistent (no [[persistent_topics]] entry matches it)"
            )));
        }
        Ok(())
    }

    fn detach_all(&self, conn: u64) {
        self.holders.lock().retain(|_, h| {
            if h.conn == conn {
                h.stop.cancel();
            }
            h.conn != conn
        });
    }

    /// Claims `key` (the client's `id`) for `conn`, or says why not: held
    /// elsewhere, another topic, or a per-connection or per-topic cap.
    fn claim(
        &self,
        conn: u64,
        key: &str,
        id: &str,
        topic_name: &str,
    ) -> Result<Claim, GatewayError> {
        let mut holders = self.holders.lock();
        match holders.get(key) {
            Some(h) if h.conn != conn => Err(conflict(format!(
                "subscription {id:?} is active on another connection"
            ))),
            Some(h) if h.topic != topic_name => Err(conflict(format!(
                "subscription {id:?} exists with topic {:?}",
                h.topic
            ))),
            Some(_) => Ok(Claim::Repeat),
            None => {
                let (mut on_conn, mut on_topic) = (0, 0);
                for h in holders.values() {
                    on_conn += usize::from(h.conn == conn);
                    on_topic += usize::from(h.topic == topic_name);
                }
                if on_conn >= self.caps.per_connection {
                    return Err(full(format!(
                        "at most {} persistent subscriptions per connection",
                        self.caps.per_connection
                    )));
                }
                if on_topic >= self.caps.per_topic {
                    return Err(full(format!(
                        "at most {} persistent subscriptions of one topic at once",
                        self.caps.per_topic
                    )));
                }
                let ticket = Ticket {
                    claim: self.next_conn.fetch_add(1, Ordering::Relaxed),
                    stop: CancellationToken::new(),
                };
                holders.insert(
                    key.to_owned(),
                    Holder {
                        conn,
                        topic: topic_name.to_owned(),
                        claim: ticket.claim,
                        stop: ticket.stop.clone(),
                    },
                );
                Ok(Claim::Fresh(ticket))
            }
        }
    }

    /// Gives up `ticket`'s claim of `key` (a later claim stays).
    fn release(&self, key: &str, ticket: &Ticket) {
        ticket.stop.cancel();
        let mut holders = self.holders.lock();
        if holders.get(key).is_some_and(|h| h.claim == ticket.claim) {
            holders.remove(key);
        }
    }

    fn holds(&self, conn: u64, key: &str) -> bool {
        self.holders.lock().get(key).is_some_and(|h| h.conn == conn)
    }

    /// Reserves `new` more subscriptions for `owner` under its cap (the
    /// store's count plus the creates in flight), or -32007.
    async fn reserve(&self, owner: &Owner, new: usize) -> Result<Reserved<'_>, GatewayError> {
        let prefix = owner.prefix();
        let stored = self
            .store
            .owned(&prefix)
            .await
            .map_err(|e: PersistError| e.to_gateway())?;
        let mut creating = self.creating.lock();
        let pending = creating.entry(prefix.clone()).or_default();
        if stored + *pending + new > self.caps.per_owner {
            if *pending == 0 {
                creating.remove(&prefix);
            }
            return Err(full(format!(
                "at most {} persistent subscriptions per client",
                self.caps.per_owner
            )));
        }
        *pending += new;
        Ok(Reserved {
            hub: self,
            prefix,
            n: new,
        })
    }
}

/// Creates counted against an owner's cap until they are in the store
/// (or failed): dropping it gives them back.
struct Reserved<'a> {
    hub: &'a Hub,
    prefix: String,
    n: usize,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        let mut creating = self.hub.creating.lock();
        if let Some(pending) = creating.get_mut(&self.prefix) {
            *pending = pending.saturating_sub(self.n);
            if *pending == 0 {
                creating.remove(&self.prefix);
            }
        }
    }
}

// === impl Starts ===

impl Starts {
    /// A gate for one pump, opened by [`Starts::release`].
    fn gate(&self) -> CancellationToken {
        let gate = CancellationToken::new();
        self.0.lock().push(gate.clone());
        gate
    }

    /// Starts every pump held: the call's reply is queued.
    pub fn release(&self) {
        for gate in self.0.lock().drain(..) {
            gate.cancel();
        }
    }
}

impl Drop for Starts {
    fn drop(&mut self) {
        self.release();
    }
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub")
            .field("backend", &self.store.kind())
            .field("held", &self.held())
            .finish()
    }
}

fn invalid(detail: String) -> GatewayError {
    GatewayError::with_detail(ErrorKind::InvalidParams, detail)
}

fn full(detail: String) -> GatewayError {
    GatewayError::with_detail(ErrorKind::ResourceExhausted, detail)
}

fn conflict(detail: String) -> GatewayError {
    GatewayError::with_detail(ErrorKind::Conflict, detail)
}

fn not_held(id: &str) -> GatewayError {
    GatewayError::with_detail(
        ErrorKind::NotFound,
        format!("unknown subscription id {id:?} (or not held by this connection)"),
    )
}

/// A batch item's error, naming its index.
fn at_index(i: usize, e: GatewayError) -> GatewayError {
    let detail = e.detail.as_deref().unwrap_or_default();
    GatewayError::with_detail(e.kind, format!("subscriptions[{i}]: {detail}"))
}

#[cfg(test)]
mod tests;
