//! Persistent subscriptions (jsonrpc-ws.md §7.3, spec §11): durable,
//! acknowledged, retained delivery of the topics configured as persistent
//! (`[[persistent_topics]]`), served by switchyard itself for every client
//! dialect and never forwarded upstream.
//!
//! An event published to the broker under a persistent topic is also
//! *stored*: it gets the topic's next `sequence_id` (from 1) and the time it
//! was stored. A subscription is a named position in one topic: the
//! messages it was sent and the ones acknowledged. Delivery is at least
//! once: what is not acknowledged is sent again, with the same
//! `sequence_id`, when the subscription resumes and after the ack timeout.
//!
//! # Layout
//!
//! - [`Store`]: the contract every backend meets (publish, open, ack,
//!   delete), with the types it speaks: [`Stored`], [`Opened`],
//!   [`Acked`], [`PersistError`], [`Retention`].
//! - `local`: the engine shared by the single-instance backends: a
//!   [`local::Log`] (`memory`, `embedded`) of messages and positions, with
//!   delivery windows, redelivery and retention kept in this process.
//! - [`jetstream`]: NATS JetStream, for several instances (`setup`: names,
//!   streams, the KV bucket of ids; `open`: the subscriptions open on this
//!   instance; `delivery`: the pull task and what it holds for acks).
//! - [`Backend`]: the configured backend, one variant per kind, as the
//!   rest of switchyard sees it.
//! - [`policy`]: which topics are persistent ([`Topics`]) and what each
//!   keeps ([`TopicPolicy`]).
//! - [`Meters`]: the metrics every backend reports to.
//! - [`hub`]: which connection holds which subscription id, and the pump
//!   from an [`Opened`] subscription into a client's [`hub::Sink`].
//! - [`methods`]: the six methods' params and results.
//! - [`recorder`]: the bounded hand-off from the broker's publishers to
//!   the store, which slows a publisher rather than drop its events.
//!
//! # Bounds
//!
//! - Per subscription, at most `window` sequences above its floor (every
//!   message ≤ floor acknowledged) are sent or acknowledged out of order
//!   ([`DEFAULT_WINDOW`]): so at most `window` messages are sent and
//!   unacknowledged, and at most `window` acknowledgements above the floor
//!   are kept. The next message is read from the store when the floor
//!   moves.
//! - At most [`DEFAULT_MAX_SUBSCRIPTIONS`] subscription ids exist at once
//!   (past it, -32007); at most [`Caps`] per owner, per connection and
//!   per topic (see [`owner`]: an id belongs to the identity that made it).
//! - Retention bounds what a topic keeps (`max_age_seconds`, `max_count`,
//!   `max_bytes`; all optional: a topic without any keeps everything).
//! - Between the broker and the store, at most
//!   [`recorder::QUEUE`] events wait (past it the publisher keeps one
//!   read's events in its [`recorder::Backlog`] and stops reading its
//!   upstream connection until they are taken: back-pressure, never a
//!   drop), and the recorder hands the store at most
//!   [`recorder::BATCH`] at once.
//! - In the embedded store, at most
//!   [`local::embedded::QUEUE`] staged changes wait for its writer
//!   thread (past it, callers wait: they are not dropped).
//! - Between the store and a client, each open subscription has a channel
//!   of [`DELIVERY_QUEUE`] messages; the pump waits for room in the
//!   client's outbox rather than dropping.

use std::future::Future;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;

use crate::envelope::Payload;

mod backend;
pub mod hub;
pub mod jetstream;
pub mod local;
mod meters;
pub mod methods;
pub mod owner;
pub mod policy;
pub mod recorder;

pub use backend::{Backend, BackendKind, Settings};
pub use meters::Meters;
pub use owner::{Caps, Owner};
pub use policy::{TopicPolicy, Topics};

/// How many sequences above its floor a subscription may have sent (and
/// acknowledged out of order): at most this many unacknowledged at once.
pub const DEFAULT_WINDOW: usize = 1024;

/// The most subscription ids one store keeps (past it, -32007).
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 10_000;

/// Messages waiting between a backend and the pump of one open
/// subscription.
pub const DELIVERY_QUEUE: usize = 64;

/// The method name of a persistent delivery (jsonrpc-ws.md §7.3).
pub const NOTIFICATION_METHOD: &str = "rpc.notification.persistent";

/// The default ack timeout (jsonrpc-ws.md §7.3): an unacknowledged message
/// is sent again on the same connection after it.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(60);

/// One stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The concrete topic.
    pub topic: String,
    /// Its sequence in the topic, from 1.
    pub seq: u64,
    /// When switchyard stored it (delivered as RFC 3339 UTC, milliseconds).
    pub stored_at: SystemTime,
    /// The event's data, in its source encoding.
    pub data: Payload,
}

/// What a topic keeps. `None` is no limit on that axis; the oldest
/// messages go first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Messages older than this are evicted.
    pub max_age: Option<Duration>,
    /// At most this many messages.
    pub max_count: Option<u64>,
    /// At most this many bytes of data.
    pub max_bytes: Option<u64>,
}

/// A subscription just opened (new or resumed) on one connection.
#[derive(Debug)]
pub struct Opened {
    /// For a new subscription, the topic's last sequence (0 when empty);
    /// for a resumed one, the highest S such that every message ≤ S is
    /// acknowledged.
    pub resumed_from: u64,
    /// What to send the client, in order: unacknowledged retained messages
    /// above `resumed_from`, then live ones, then redeliveries after the
    /// ack timeout. At most `window` are unacknowledged at once. Dropping
    /// the receiver detaches the subscription and keeps its position.
    pub deliveries: mpsc::Receiver<Stored>,
}

/// The outcome of one acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acked {
    /// Recorded (or it was already: re-acknowledging is a no-op).
    Yes,
    /// That sequence was never sent to this subscription (-32602).
    NeverDelivered,
}

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersistError {
    /// No such subscription id (-32003).
    #[error("unknown subscription id")]
    NotFound,
    /// The id exists with another topic, or is held elsewhere (-32005).
    #[error("{0}")]
    Conflict(String),
    /// The topic is not configured as persistent (-32602).
    #[error("topic {0:?} is not persistent")]
    NotPersistent(String),
    /// A bound was reached (subscription ids): -32007.
    #[error("{0}")]
    Full(String),
    /// The store failed (disk, NATS): the call fails as unavailable.
    #[error("store: {0}")]
    Store(String),
}

/// The contract of a backend. Every method is safe to call from several
/// connections at once; holders (which connection may use an id) are
/// checked above it, in the hub.
pub trait Store: Send + Sync + 'static {
    /// Stores `data` under the persistent `topic`: its next sequence,
    /// stored now. Returns when it is as durable as the backend promises.
    fn publish(
        &self,
        topic: &str,
        data: &Payload,
    ) -> impl Future<Output = Result<Stored, PersistError>> + Send;

    /// Stores `events` (concrete persistent topic, data) in order, as
    /// [`Store::publish`] would one after the other, and returns once all
    /// are durable: a backend may put them in one commit. All or nothing
    /// for the caller: an error fails the whole batch (some may have been
    /// stored). The default publishes them one at a time.
    fn publish_batch(
        &self,
        events: Vec<(String, Payload)>,
    ) -> impl Future<Output = Result<Vec<Stored>, PersistError>> + Send {
        async move {
            let mut out = Vec::with_capacity(events.len());
            for (topic, data) in &events {
                out.push(self.publish(topic, data).await?);
            }
            Ok(out)
        }
    }

    /// Opens subscription `id` on `topic`: creates it after the topic's
    /// last sequence if it is new, resumes it otherwise (`Conflict` if it
    /// exists with another topic).
    fn open(
        &self,
        id: &str,
        topic: &str,
    ) -> impl Future<Output = Result<Opened, PersistError>> + Send;

    /// Acknowledges `seq` for `id`.
    fn ack(&self, id: &str, seq: u64) -> impl Future<Output = Result<Acked, PersistError>> + Send;

    /// Deletes subscription `id` and its position; `false` if there was
    /// none. Its open deliveries end.
    fn delete(&self, id: &str) -> impl Future<Output = Result<bool, PersistError>> + Send;

    /// The topic and current floor (every message ≤ it acknowledged) of
    /// subscription `id`, if it exists: what a repeated subscribe on the
    /// holding connection reports, and how a batch subscribe checks topics
    /// before it opens anything.
    fn position(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(String, u64)>, PersistError>> + Send;

    /// How many subscription ids start with `prefix`: one owner's
    /// subscriptions ([`Owner::prefix`]), held or not.
    fn owned(&self, prefix: &str) -> impl Future<Output = Result<usize, PersistError>> + Send;
}

// === impl Stored ===

impl Stored {
    /// Bytes of data, as retention counts them.
    pub fn size(&self) -> u64 {
        data_size(&self.data)
    }

    /// `stored_at` as RFC 3339 UTC with milliseconds
    /// (`2025-12-26T12:00:00.000Z`).
    pub fn timestamp(&self) -> String {
        humantime::format_rfc3339_millis(self.stored_at).to_string()
    }
}

/// Bytes of a payload's data, as retention counts them.
pub fn data_size(data: &Payload) -> u64 {
    u64::try_from(data.encoded_len()).unwrap_or(u64::MAX)
}

// === impl PersistError ===

impl PersistError {
    /// The error a client gets for it.
    pub fn to_gateway(&self) -> crate::error::GatewayError {
        use crate::error::{ErrorKind, GatewayError, Side};
        let kind = match self {
            PersistError::NotFound => ErrorKind::NotFound,
            PersistError::Conflict(_) => ErrorKind::Conflict,
            PersistError::NotPersistent(_) => ErrorKind::InvalidParams,
            PersistError::Full(_) => ErrorKind::ResourceExhausted,
            PersistError::Store(_) => {
                // The store's own words stay in the log, not on the wire.
                return GatewayError::with_detail(ErrorKind::Unavailable, "store unavailable")
                    .on(Side::Internal);
            }
        };
        GatewayError::with_detail(kind, self.to_string())
    }
}
