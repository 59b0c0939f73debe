//! Pub/sub for client connections: the `rpc.subscribe` family served by
//! switchyard itself (never forwarded), and [`EventSink`], the way a
//! published event reaches one client, in its dialect:
//!
//! - JSON-RPC and NDJSON clients: the notification
//!   `{"jsonrpc":"2.0","method":"rpc.notification","params":{"topic":…,"data":…}}`,
//!   rendered once per event for all of them;
//! - holon-rpc clients: the same as a server request with id `s<N>` (its
//!   reply is consumed), within the client's push window
//!   (`max_unanswered_pushes`; holon-rpc.md §8);
//! - Sideband clients: an `N` envelope on `event` with `e` = the topic and
//!   `d` = the data.
//!
//! An event never waits: a full outbox or push window drops it for that
//! client only (counted per listener and reason), and an outbox that stays
//! full for the slow-consumer timeout closes the client (see `outbox`).

use std::sync::Arc;

use prometheus::IntCounter;

use super::{ClientLinks, Pusher, Router};
use crate::dialect::client::EventForm;
use crate::envelope::{raw_from_string, Message, Payload, WireId};
use crate::outbox::{Offer, Outgoing};
use crate::pubsub::event::NOTIFICATION_METHOD;
use crate::pubsub::{methods, Delivery, Event, Subscriber};
use crate::telemetry::metrics::EventDrop;

/// The `upstream` label of requests switchyard answers itself.
const PUBSUB: &str = "pubsub";

/// One client's receiving end of the broker.
#[derive(Debug)]
pub(crate) struct EventSink {
    pusher: Pusher,
    delivered: IntCounter,
    /// By [`EventDrop`], in the order of `EventDrop::ALL`.
    dropped: [IntCounter; 3],
}

// === impl EventSink ===

impl EventSink {
    fn new(pusher: Pusher, router: &Router) -> Self {
        let events = &router.metrics().events;
        let name = router.cfg.name.as_str();
        let dropped = EventDrop::ALL.map(|r| events.dropped.with_label_values(&[name, r.as_str()]));
        EventSink {
            pusher,
            delivered: events.delivered.with_label_values(&[name]),
            dropped,
        }
    }

    fn offer(&self, event: &Event<'_>) -> Result<Offer, EventDrop> {
        match self.pusher.codec().event_form() {
            EventForm::Notification => {
                let text = event
                    .notification_json()
                    .map_err(|_| EventDrop::Untranslatable)?;
                match self
                    .pusher
                    .outbox()
                    .offer_frame(Outgoing::Text(text.clone()))
                {
                    Offer::Full => Err(EventDrop::SlowConsumer),
                    offer => Ok(offer),
                }
            }
            EventForm::Request => {
                let params = event.params_json().map_err(|_| EventDrop::Untranslatable)?;
                let params = Payload::Json(raw_from_string(params.to_string()));
                self.pusher
                    .notification(NOTIFICATION_METHOD, Some(params))
                    .map(|()| Offer::Queued)
            }
            EventForm::Envelope => self
                .pusher
                .notification(event.topic, Some(event.data.clone()))
                .map(|()| Offer::Queued),
        }
    }
}

impl Subscriber for EventSink {
    fn deliver(&self, event: &Event<'_>) -> Delivery {
        match self.offer(event) {
            Ok(Offer::Closed) => Delivery::Gone,
            Ok(_) => {
                self.delivered.inc();
                Delivery::Delivered
            }
            Err(reason) => {
                let i = EventDrop::ALL.iter().position(|r| *r == reason);
                if let Some(counter) = i.and_then(|i| self.dropped.get(i)) {
                    counter.inc();
                }
                Delivery::Dropped
            }
        }
    }
}

// === impl Router ===

impl Router {
    /// Serves one of the `rpc.subscribe` family for `client`; `None` when
    /// `method` is not one of them.
    pub(super) fn pubsub(
        &self,
        id: &WireId,
        method: &str,
        params: Option<&Payload>,
        client: &ClientLinks,
    ) -> Option<Message> {
        if !methods::is_pubsub(method) {
            return None;
        }
        let asked = methods::requested(method, params);
        let peer = crate::telemetry::Peer(client.peer());
        if let Some(refusal) = self.refuse_topics(id, &asked, peer, client.client_name()) {
            return Some(refusal);
        }
        let outcome = client.with_subscriptions(
            || {
                let sink = EventSink::new(client.pusher().clone(), self);
                let gauge = self
                    .metrics()
                    .events
                    .subscriptions
                    .with_label_values(&[self.cfg.name.as_str()]);
                self.broker.register(Arc::new(sink), gauge, client.peer())
            },
            |registration| methods::call(registration, method, params),
        );
        Some(self.own_reply(id, PUBSUB, outcome))
    }
}
