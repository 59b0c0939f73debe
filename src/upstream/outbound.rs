//! What a [`Link`] writes: calls registered in its correlator and their
//! requests, batches and notifications queued for its writer task, in id
//! order. (What it reads is in `inbound`, how a message is rendered for
//! the upstream in `encode`.)

use crate::envelope::{Message, Payload, WireId};
use crate::error::{ErrorKind, GatewayError, Side};
use crate::upstream::correlator::Correlator;

use super::link::{Link, Waiter};

/// How many recent batches are remembered for batch-wide error replies.
const BATCHES_REMEMBERED: usize = 64;

/// The upstream does not read its requests as fast as they come.
fn queue_full() -> GatewayError {
    GatewayError::with_detail(ErrorKind::ResourceExhausted, "upstream write queue full")
        .on(Side::Upstream)
}

/// Takes back the ids of a batch that could not be sent.
fn cancel_all(table: &mut Correlator<Waiter>, ids: &[Option<u64>]) {
    for id in ids.iter().flatten() {
        table.cancel(*id);
    }
}

// === impl Link ===

impl Link {
    /// Registers a call and queues its request. Returns the gateway id, or
    /// the error with the waiter back (it was never sent).
    pub(crate) fn send_request(
        &self,
        method: &str,
        params: Option<&Payload>,
        waiter: Waiter,
    ) -> Result<u64, (GatewayError, Option<Waiter>)> {
        // Params checked and the text rendered up to its id (NDJSON and
        // JSON-RPC) before the lock: under it, only the id is added.
        let params = match self.params(params) {
            Ok(p) => p,
            Err(e) => return Err((e, Some(waiter))),
        };
        let head = match self.request_head(method, params.as_deref()) {
            Ok(head) => head,
            Err(e) => return Err((e, Some(waiter))),
        };
        let direct = matches!(waiter, Waiter::Direct(..));
        let mut table = self.correlator.lock();
        let gid = table
            .insert(waiter)
            .map_err(|w| (GatewayError::new(ErrorKind::Unavailable), Some(w)))?;
        // Inserted just above, under the same lock: `cancel` gives it back.
        let taken = |table: &mut Correlator<Waiter>, e| Err((e, table.cancel(gid)));
        // `encode_request` counts what it encodes; a finished head is
        // counted once the lock is released.
        let (line, count_later) = match head {
            Some(head) => match self.finish_request(head, gid) {
                Ok(line) => {
                    let len = line.len();
                    (line, Some(len))
                }
                Err(e) => return taken(&mut table, e),
            },
            None => match self.encode_request(gid, method, params.as_deref()) {
                Ok(line) => (line, None),
                Err(e) => return taken(&mut table, e),
            },
        };
        // Queued under the lock so that write order equals id order, which
        // ordered (hld) connections rely on.
        if self.out.try_send(line).is_err() {
            return taken(&mut table, queue_full());
        }
        drop(table);
        if let Some(len) = count_later {
            self.count_request(len);
        }
        self.shared.entries_gauge().inc();
        if direct {
            self.direct_added.notify_one();
        }
        Ok(gid)
    }

    /// Registers the requests of a batch and queues it as one JSON array.
    /// `waiters[i]` is `Some` for requests and `None` for notifications;
    /// returns the gateway id of each request (`None` for notifications).
    pub(crate) fn send_batch(
        &self,
        calls: &[(&str, Option<&Payload>)],
        waiters: Vec<Option<Waiter>>,
    ) -> Result<Vec<Option<u64>>, GatewayError> {
        let mut table = self.correlator.lock();
        let mut ids = Vec::with_capacity(calls.len());
        let mut msgs = Vec::with_capacity(calls.len());
        for ((method, params), waiter) in calls.iter().zip(waiters) {
            let params = match self.params(*params) {
                Ok(p) => p.map(std::borrow::Cow::into_owned),
                Err(e) => {
                    cancel_all(&mut table, &ids);
                    return Err(e);
                }
            };
            let method = (*method).to_owned();
            match waiter {
                Some(w) => {
                    let Ok(gid) = table.insert(w) else {
                        cancel_all(&mut table, &ids);
                        return Err(GatewayError::new(ErrorKind::Unavailable));
                    };
                    ids.push(Some(gid));
                    msgs.push(Message::Request {
                        id: WireId::number(gid),
                        method,
                        params,
                    });
                }
                None => {
                    ids.push(None);
                    msgs.push(Message::Notification { method, params });
                }
            }
        }
        let sent = self
            .encode_batch(&msgs)
            .and_then(|text| self.out.try_send(text).map_err(|_| queue_full()));
        if let Err(e) = sent {
            cancel_all(&mut table, &ids);
            return Err(e);
        }
        // Lock order is batches → correlator (see fail_oldest_batch).
        drop(table);
        let requests: Vec<u64> = ids.iter().flatten().copied().collect();
        self.shared.entries_gauge().add(requests.len() as i64);
        let mut batches = self.batches.lock();
        batches.push_back(requests);
        if batches.len() > BATCHES_REMEMBERED {
            batches.pop_front();
        }
        Ok(ids)
    }

    /// Queues a notification.
    pub(crate) fn send_notification(
        &self,
        method: &str,
        params: Option<&Payload>,
    ) -> Result<(), GatewayError> {
        let msg = Message::Notification {
            method: method.to_owned(),
            params: self.params(params)?.map(std::borrow::Cow::into_owned),
        };
        let line = self.encode(&msg)?;
        self.out.try_send(line).map_err(|_| queue_full())
    }
}
