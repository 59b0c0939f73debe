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
//! The pump waits for room in the client's outbox rather than dropping: a
//! persistent message is never lost on the way to a connected client (and
//! one a slow client never acknowledges is sent again anyway).
//!
//! Bounds: one holder per subscription id ([`super::DEFAULT_MAX_SUBSCRIPTIONS`]
//! in the store), ids of at most [`MAX_ID_BYTES`]; one pump task per held
//! id; nothing is queued here beyond the store's delivery channel.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Acked, Backend, PersistError, Store, Stored, Topics};
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

/// Holders of every subscription id, over the configured store.
pub struct Hub {
    store: Arc<Backend>,
    topics: Topics,
    /// Issues connection keys; never reused.
    next_conn: AtomicU64,
    holders: Mutex<HashMap<String, Holder>>,
}

/// A connection's handle on the hub; dropping it detaches its
/// subscriptions.
pub struct Attachment {
    hub: Arc<Hub>,
    conn: u64,
    sink: Arc<dyn Sink>,
    /// Cancelled when the connection is gone: every pump stops.
    gone: CancellationToken,
}

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
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<Backend> {
        &self.store
    }

    /// The persistent topics.
    pub fn topics(&self) -> &Topics {
        &self.topics
    }

    /// Attaches a connection delivering through `sink`.
    pub fn attach(self: &Arc<Self>, sink: Arc<dyn Sink>) -> Attachment {
        Attachment {
            hub: self.clone(),
            conn: self.next_conn.fetch_add(1, Ordering::Relaxed),
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

    /// Claims `id` for `conn`, or says why not.
    fn claim(&self, conn: u64, id: &str, topic_name: &str) -> Result<Claim, GatewayError> {
        let mut holders = self.holders.lock();
        match holders.get(id) {
            Some(h) if h.conn != conn => Err(conflict(format!(
                "subscription {id:?} is active on another connection"
            ))),
            Some(h) if h.topic != topic_name => Err(conflict(format!(
                "subscription {id:?} exists with topic {:?}",
                h.topic
            ))),
            Some(_) => Ok(Claim::Repeat),
            None => {
                let ticket = Ticket {
                    claim: self.next_conn.fetch_add(1, Ordering::Relaxed),
                    stop: CancellationToken::new(),
                };
                holders.insert(
                    id.to_owned(),
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

    /// Gives up `ticket`'s claim of `id` (a later claim stays).
    fn release(&self, id: &str, ticket: &Ticket) {
        ticket.stop.cancel();
        let mut holders = self.holders.lock();
        if holders.get(id).is_some_and(|h| h.claim == ticket.claim) {
            holders.remove(id);
        }
    }

    fn holds(&self, conn: u64, id: &str) -> bool {
        self.holders.lock().get(id).is_some_and(|h| h.conn == conn)
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

// === impl Attachment ===

impl Attachment {
    /// `rpc.subscribe.persistent`: the subscription's `resumed_from_sequence`.
    pub async fn subscribe(&self, id: &str, topic_name: &str) -> Result<u64, GatewayError> {
        self.hub.check(id, topic_name)?;
        match self.hub.claim(self.conn, id, topic_name)? {
            Claim::Repeat => self.floor(id).await,
            Claim::Fresh(ticket) => self.open(id, topic_name, ticket).await,
        }
    }

    /// `rpc.subscribe.persistent.batch`: every item subscribed, or none.
    /// Each is checked (params, holders, existing topics) before any is
    /// opened; if one fails to open, those opened are detached and those
    /// created are deleted again.
    pub async fn subscribe_all(
        &self,
        items: &[(String, String)],
    ) -> Result<Vec<u64>, GatewayError> {
        for (i, (id, topic_name)) in items.iter().enumerate() {
            self.hub.check(id, topic_name).map_err(|e| at_index(i, e))?;
            let twin = items[..i].iter().find(|(other, _)| other == id);
            if twin.is_some_and(|(_, t)| t != topic_name) {
                return Err(invalid(format!(
                    "subscriptions[{i}]: {id:?} is listed twice with different topics"
                )));
            }
        }
        let mut created = Vec::new();
        for (id, topic_name) in items {
            if let Some(h) = self.hub.holders.lock().get(id) {
                if h.conn != self.conn || h.topic != *topic_name {
                    return Err(conflict(format!(
                        "subscription {id:?} is active on another connection or with another topic"
                    )));
                }
            }
            match self
                .hub
                .store
                .position(id)
                .await
                .map_err(|e| e.to_gateway())?
            {
                Some((existing, _)) if existing != *topic_name => {
                    return Err(conflict(format!(
                        "subscription {id:?} exists with topic {existing:?}"
                    )));
                }
                Some(_) => {}
                None => created.push(id.clone()),
            }
        }
        let mut results = Vec::with_capacity(items.len());
        let mut claimed = Vec::new();
        for (id, topic_name) in items {
            let outcome = match self.hub.claim(self.conn, id, topic_name) {
                Ok(Claim::Repeat) => self.floor(id).await,
                Ok(Claim::Fresh(ticket)) => {
                    claimed.push((id.clone(), ticket.clone()));
                    self.open(id, topic_name, ticket).await
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(resumed) => results.push(resumed),
                Err(e) => {
                    self.roll_back(&claimed, &created).await;
                    return Err(e);
                }
            }
        }
        Ok(results)
    }

    /// `rpc.acknowledge.persistent`.
    pub async fn ack(&self, id: &str, seq: u64) -> Result<(), GatewayError> {
        if !self.hub.holds(self.conn, id) {
            return Err(not_held(id));
        }
        match self.hub.store.ack(id, seq).await {
            Ok(Acked::Yes) => Ok(()),
            Ok(Acked::NeverDelivered) => Err(invalid(format!(
                "sequence_id {seq} was never delivered to subscription {id:?}"
            ))),
            Err(PersistError::NotFound) => Err(not_held(id)),
            Err(e) => Err(e.to_gateway()),
        }
    }

    /// `rpc.unsubscribe.persistent`: deletes `id` (idempotent).
    pub async fn unsubscribe(&self, id: &str) -> Result<(), GatewayError> {
        {
            let mut holders = self.hub.holders.lock();
            match holders.get(id) {
                Some(h) if h.conn != self.conn => {
                    return Err(GatewayError::with_detail(
                        ErrorKind::NotFound,
                        format!("subscription {id:?} is held by another connection"),
                    ));
                }
                Some(_) => {
                    if let Some(h) = holders.remove(id) {
                        h.stop.cancel();
                    }
                }
                None => {}
            }
        }
        self.hub
            .store
            .delete(id)
            .await
            .map(|_| ())
            .map_err(|e| e.to_gateway())
    }

    /// `rpc.unsubscribe.persistent.batch`: deletes every id, or none when
    /// one is held by another connection.
    pub async fn unsubscribe_all(&self, ids: &[String]) -> Result<(), GatewayError> {
        {
            let holders = self.hub.holders.lock();
            let foreign = ids
                .iter()
                .position(|id| holders.get(id).is_some_and(|h| h.conn != self.conn));
            if let Some(i) = foreign {
                return Err(GatewayError::with_detail(
                    ErrorKind::NotFound,
                    format!("subscription_ids[{i}]: held by another connection"),
                ));
            }
        }
        for id in ids {
            self.unsubscribe(id).await?;
        }
        Ok(())
    }

    async fn floor(&self, id: &str) -> Result<u64, GatewayError> {
        match self.hub.store.position(id).await {
            Ok(Some((_, floor))) => Ok(floor),
            Ok(None) => Err(not_held(id)),
            Err(e) => Err(e.to_gateway()),
        }
    }

    async fn open(&self, id: &str, topic_name: &str, ticket: Ticket) -> Result<u64, GatewayError> {
        match self.hub.store.open(id, topic_name).await {
            Ok(opened) => {
                let pump = Pump {
                    id: id.to_owned(),
                    sink: self.sink.clone(),
                    stop: ticket.stop,
                    gone: self.gone.clone(),
                };
                tokio::spawn(pump.run(opened.deliveries));
                Ok(opened.resumed_from)
            }
            Err(e) => {
                self.hub.release(id, &ticket);
                Err(e.to_gateway())
            }
        }
    }

    async fn roll_back(&self, claimed: &[(String, Ticket)], created: &[String]) {
        for (id, ticket) in claimed {
            self.hub.release(id, ticket);
            if created.contains(id) {
                if let Err(e) = self.hub.store.delete(id).await {
                    tracing::warn!(error = %e, "persistent batch subscribe: roll-back failed");
                }
            }
        }
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        self.gone.cancel();
        self.hub.detach_all(self.conn);
    }
}

impl fmt::Debug for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attachment")
            .field("conn", &self.conn)
            .finish()
    }
}

/// Moves one subscription's deliveries into its connection's sink.
struct Pump {
    id: String,
    sink: Arc<dyn Sink>,
    stop: CancellationToken,
    gone: CancellationToken,
}

impl Pump {
    async fn run(self, mut deliveries: mpsc::Receiver<Stored>) {
        loop {
            let next = tokio::select! {
                next = deliveries.recv() => next,
                () = self.stop.cancelled() => None,
                () = self.gone.cancelled() => None,
            };
            let Some(message) = next else {
                return;
            };
            let delivered = tokio::select! {
                delivered = self.sink.deliver(&self.id, &message) => delivered,
                () = self.stop.cancelled() => false,
                () = self.gone.cancelled() => false,
            };
            if !delivered {
                return;
            }
        }
    }
}

fn invalid(detail: String) -> GatewayError {
    GatewayError::with_detail(ErrorKind::InvalidParams, detail)
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
