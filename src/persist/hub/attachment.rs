//! A connection's [`Attachment`]: the methods' semantics over the hub's
//! holders and the store, and the [`Pump`] of each held subscription.

use std::fmt;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{at_index, conflict, invalid, not_held, Attachment, Claim, Sink, Starts, Ticket};
use crate::error::{ErrorKind, GatewayError};
use crate::persist::{Acked, PersistError, Store, Stored};

// === impl Attachment ===

impl Attachment {
    /// `rpc.subscribe.persistent`: the subscription's `resumed_from_sequence`.
    /// Its deliveries start when `starts` is released.
    pub async fn subscribe(
        &self,
        id: &str,
        topic_name: &str,
        starts: &Starts,
    ) -> Result<u64, GatewayError> {
        self.hub.check(id, topic_name)?;
        let key = self.owner.key(id);
        // A new id counts against the owner's cap until it is stored.
        let _reserved = match self.hub.store.position(&key).await {
            Ok(Some(_)) => None,
            Ok(None) => Some(self.hub.reserve(&self.owner, 1).await?),
            Err(e) => return Err(e.to_gateway()),
        };
        match self.hub.claim(self.conn, &key, id, topic_name)? {
            Claim::Repeat => self.floor(id, &key).await,
            Claim::Fresh(ticket) => self.open(id, &key, topic_name, ticket, starts).await,
        }
    }

    /// `rpc.subscribe.persistent.batch`: every item subscribed, or none.
    /// Each is checked (params, holders, existing topics, caps) before any
    /// is opened; if one fails to open, those opened are detached and
    /// those created are deleted again. Deliveries start when `starts` is
    /// released.
    pub async fn subscribe_all(
        &self,
        items: &[(String, String)],
        starts: &Starts,
    ) -> Result<Vec<u64>, GatewayError> {
        let created = self.check_all(items).await?;
        let _reserved = self.hub.reserve(&self.owner, created.len()).await?;
        let mut results = Vec::with_capacity(items.len());
        let mut claimed = Vec::new();
        for (id, topic_name) in items {
            let key = self.owner.key(id);
            let outcome = match self.hub.claim(self.conn, &key, id, topic_name) {
                Ok(Claim::Repeat) => self.floor(id, &key).await,
                Ok(Claim::Fresh(ticket)) => {
                    claimed.push((key.clone(), ticket.clone()));
                    self.open(id, &key, topic_name, ticket, starts).await
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

    /// Checks every batch item before anything changes: params, no id
    /// twice with different topics, no holder elsewhere, no existing id
    /// with another topic. Returns the store keys that do not exist yet
    /// (each once).
    async fn check_all(&self, items: &[(String, String)]) -> Result<Vec<String>, GatewayError> {
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
            let key = self.owner.key(id);
            if let Some(h) = self.hub.holders.lock().get(&key) {
                if h.conn != self.conn || h.topic != *topic_name {
                    return Err(conflict(format!(
                        "subscription {id:?} is active on another connection or with another topic"
                    )));
                }
            }
            let position = self.hub.store.position(&key).await;
            match position.map_err(|e| e.to_gateway())? {
                Some((existing, _)) if existing != *topic_name => {
                    return Err(conflict(format!(
                        "subscription {id:?} exists with topic {existing:?}"
                    )));
                }
                Some(_) => {}
                None if created.contains(&key) => {}
                None => created.push(key),
            }
        }
        Ok(created)
    }

    /// `rpc.acknowledge.persistent`.
    pub async fn ack(&self, id: &str, seq: u64) -> Result<(), GatewayError> {
        let key = self.owner.key(id);
        if !self.hub.holds(self.conn, &key) {
            return Err(not_held(id));
        }
        match self.hub.store.ack(&key, seq).await {
            Ok(Acked::Yes) => Ok(()),
            Ok(Acked::NeverDelivered) => Err(invalid(format!(
                "sequence_id {seq} was never delivered to subscription {id:?}"
            ))),
            Err(PersistError::NotFound) => Err(not_held(id)),
            Err(e) => Err(e.to_gateway()),
        }
    }

    /// `rpc.unsubscribe.persistent`: deletes `id` (idempotent). The
    /// connection holds it (and its deliveries go on) until the delete is
    /// written: if that fails (-32009), nothing changed.
    pub async fn unsubscribe(&self, id: &str) -> Result<(), GatewayError> {
        let key = self.owner.key(id);
        let held_elsewhere = {
            let holders = self.hub.holders.lock();
            holders.get(&key).is_some_and(|h| h.conn != self.conn)
        };
        if held_elsewhere {
            return Err(GatewayError::with_detail(
                ErrorKind::NotFound,
                format!("subscription {id:?} is held by another connection"),
            ));
        }
        self.hub
            .store
            .delete(&key)
            .await
            .map_err(|e| e.to_gateway())?;
        let mut holders = self.hub.holders.lock();
        if holders.get(&key).is_some_and(|h| h.conn == self.conn) {
            if let Some(h) = holders.remove(&key) {
                h.stop.cancel();
            }
        }
        Ok(())
    }

    /// `rpc.unsubscribe.persistent.batch`: deletes every id, or none when
    /// one is held by another connection.
    pub async fn unsubscribe_all(&self, ids: &[String]) -> Result<(), GatewayError> {
        {
            let holders = self.hub.holders.lock();
            let foreign = ids.iter().position(|id| {
                holders
                    .get(&self.owner.key(id))
                    .is_some_and(|h| h.conn != self.conn)
            });
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

    async fn floor(&self, id: &str, key: &str) -> Result<u64, GatewayError> {
        match self.hub.store.position(key).await {
            Ok(Some((_, floor))) => Ok(floor),
            Ok(None) => Err(not_held(id)),
            Err(e) => Err(e.to_gateway()),
        }
    }

    async fn open(
        &self,
        id: &str,
        key: &str,
        topic_name: &str,
        ticket: Ticket,
        starts: &Starts,
    ) -> Result<u64, GatewayError> {
        match self.hub.store.open(key, topic_name).await {
            Ok(opened) => {
                let pump = Pump {
                    id: id.to_owned(),
                    sink: self.sink.clone(),
                    start: starts.gate(),
                    stop: ticket.stop,
                    gone: self.gone.clone(),
                };
                tokio::spawn(pump.run(opened.deliveries));
                Ok(opened.resumed_from)
            }
            Err(e) => {
                self.hub.release(key, &ticket);
                Err(e.to_gateway())
            }
        }
    }

    /// Undoes a batch: `claimed` and `created` are store keys.
    async fn roll_back(&self, claimed: &[(String, Ticket)], created: &[String]) {
        for (key, ticket) in claimed {
            self.hub.release(key, ticket);
            if created.contains(key) {
                if let Err(e) = self.hub.store.delete(key).await {
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
            .field("owner", &self.owner)
            .finish()
    }
}

/// Moves one subscription's deliveries into its connection's sink, once
/// the reply to the call that opened it is queued.
struct Pump {
    id: String,
    sink: Arc<dyn Sink>,
    /// Cancelled when the opening call's reply is queued ([`Starts`]).
    start: CancellationToken,
    stop: CancellationToken,
    gone: CancellationToken,
}

impl Pump {
    async fn run(self, mut deliveries: mpsc::Receiver<Stored>) {
        tokio::select! {
            () = self.start.cancelled() => {}
            () = self.stop.cancelled() => return,
            () = self.gone.cancelled() => return,
        }
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
