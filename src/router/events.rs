//! Pub/sub for client connections: [`Events`], the `rpc.subscribe` family
//! served by switchyard itself (never forwarded) for one listener, and
//! [`EventSink`], the way a published event reaches one client, in its
//! dialect:
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

use prometheus::{IntCounter, IntGauge};

use super::client::ClientLinks;
use super::pusher::Pusher;
use crate::dialect::EventForm;
use crate::envelope::{raw_from_string, Payload};
use crate::error::GatewayError;
use crate::outbox::{Offer, Outgoing};
use crate::pubsub::event::NOTIFICATION_METHOD;
use crate::pubsub::{methods, Broker, Delivery, Event, Subscriber};
use crate::telemetry::metrics::{EventDrop, Metrics};

/// One listener's pub/sub methods: the broker every listener shares and
/// the listener's event series, resolved once.
#[derive(Debug)]
pub(super) struct Events {
    broker: Arc<Broker>,
    /// `subscriptions` of this listener.
    subscriptions: IntGauge,
    delivered: IntCounter,
    /// By [`EventDrop`], in the order of `EventDrop::ALL`.
    dropped: [IntCounter; 3],
}

// === impl Events ===

impl Events {
    /// The pub/sub methods of listener `listener`, served from `broker`.
    pub(super) fn new(broker: Arc<Broker>, metrics: &Metrics, listener: &str) -> Self {
        let events = &metrics.events;
        Events {
            broker,
            subscriptions: events.subscriptions.with_label_values(&[listener]),
            delivered: events.delivered.with_label_values(&[listener]),
            dropped: EventDrop::ALL
                .map(|r| events.dropped.with_label_values(&[listener, r.as_str()])),
        }
    }

    /// Serves `method`, one of the `rpc.subscribe` family (the caller has
    /// checked that and the client's topic policy) for `client`; `None`
    /// from the method table is an unknown `rpc.*` method.
    pub(super) fn serve(
        &self,
        method: &str,
        params: Option<&Payload>,
        client: &ClientLinks,
    ) -> Option<Result<Payload, GatewayError>> {
        client.with_subscriptions(
            || {
                let sink = EventSink {
                    pusher: client.pusher().clone(),
                    delivered: self.delivered.clone(),
                    dropped: self.dropped.clone(),
                };
                self.broker
                    .register(Arc::new(sink), self.subscriptions.clone(), client.peer())
            },
            |registration| methods::call(registration, method, params),
        )
    }
}

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
