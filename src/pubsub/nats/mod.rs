//! NATS core as the backbone of plain topics (`[pubsub] backend =
//! "nats"`): subscribers spread over several instances, and services
//! publish without an upstream feed.
//!
//! The [`Broker`] stays the local fan-out (outboxes, drop policy, bounds);
//! this module is the [`Backbone`] it is attached to:
//!
//! - **Interest.** One NATS subscription per distinct pattern held by this
//!   instance's clients (`<prefix><pattern>`), opened when the pattern's
//!   first local subscriber comes and closed when its last leaves
//!   (`subs`). A task per subscription hands what arrives to the local
//!   holders of its own pattern only ([`Broker::through`]). When several
//!   of this instance's patterns match a subject, NATS delivers the
//!   message once per subscription (k copies for k patterns), and each
//!   serves its own holders: closing one never costs the holders of
//!   another anything. A connection holding several matching patterns
//!   gets the event through its oldest one, so once (and in order: one
//!   subscription carries a subject to it).
//! - **Publishing.** An event published on this instance (an upstream
//!   feed, an upstream notification) is not delivered locally: it is
//!   written to NATS once, and comes back through this instance's own
//!   subscriptions like everyone else's, so every subscriber of every
//!   instance gets it exactly once. With `publish_upstream_events = false`
//!   an instance writes nothing and never opens its feeds: when several
//!   instances front one service, one publishes (or the service publishes
//!   on NATS itself). The publishing instance keeps its feeds open: who
//!   listens elsewhere is not known here.
//! - **Mapping** ([`wire`]): subject = prefix + topic, payload = the
//!   event's `data` as JSON (CBOR with the `Switchyard-Encoding: cbor`
//!   header), empty = `null`, at most `max_payload_bytes`.
//!
//! # Faults
//!
//! NATS core is at-most-once: an event published while an instance is
//! disconnected, or dropped by a slow subscription, is gone (persistent
//! topics, `rpc.subscribe.persistent`, are the durable path). The client
//! connects in the background: at start an unreachable NATS does not stop
//! the gateway, `rpc.subscribe` succeeds and the subscription is made when
//! the connection comes (events before that are missed). While NATS is
//! lost, clients stay connected and subscribed; the client reconnects and
//! subscribes again by itself and delivery resumes. Each loss is logged
//! and counted (`switchyard_pubsub_nats_disconnects_total`, the time in
//! `switchyard_pubsub_nats_disconnected_seconds_total`), and local events
//! meanwhile are dropped, counted (`reason="disconnected"`).
//!
//! # Bounds
//!
//! - Per NATS subscription, `pending_messages` messages in the client
//!   (past it the client drops, counted as `slow_consumer`): at most
//!   patterns × `pending_messages` × `max_payload_bytes`.
//! - Local events waiting to be written: `publish_queue` (past it,
//!   dropped, counted as `queue_full`).
//! - Interest changes waiting for the subscription task: one entry per
//!   distinct pattern changed, bounded by the broker's [`Limits`](super::Limits).

mod meters;
mod settings;
mod subs;
pub mod wire;

use std::sync::Arc;
use std::time::Instant;

use async_nats::{ConnectOptions, Event};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use self::meters::{Loss, Meters};
pub use self::settings::{Auth, Settings, Tls};
use super::broker::{Backbone, Broker};
use crate::envelope::Payload;

/// The backbone attached to a broker.
pub struct Nats {
    client: async_nats::Client,
    settings: Settings,
    meters: Meters,
    /// Local events on their way to NATS: subject, payload, CBOR.
    outgoing: mpsc::Sender<(String, bytes::Bytes, bool)>,
    /// The interest changes and the subscriptions.
    subs: Arc<subs::Subs>,
    /// Ends the backbone's tasks when it is dropped.
    stop: CancellationToken,
}

/// The backbone could not be set up (the connection itself is made in the
/// background and never fails here).
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// The `.creds` file could not be read.
    #[error("pubsub.nats.creds_file {path}: {source}")]
    Creds {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The client refused the options (a URL, the TLS files).
    #[error("pubsub.nats: {0}")]
    Connect(String),
}

// === impl Nats ===

impl Nats {
    /// Connects (in the background) and attaches the backbone to `broker`.
    pub async fn attach(
        settings: Settings,
        broker: &Arc<Broker>,
        meters: Meters,
    ) -> Result<Arc<Nats>, NatsError> {
        let options = options(&settings, &meters).await?;
        let client = options
            .connect(settings.urls.clone())
            .await
            .map_err(|e| NatsError::Connect(e.to_string()))?;
        let stop = CancellationToken::new();
        let (outgoing, queue) = mpsc::channel(settings.publish_queue);
        let subs = subs::Subs::start(
            client.clone(),
            settings.clone(),
            Arc::downgrade(broker),
            meters.clone(),
            stop.clone(),
        );
        tokio::spawn(write(client.clone(), queue, meters.clone(), stop.clone()));
        let nats = Arc::new(Nats {
            client,
            settings,
            meters,
            outgoing,
            subs,
            stop,
        });
        broker.set_backbone(nats.clone());
        Ok(nats)
    }

    /// Whether the NATS connection is up now.
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }
}

impl Backbone for Nats {
    fn interest(&self, pattern: &str, on: bool) {
        self.subs.want(pattern, on);
    }

    fn publish(&self, topic: &str, data: &Payload) {
        if !self.settings.publish_upstream_events {
            self.meters.drop(Loss::NotPublisher);
            return;
        }
        let Ok((payload, cbor)) = wire::encode(data, self.settings.max_payload_bytes) else {
            self.meters.drop(Loss::Oversize);
            return;
        };
        let subject = wire::subject(&self.settings.subject_prefix, topic);
        if self.outgoing.try_send((subject, payload, cbor)).is_err() {
            self.meters.drop(Loss::QueueFull);
        }
    }

    fn publishes(&self) -> bool {
        self.settings.publish_upstream_events
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for Nats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nats")
            .field("settings", &self.settings)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

/// The client's options: background connection, credentials, TLS, the
/// pending limit, and the events that keep the meters.
async fn options(settings: &Settings, meters: &Meters) -> Result<ConnectOptions, NatsError> {
    let watcher = Arc::new(Watcher {
        meters: meters.clone(),
        down_since: Mutex::new(None),
    });
    let mut options = ConnectOptions::new()
        .name("switchyard-pubsub")
        .retry_on_initial_connect()
        .subscription_capacity(settings.pending_messages)
        .event_callback(move |event| {
            let watcher = watcher.clone();
            async move { watcher.on(event) }
        });
    options = match &settings.auth {
        Auth::None => options,
        Auth::UserPassword { user, password } => {
            options.user_and_password(user.clone(), password.clone())
        }
        Auth::Token(token) => options.token(token.clone()),
        Auth::CredsFile(path) => {
            options
                .credentials_file(path)
                .await
                .map_err(|source| NatsError::Creds {
                    path: path.display().to_string(),
                    source,
                })?
        }
    };
    if let Some(ca) = &settings.tls.ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    if let Some((cert, key)) = &settings.tls.client {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    Ok(options.require_tls(settings.tls.required))
}

/// Keeps the connection meters from the client's events.
struct Watcher {
    meters: Meters,
    /// When the connection was lost, while it is.
    down_since: Mutex<Option<Instant>>,
}

impl Watcher {
    fn on(&self, event: Event) {
        match event {
            Event::Connected => {
                self.meters.connected.set(1);
                if let Some(since) = self.down_since.lock().take() {
                    let gap = since.elapsed();
                    self.meters.disconnected_seconds.inc_by(gap.as_secs_f64());
                    tracing::warn!(
                        target: "switchyard::pubsub",
                        gap_ms = u64::try_from(gap.as_millis()).unwrap_or(u64::MAX),
                        "NATS reconnected; events published elsewhere meanwhile were missed"
                    );
                } else {
                    tracing::info!(target: "switchyard::pubsub", "NATS connected");
                }
            }
            Event::Disconnected => {
                self.meters.connected.set(0);
                self.meters.disconnects.inc();
                self.down_since.lock().get_or_insert_with(Instant::now);
                tracing::warn!(target: "switchyard::pubsub", "NATS connection lost; reconnecting");
            }
            Event::Closed => self.meters.connected.set(0),
            Event::SlowConsumer(_) => self.meters.drop(Loss::SlowConsumer),
            other => tracing::warn!(target: "switchyard::pubsub", event = %other, "NATS"),
        }
    }
}

/// Writes local events to NATS, dropping (counted) those that come while
/// it is not connected: the client would otherwise hold them unbounded in
/// time, and deliver them late to some instances only.
async fn write(
    client: async_nats::Client,
    mut queue: mpsc::Receiver<(String, bytes::Bytes, bool)>,
    meters: Meters,
    stop: CancellationToken,
) {
    loop {
        let (subject, payload, cbor) = tokio::select! {
            () = stop.cancelled() => return,
            next = queue.recv() => match next {
                Some(next) => next,
                None => return,
            },
        };
        if client.connection_state() != async_nats::connection::State::Connected {
            meters.drop(Loss::Disconnected);
            continue;
        }
        let sent = if cbor {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(wire::ENCODING_HEADER, "cbor");
            client.publish_with_headers(subject, headers, payload).await
        } else {
            client.publish(subject, payload).await
        };
        match sent {
            Ok(()) => meters.published.inc(),
            Err(e) => {
                meters.drop(Loss::Disconnected);
                tracing::debug!(target: "switchyard::pubsub", error = %e, "NATS publish");
            }
        }
    }
}
