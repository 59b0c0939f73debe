//! Persistent subscriptions for client connections (jsonrpc-ws.md §7.3):
//! [`Persistent`], the six `rpc.*.persistent*` methods served by
//! switchyard itself (never forwarded) for one listener, and
//! [`PersistentSink`], the way a stored message reaches
//! one client, in its dialect:
//!
//! - JSON-RPC and NDJSON clients: the notification
//!   `{"jsonrpc":"2.0","method":"rpc.notification.persistent","params":{"subscription_id":…,"topic":…,"sequence_id":…,"timestamp":…,"data":…}}`;
//! - holon-rpc clients: the same method and params as a server request
//!   with id `s<N>` (its reply is consumed), within the client's push
//!   window (`max_unanswered_pushes`; holon-rpc.md §8);
//! - Sideband clients: an `N` envelope on `event` with
//!   `e` = `rpc.notification.persistent` and `d` = the same params object.
//!
//! Unlike a pub/sub event, a delivery waits for room (in the outbox, and
//! in a holon-rpc client's push window) instead of being dropped; an
//! outbox that stays full for the slow-consumer timeout closes the client
//! as for any reply (see `outbox`), and what it did not acknowledge is
//! sent again when it resumes.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use prometheus::IntCounter;

use super::client::ClientLinks;
use super::pusher::Pusher;
use crate::dialect::sideband::transcode;
use crate::dialect::EventForm;
use crate::envelope::{raw_from_string, Message, Payload};
use crate::error::GatewayError;
use crate::outbox::{Offer, Outgoing};
use crate::persist::hub::{Hub, Sink, Starts};
use crate::persist::{methods, Stored, NOTIFICATION_METHOD};
use crate::telemetry::metrics::{DropReason, Metrics};

/// One listener's persistent methods: the hub every listener shares and
/// the listener's delivery series, resolved once.
#[derive(Debug)]
pub(super) struct Persistent {
    hub: Arc<Hub>,
    /// The listener's name: the owner of the subscriptions its clients open.
    listener: String,
    delivered: IntCounter,
}

// === impl Persistent ===

impl Persistent {
    /// The persistent methods of listener `listener`, served from `hub`.
    pub(super) fn new(hub: Arc<Hub>, metrics: &Metrics, listener: &str) -> Self {
        Persistent {
            hub,
            listener: listener.to_owned(),
            delivered: metrics.persist.delivered.with_label_values(&[listener]),
        }
    }

    /// Serves `method`, one of the persistent methods (the caller has
    /// checked that and the client's topic policy) for `client`; `None`
    /// from the method table is an unknown `rpc.*` method. Its
    /// subscriptions deliver once `starts` is released.
    pub(super) async fn serve(
        &self,
        method: &str,
        params: Option<&Payload>,
        client: &ClientLinks,
        starts: &Starts,
    ) -> Option<Result<Payload, GatewayError>> {
        let attachment = client.persistent(|| {
            let sink = PersistentSink {
                pusher: client.pusher().clone(),
                delivered: self.delivered.clone(),
            };
            Hub::attach(&self.hub, Arc::new(sink), client.owner(&self.listener))
        });
        // Boxed: the store's futures are large, and inline they would make
        // every request's future (a task of its own while it waits for an
        // upstream link) as large as the largest of them.
        Box::pin(methods::call(&attachment, method, params, starts)).await
    }
}

/// One client's receiving end of its persistent subscriptions.
#[derive(Debug)]
pub(crate) struct PersistentSink {
    pusher: Pusher,
    delivered: IntCounter,
}

// === impl PersistentSink ===

impl PersistentSink {
    async fn send(&self, id: &str, message: &Stored) -> bool {
        let Some(params) = params_json(id, message) else {
            // Data with no JSON form cannot be delivered to anyone: counted,
            // and passed over (it stays unacknowledged).
            self.pusher.count_dropped_client(DropReason::Untranslatable);
            return true;
        };
        let outbox = self.pusher.outbox();
        let offer = match self.pusher.codec().event_form() {
            EventForm::Notification => {
                let frame = format!(
                    r#"{{"jsonrpc":"2.0","method":"{NOTIFICATION_METHOD}","params":{params}}}"#
                );
                outbox.deliver_frame(Outgoing::Text(frame.into())).await
            }
            EventForm::Request => {
                let params = Payload::Json(raw_from_string(params));
                self.pusher
                    .push_waiting(NOTIFICATION_METHOD, Some(params))
                    .await
            }
            EventForm::Envelope => {
                let msg = Message::Notification {
                    method: NOTIFICATION_METHOD.into(),
                    params: Some(Payload::Json(raw_from_string(params))),
                };
                outbox.deliver(&msg).await
            }
        };
        match offer {
            Offer::Queued => {
                self.delivered.inc();
                true
            }
            // Passed over, counted (it stays unacknowledged); the
            // subscription goes on with the next message.
            Offer::Untranslatable | Offer::Full => {
                self.pusher.count_dropped_client(DropReason::Untranslatable);
                true
            }
            Offer::Closed => false,
        }
    }
}

impl Sink for PersistentSink {
    fn deliver<'a>(&'a self, id: &'a str, message: &'a Stored) -> BoxFuture<'a, bool> {
        Box::pin(self.send(id, message))
    }
}

/// `{"subscription_id","topic","sequence_id","timestamp","data"}` as JSON
/// text; `None` when the data has no JSON form.
fn params_json(id: &str, m: &Stored) -> Option<String> {
    let transcoded;
    let data = match &m.data {
        Payload::Json(raw) => raw.get(),
        Payload::Cbor(bytes) => {
            transcoded = transcode::cbor_to_json(bytes).ok()?;
            transcoded.get()
        }
    };
    let id = serde_json::to_string(id).ok()?;
    let topic = serde_json::to_string(&m.topic).ok()?;
    Some(format!(
        r#"{{"subscription_id":{id},"topic":{topic},"sequence_id":{},"timestamp":"{}","data":{data}}}"#,
        m.seq,
        m.timestamp()
    ))
}
