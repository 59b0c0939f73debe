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
//!   instances opening a new id at once agree on its topic. The same
//!   bucket keeps, under `acks.<hex(id)>`, what the consumer loses when it
//!   is recreated (module `acks`): the subscription's first sequence and the
//!   sequences acknowledged out of order above its ack floor.
//! - New subscription: the consumer starts at the stream's last sequence
//!   + 1; `resumed_from` = that last sequence.
//! - Resume: `resumed_from` = the consumer's ack floor (never below its
//!   start − 1: JetStream reports 0 before any delivery), which is the
//!   highest S such that every message ≤ S is acknowledged. To get every
//!   unacknowledged message again at once and in order (§7.3), also
//!   after the instance that held it died, and to end that instance's
//!   pull, the consumer is recreated from floor + 1; a message of the
//!   saved out-of-order set is acknowledged on the new consumer as it
//!   comes, not sent. So acknowledgements stay per message across a
//!   resume, on any instance, and the new consumer's ack floor moves on
//!   past them as the ones between are acknowledged.
//! - Acknowledgements are JetStream acks of the held deliveries, confirmed
//!   by the server (double ack) before `Yes`; one above the consumer's
//!   ack floor is saved in the bucket before `Yes` too. Redelivery after
//!   the ack timeout is JetStream's own.
//! - Unsubscribe deletes the consumer and both KV entries (idempotent).
//! - Evicted before ack: a *first* delivery whose stream sequence skips
//!   past the next expected one means the ones between were evicted
//!   before this subscription got them; they are counted. (Messages
//!   evicted after being sent and before being acknowledged are not seen
//!   by the backend and not counted.)
//!
//! - Acknowledging a sequence: held (sent, unacknowledged) → a JetStream
//!   ack; sent before a resume and not yet again → recorded, `Yes` (it is
//!   acknowledged, not sent, when it comes); below the subscription's
//!   first sequence or above the highest sequence sent to it →
//!   `NeverDelivered`; otherwise (acknowledged already) a no-op `Yes`. A
//!   sequence evicted unsent between the first and the highest sent
//!   counts as `Yes` (JetStream keeps no per-message record to tell it
//!   apart).
//!
//! # Across instances
//!
//! One connection holds an id at a time as each instance's hub sees it;
//! across instances the last one to open an id takes it over (recreating
//! the consumer ends the other instance's deliveries: its pump sees the
//! consumer deleted). An acknowledgement goes through the instance that
//! holds the id (elsewhere: `NotFound`, -32003). A subscription's
//! position lives in NATS only, so [`super::DEFAULT_MAX_SUBSCRIPTIONS`] is not
//! enforced here; JetStream's account limits apply.
//!
//! # Failures
//!
//! Every JetStream request times out after the client's default (5 s) and
//! fails as `PersistError::Store`; the client reconnects by itself, and
//! [`JetStream::is_connected`] feeds `/readyz`. A publish that timed out
//! while NATS was away may still be stored when the client reconnects
//! (its message was buffered): it is counted as failed and nobody loses
//! it, but nobody retries it either. An open subscription's pull resumes
//! by itself after a reconnection.
//!
//! # Bounds
//!
//! - Per open subscription: at most `window` deliveries held for
//!   acknowledgement (`max_ack_pending`: JetStream sends no more
//!   unacknowledged; unlike the local engine, acknowledgements out of
//!   order above the floor do not count against it), at most `window`
//!   out-of-order acknowledgements kept for a resume (past that the
//!   lowest is forgotten and comes again after a resume: at least once;
//!   the saved state is at most about 21 bytes per entry), and a channel of
//!   [`super::DELIVERY_QUEUE`] to the pump; one pull request asks for at most
//!   [`PULL_BATCH`] messages.
//! - The client's own buffers are async-nats's defaults (its subscription
//!   channels are bounded).

mod acks;
mod delivery;
mod open;
mod setup;
mod store;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::jetstream::kv::CreateErrorKind;
use async_nats::jetstream::{self as js, kv, stream};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::acks::AckState;
use self::delivery::{Held, NotHeld, ENCODING_HEADER};
use self::open::{Holding, OpenSubs};
pub use self::setup::{consumer_name, stream_name, subject};
use self::setup::{fail, hex};
use super::{Acked, Meters, Opened, PersistError, Store, Stored, TopicPolicy, Topics};
use crate::envelope::Payload;

/// The most messages one pull request asks for.
pub const PULL_BATCH: usize = 256;

/// How often the stored gauges are refreshed from the streams' state.
pub const USAGE_EVERY: Duration = Duration::from_secs(5);

/// The JetStream backend.
pub struct JetStream {
    client: async_nats::Client,
    js: js::Context,
    /// Subscription id (hex) → topic.
    subs: kv::Store,
    topics: Topics,
    window: usize,
    /// Streams known to exist with the configured retention, by topic.
    streams: Mutex<HashMap<String, stream::Stream>>,
    /// Subscriptions open on this instance.
    open: OpenSubs,
    meters: Meters,
}

impl std::fmt::Debug for JetStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStream")
            .field("window", &self.window)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

/// A consumer's floor: its ack floor, but never below its start − 1 (a
/// consumer that has delivered nothing reports an ack floor of 0, while
/// every message before its start is behind it by definition).
fn floor_of(info: &js::consumer::Info) -> u64 {
    let start = start_of(&info.config);
    info.ack_floor.stream_sequence.max(start.saturating_sub(1))
}

/// The first sequence a consumer delivers.
fn start_of(config: &js::consumer::Config) -> u64 {
    match config.deliver_policy {
        DeliverPolicy::ByStartSequence { start_sequence } => start_sequence,
        _ => 1,
    }
}

// === impl JetStream ===

impl JetStream {
    /// Connects to `url` and makes sure the subscriptions' KV bucket
    /// exists. Fails when NATS is unreachable now; after that, the client
    /// reconnects by itself.
    pub async fn connect(
        url: &str,
        topics: Topics,
        window: usize,
        meters: Meters,
    ) -> Result<JetStream, PersistError> {
        let client = async_nats::ConnectOptions::new()
            .name("switchyard")
            .connect(url)
            .await
            .map_err(|e| {
                let shown = crate::redact::url(url);
                PersistError::Store(format!("cannot connect to NATS at {shown}: {e}"))
            })?;
        let js = js::new(client.clone());
        let subs = setup::subs_bucket(&js).await?;
        Ok(JetStream {
            client,
            js,
            subs,
            topics,
            window: window.max(1),
            streams: Mutex::new(HashMap::new()),
            open: OpenSubs::default(),
            meters,
        })
    }

    /// Whether the NATS connection is up now (for `/readyz`).
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Ends every delivery on this instance (shutdown); NATS keeps every
    /// position.
    pub fn close(&self) {
        self.open.close_all();
    }

    /// Refreshes the stored gauges from the streams' state every
    /// [`USAGE_EVERY`] until `stop`.
    pub fn spawn_usage(self: &Arc<Self>, stop: CancellationToken) {
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(js) = this.upgrade() else { return };
                match js.usage().await {
                    Ok((messages, bytes)) => {
                        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                        js.meters.stored_messages.set(gauge(messages));
                        js.meters.stored_bytes.set(gauge(bytes));
                    }
                    Err(e) => {
                        tracing::debug!(target: "switchyard::persist", error = %e, "jetstream usage");
                    }
                }
                drop(js);
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(USAGE_EVERY) => {}
                }
            }
        });
    }

    /// Messages and bytes its topics' streams keep now (for the stored
    /// gauges; one JetStream request per 256 streams).
    pub async fn usage(&self) -> Result<(u64, u64), PersistError> {
        setup::usage(&self.js).await
    }

    /// The topic and floor of subscription `id`, if it exists: the
    /// consumer's ack floor (the stream's last sequence if its consumer is
    /// gone).
    async fn position_of(&self, id: &str) -> Result<Option<(String, u64)>, PersistError> {
        let Some(topic) = self.topic_of(id).await? else {
            return Ok(None);
        };
        let Some(mut stream) = setup::find_stream(&self.js, &topic).await? else {
            return Ok(Some((topic, 0)));
        };
        let floor = match stream.consumer_info(consumer_name(id)).await {
            Ok(info) => floor_of(&info),
            Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => {
                stream
                    .info()
                    .await
                    .map_err(|e| fail("stream info", e))?
                    .state
                    .last_sequence
            }
            Err(e) => return Err(fail("consumer info", e)),
        };
        Ok(Some((topic, floor)))
    }

    fn policy(&self, topic: &str) -> Result<TopicPolicy, PersistError> {
        self.topics
            .policy(topic)
            .copied()
            .ok_or_else(|| PersistError::NotPersistent(topic.to_owned()))
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
        let s = setup::ensure_stream(&self.js, topic, &policy.retention).await?;
        self.streams.lock().insert(topic.to_owned(), s.clone());
        Ok(s)
    }

    /// The topic of subscription `id`, from the KV bucket.
    async fn topic_of(&self, id: &str) -> Result<Option<String>, PersistError> {
        let v = self
            .subs
            .get(hex(id))
            .await
            .map_err(|e| fail("kv get", e))?;
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
                Err(e) => return Err(fail("kv create", e)),
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

    /// Records that `seq` of `id` was acknowledged and, when it lies above
    /// the consumer's ack floor, saves the state, so that a resume does not
    /// send it again.
    async fn save_ack(&self, id: &str, holding: &Holding, seq: u64) -> Result<(), PersistError> {
        if !holding.held.lock().acked(seq) {
            return Ok(());
        }
        let _one_at_a_time = holding.saving.lock().await;
        let state = holding.held.lock().state();
        acks::save(&self.subs, id, &state).await
    }

    /// Starts pulling a consumer just created, for `held`.
    async fn attach(
        &self,
        id: &str,
        topic: &str,
        consumer: js::consumer::PullConsumer,
        held: Held,
    ) -> Result<mpsc::Receiver<Stored>, PersistError> {
        let messages = consumer
            .stream()
            .max_messages_per_batch(PULL_BATCH.min(self.window))
            .messages()
            .await
            .map_err(|e| fail("pull", e))?;
        Ok(self.open.attach(id, topic, messages, held, &self.meters))
    }
}
