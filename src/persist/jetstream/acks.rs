//! What a subscription's consumer loses when a resume recreates it: the
//! sequence the subscription started at, and the sequences acknowledged
//! out of order above its ack floor. Kept in the id bucket under
//! `acks.<hex(id)>` as JSON (`{"start":4,"acked":[5,7]}`), written by the
//! instance that holds the id, read by whichever opens it next.

use async_nats::jetstream::kv;
use serde::{Deserialize, Serialize};

use super::setup::{fail, hex};
use crate::persist::PersistError;

/// One subscription's acknowledgement state beyond its consumer's floor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct AckState {
    /// The subscription's first sequence: nothing below it was ever
    /// delivered to it.
    pub start: u64,
    /// Acknowledged sequences above the consumer's ack floor, ascending
    /// (at most `window`: see [`super::delivery::Held`]).
    pub acked: Vec<u64>,
}

/// The key of `id`'s state.
fn key(id: &str) -> String {
    format!("acks.{}", hex(id))
}

/// The state of `id`, if any was written (a subscription made before
/// this state was kept has none; a value switchyard did not write is
/// ignored and logged).
pub(super) async fn load(subs: &kv::Store, id: &str) -> Result<Option<AckState>, PersistError> {
    let Some(bytes) = subs.get(key(id)).await.map_err(|e| fail("kv get", e))? else {
        return Ok(None);
    };
    match serde_json::from_slice(&bytes) {
        Ok(state) => Ok(Some(state)),
        Err(e) => {
            tracing::warn!(target: "switchyard::persist", %id, error = %e, "unreadable acknowledgement state");
            Ok(None)
        }
    }
}

/// Replaces the state of `id`.
pub(super) async fn save(subs: &kv::Store, id: &str, state: &AckState) -> Result<(), PersistError> {
    let bytes = serde_json::to_vec(state).map_err(|e| fail("ack state", e))?;
    subs.put(key(id), bytes.into())
        .await
        .map_err(|e| fail("kv put", e))?;
    Ok(())
}

/// Forgets the state of `id` (idempotent).
pub(super) async fn purge(subs: &kv::Store, id: &str) -> Result<(), PersistError> {
    subs.purge(key(id)).await.map_err(|e| fail("kv purge", e))
}
