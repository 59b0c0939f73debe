//! The NATS JetStream backend (`[persistence] backend = "nats"`): several
//! switchyard instances share topics and subscriptions through one NATS
//! server (or cluster), so a client whose instance dies resumes its
//! `subscription_id` on another one.
//!
//! # Mapping
//!
//! - A persistent topic is one stream, `SWITCHYARD_<hex(topic)>`, on the
//!   subject `switchyard.persist.<hex(topic)>` (hex, because a topic may
//!   hold characters a stream name or subject may not), created on first
//!   use with file storage and the topic's retention: `max_age`,
//!   `max_msgs` = `max_count`, `max_bytes` (JetStream counts a message's
//!   subject and headers too, so slightly fewer data bytes fit), discard
//!   old. A configured retention that differs from the stream's updates
//!   the stream. `sequence_id` is the stream sequence; the delivered
//!   `timestamp` is JetStream's own time of the message.
//! - Publishing waits for JetStream's PubAck: a message is stored before
//!   anyone can get it. A CBOR payload carries the header
//!   `Switchyard-Encoding: cbor`.
//! - A subscription is a durable pull consumer `S_<hex(id)>` with explicit
//!   acks, `ack_wait` = the topic's ack timeout and `max_ack_pending` =
//!   the window. Its topic is kept in the KV bucket `SWITCHYARD_SUBS`
//!   (key `hex(id)`), so any instance finds the stream of an id and tells
//!   "same id, other topic" (`Conflict`); the KV `create` is atomic, so two
//!   instances opening a new id at once agree on its topic.
//! - New subscription: the consumer starts at the stream's last sequence
//!   + 1; `resumed_from` = that last sequence.
//! - Resume: `resumed_from` = the consumer's ack floor. To get every
//!   unacknowledged message again at once and in order (§7.3), the
//!   consumer is recreated from floor + 1. Consequence: messages
//!   acknowledged out of order above the floor are delivered again after
//!   a resume (allowed: delivery is at least once; acknowledging them
//!   again is a no-op).
//! - Acknowledgements are JetStream acks of the held deliveries, confirmed
//!   by the server (double ack) before `Yes`. Redelivery after the ack
//!   timeout is JetStream's own.
//! - Unsubscribe deletes the consumer and the KV entry (idempotent).
//! - Evicted before ack: a *first* delivery whose stream sequence skips
//!   past the next expected one means the ones between were evicted
//!   before this subscription got them; they are counted. (Messages
//!   evicted after being sent and before being acknowledged are not seen
//!   by the backend and not counted.)
//!
//! One instance holds an id at a time as the hub sees it; across
//! instances the last one to open an id takes it over (recreating the
//! consumer ends the other instance's deliveries).
//!
//! # Bounds
//!
//! - Per open subscription: at most `window` deliveries held for
//!   acknowledgement (JetStream sends no more unacknowledged), and a
//!   channel of [`DELIVERY_QUEUE`] to the pump; one pull request asks for
//!   at most [`PULL_BATCH`] messages.
//! - Every JetStream request times out after the client's default (5 s)
//!   and fails as `PersistError::Store`; the client reconnects by itself.

mod delivery;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::context::{ConsumerInfoErrorKind, GetStreamErrorKind};
use async_nats::jetstream::kv::CreateErrorKind;
use async_nats::jetstream::stream::ConsumerErrorKind;
use async_nats::jetstream::stream::{self, DiscardPolicy, RetentionPolicy, StorageType};
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::{self as js, kv};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use self::delivery::{Counters, Held, ENCODING_HEADER};
use super::{Acked, Opened, PersistError, Retention, Store, Stored};
use crate::envelope::Payload;

/// Messages waiting between the pull task and the pump of one open
/// subscription.
pub const DELIVERY_QUEUE: usize = 64;

/// The most messages one pull request asks for.
pub const PULL_BATCH: usize = 256;

/// The KV bucket of subscription id → topic.
const SUBS_BUCKET: &str = "SWITCHYARD_SUBS";

/// What a persistent topic keeps and how long its messages wait for an
/// acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicPolicy {
    /// Retention of the topic's stream.
    pub retention: Retention,
    /// The consumer's `ack_wait`.
    pub ack_timeout: Duration,
}

/// Which topics are persistent, and their policy.
pub type Policies = Arc<dyn Fn(&str) -> Option<TopicPolicy> + Send + Sync>;

/// The JetStream backend.
pub struct JetStream {
    client: async_nats::Client,
    js: js::Context,
    subs: kv::Store,
    policies: Policies,
    window: usize,
    /// Streams known to exist with the configured retention.
    streams: Mutex<HashMap<String, stream::Stream>>,
    /// Subscriptions open on this instance.
    open: Mutex<HashMap<String, OpenSub>>,
    counters: Arc<Counters>,
}

/// One subscription open on this instance.
struct OpenSub {
    held: Arc<Mutex<Held>>,
    task: AbortHandle,
}

impl std::fmt::Debug for JetStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStream")
            .field("window", &self.window)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

fn store_err(what: &str) -> impl FnOnce(String) -> PersistError + '_ {
    move |e| PersistError::Store(format!("jetstream {what}: {e}"))
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The stream of a topic.
pub fn stream_name(topic: &str) -> String {
    format!("SWITCHYARD_{}", hex(topic))
}

/// The subject a topic's messages are published on.
pub fn subject(topic: &str) -> String {
    format!("switchyard.persist.{}", hex(topic))
}

/// The durable consumer of a subscription id.
pub fn consumer_name(id: &str) -> String {
    format!("S_{}", hex(id))
}

/// Deletes a consumer; one already gone is not an error.
async fn delete_consumer(stream: &stream::Stream, name: &str) -> Result<(), PersistError> {
    match stream.delete_consumer(name).await {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), ConsumerErrorKind::JetStream(ref j) if j.error_code() == ErrorCode::CONSUMER_NOT_FOUND) => {
            Ok(())
        }
        Err(e) => Err(store_err("consumer delete")(e.to_string())),
    }
}

/// The KV bucket of subscription ids, created if missing. Its backing
/// stream is created here with the settings `create_key_value` uses,
/// because that call first reads the account info, which async-nats 0.50
/// cannot parse from a 2.9 server (no `reserved_memory`).
async fn subs_bucket(js: &js::Context) -> Result<kv::Store, PersistError> {
    let config = stream::Config {
        name: format!("KV_{SUBS_BUCKET}"),
        subjects: vec![format!("$KV.{SUBS_BUCKET}.>")],
        max_messages_per_subject: 1,
        max_messages: -1,
        max_bytes: -1,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: DiscardPolicy::New,
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        num_replicas: 1,
        ..Default::default()
    };
    js.get_or_create_stream(config)
        .await
        .map_err(|e| store_err("kv stream")(e.to_string()))?;
    js.get_key_value(SUBS_BUCKET)
        .await
        .map_err(|e| store_err("kv bucket")(e.to_string()))
}

// === impl JetStream ===

impl JetStream {
    /// Connects to `url` and makes sure the subscriptions' KV bucket
    /// exists. Fails when NATS is unreachable now; after that, the client
    /// reconnects by itself.
    pub async fn connect(
        url: &str,
        policies: Policies,
        window: usize,
    ) -> Result<JetStream, PersistError> {
        let client = async_nats::ConnectOptions::new()
            .name("switchyard")
            .connect(url)
            .await
            .map_err(|e| PersistError::Store(format!("cannot connect to NATS at {url}: {e}")))?;
        let js = js::new(client.clone());
        let subs = subs_bucket(&js).await?;
        Ok(JetStream {
            client,
            js,
            subs,
            policies,
            window: window.max(1),
            streams: Mutex::new(HashMap::new()),
            open: Mutex::new(HashMap::new()),
            counters: Arc::default(),
        })
    }

    /// Whether the NATS connection is up now (for `/readyz`).
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Messages evicted from a stream before a subscription got them.
    pub fn evicted_before_ack(&self) -> u64 {
        self.counters.evicted_before_ack.load(Ordering::Relaxed)
    }

    /// Deliveries JetStream made again after the ack timeout.
    pub fn redeliveries(&self) -> u64 {
        self.counters.redeliveries.load(Ordering::Relaxed)
    }

    fn policy(&self, topic: &str) -> Result<TopicPolicy, PersistError> {
        (self.policies)(topic).ok_or_else(|| PersistError::NotPersistent(topic.to_owned()))
    }

    /// The topic's stream, created (or its retention updated) on first use.
    async fn stream(
        &self,
        topic: &str,
        policy: &TopicPolicy,
    ) -> Result<stream::Stream, PersistError> {
        if let Some(s) = self.streams.lock().get(topic) {
            return Ok(s.clone());
        }
        let r = &policy.retention;
        let limit = |v: Option<u64>| v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
        let config = stream::Config {
            name: stream_name(topic),
            subjects: vec![subject(topic)],
            max_age: r.max_age.unwrap_or_default(),
            max_messages: limit(r.max_count),
            max_bytes: limit(r.max_bytes),
            discard: DiscardPolicy::Old,
            retention: RetentionPolicy::Limits,
            storage: StorageType::File,
            ..Default::default()
        };
        let err = store_err("stream");
        let mut s = self
            .js
            .get_or_create_stream(config.clone())
            .await
            .map_err(|e| err(e.to_string()))?;
        let info = s
            .info()
            .await
            .map_err(|e| store_err("stream info")(e.to_string()))?;
        let c = &info.config;
        if (c.max_age, c.max_messages, c.max_bytes)
            != (config.max_age, config.max_messages, config.max_bytes)
        {
            self.js
                .update_stream(config)
                .await
                .map_err(|e| store_err("stream update")(e.to_string()))?;
        }
        self.streams.lock().insert(topic.to_owned(), s.clone());
        Ok(s)
    }

    /// The topic of subscription `id`, from the KV bucket.
    async fn topic_of(&self, id: &str) -> Result<Option<String>, PersistError> {
        let v = self
            .subs
            .get(hex(id))
            .await
            .map_err(|e| store_err("kv get")(e.to_string()))?;
        Ok(v.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Records `id` → `topic` unless `id` exists; returns whether it was
    /// new, or `Conflict` if it exists with another topic.
    async fn claim(&self, id: &str, topic: &str) -> Result<bool, PersistError> {
        let existing = match self.topic_of(id).await? {
            Some(t) => t,
            None => match self
                .subs
                .create(hex(id), topic.as_bytes().to_vec().into())
                .await
            {
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {
                    self.topic_of(id).await?.unwrap_or_default()
                }
                Err(e) => return Err(store_err("kv create")(e.to_string())),
            },
        };
        if existing == topic {
            Ok(false)
        } else {
            Err(PersistError::Conflict(format!(
                "subscription id exists with topic {existing:?}"
            )))
        }
    }
}

impl Store for JetStream {
    async fn publish(&self, topic: &str, data: &Payload) -> Result<Stored, PersistError> {
        let policy = self.policy(topic)?;
        self.stream(topic, &policy).await?;
        let (bytes, headers) = match data {
            Payload::Json(raw) => (raw.get().as_bytes().to_vec(), None),
            Payload::Cbor(b) => {
                let mut h = async_nats::HeaderMap::new();
                h.insert(ENCODING_HEADER, "cbor");
                (b.clone(), Some(h))
            }
        };
        let err = store_err("publish");
        let sent = match headers {
            Some(h) => {
                self.js
                    .publish_with_headers(subject(topic), h, bytes.into())
                    .await
            }
            None => self.js.publish(subject(topic), bytes.into()).await,
        };
        let ack = match sent.map_err(|e| err(e.to_string()))?.await {
            Ok(ack) => ack,
            Err(e) => {
                // The stream may have been deleted behind our back: look it
                // up again next time.
                self.streams.lock().remove(topic);
                return Err(store_err("publish ack")(e.to_string()));
            }
        };
        Ok(Stored {
            topic: topic.to_owned(),
            seq: ack.sequence,
            // The PubAck carries no time; deliveries carry JetStream's.
            stored_at: SystemTime::now(),
            data: data.clone(),
        })
    }

    async fn open(&self, id: &str, topic: &str) -> Result<Opened, PersistError> {
        let policy = self.policy(topic)?;
        let new = self.claim(id, topic).await?;
        let mut stream = self.stream(topic, &policy).await?;
        let name = consumer_name(id);
        let prior = if new {
            None
        } else {
            match stream.consumer_info(&name).await {
                Ok(info) => Some((
                    info.ack_floor.stream_sequence,
                    info.delivered.stream_sequence,
                )),
                Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => None,
                Err(e) => return Err(store_err("consumer info")(e.to_string())),
            }
        };
        let (floor, seen) = match prior {
            Some(p) => p,
            None => {
                let info = stream
                    .info()
                    .await
                    .map_err(|e| store_err("stream info")(e.to_string()))?;
                (info.state.last_sequence, info.state.last_sequence)
            }
        };
        // Recreated from floor + 1, so that every unacknowledged message
        // comes again now, in order.
        if let Some(old) = self.open.lock().remove(id) {
            old.task.abort();
        }
        if prior.is_some() {
            delete_consumer(&stream, &name).await?;
        }
        let config = pull::Config {
            durable_name: Some(name),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: floor + 1,
            },
            ack_policy: AckPolicy::Explicit,
            ack_wait: policy.ack_timeout,
            max_ack_pending: i64::try_from(self.window).unwrap_or(i64::MAX),
            filter_subject: subject(topic),
            ..Default::default()
        };
        let consumer = stream
            .create_consumer(config)
            .await
            .map_err(|e| store_err("consumer create")(e.to_string()))?;
        let messages = consumer
            .stream()
            .max_messages_per_batch(PULL_BATCH.min(self.window))
            .messages()
            .await
            .map_err(|e| store_err("pull")(e.to_string()))?;
        let held = Arc::new(Mutex::new(Held::new(self.window, seen, floor + 1)));
        let (tx, rx) = mpsc::channel(DELIVERY_QUEUE);
        let task = tokio::spawn(delivery::pump(
            topic.to_owned(),
            messages,
            tx,
            held.clone(),
            self.counters.clone(),
        ));
        let sub = OpenSub {
            held,
            task: task.abort_handle(),
        };
        self.open.lock().insert(id.to_owned(), sub);
        Ok(Opened {
            resumed_from: floor,
            deliveries: rx,
        })
    }

    async fn ack(&self, id: &str, seq: u64) -> Result<Acked, PersistError> {
        let held = match self.open.lock().get(id) {
            Some(sub) if !sub.task.is_finished() => sub.held.clone(),
            // Acknowledgements go through the instance that holds the id.
            _ => return Err(PersistError::NotFound),
        };
        let acker = match held.lock().take(seq) {
            Ok(acker) => acker,
            Err(acked) => return Ok(acked),
        };
        match acker.double_ack().await {
            Ok(()) => Ok(Acked::Yes),
            Err(e) => {
                held.lock().put_back(seq, acker);
                Err(store_err("ack")(e.to_string()))
            }
        }
    }

    async fn delete(&self, id: &str) -> Result<bool, PersistError> {
        if let Some(old) = self.open.lock().remove(id) {
            old.task.abort();
        }
        let Some(topic) = self.topic_of(id).await? else {
            return Ok(false);
        };
        match self.js.get_stream(stream_name(&topic)).await {
            Ok(stream) => delete_consumer(&stream, &consumer_name(id)).await?,
            // No stream: no consumer either.
            Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(ref j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
                {}
            Err(e) => return Err(store_err("stream")(e.to_string())),
        }
        self.subs
            .purge(hex(id))
            .await
            .map_err(|e| store_err("kv purge")(e.to_string()))?;
        Ok(true)
    }
}
