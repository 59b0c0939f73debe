//! [`Backend`]: the configured store, one variant per kind. The rest of
//! switchyard holds an `Arc<Backend>` and calls the [`Store`] methods on
//! it; each call dispatches to the variant.
//!
//! Adding a backend is a variant here, its arm in each `match` below, and
//! its [`BackendKind`] (the `backend` metric label and config value).
//!
//! The embedded backend's log commits and `fsync`s on its own writer
//! thread, every change staged meanwhile in one commit; its reads block on
//! the disk, so it declares itself [`super::local::Log::BLOCKING`] and the
//! engine makes its calls on tokio's blocking pool, never on a worker.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::jetstream::JetStream;
use super::local::embedded::EmbeddedLog;
use super::local::memory::MemoryLog;
use super::local::Engine;
use super::{
    Acked, Meters, Opened, PersistError, Store, Stored, Topics, DEFAULT_MAX_SUBSCRIPTIONS,
};
use crate::envelope::Payload;

/// What a backend is opened with (`[persistence]` and
/// `[[persistent_topics]]`, validated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Which store.
    pub backend: BackendKind,
    /// `embedded`: the data directory.
    pub path: Option<PathBuf>,
    /// `nats`: the server URL.
    pub nats_url: Option<String>,
    /// Sequences above its floor one subscription may have sent.
    pub window: usize,
    /// The persistent topics and what each keeps.
    pub topics: Topics,
    /// Subscriptions per owner, per connection and per topic.
    pub caps: super::Caps,
}

/// The configured store.
#[derive(Debug)]
pub enum Backend {
    /// Kept in this process only (the default without a data directory).
    Memory(Engine<MemoryLog>),
    /// A redb database under `persistence.path`: every publish and ack on
    /// disk before it is answered (see [`EmbeddedLog`]).
    Embedded(Engine<EmbeddedLog>),
    /// NATS JetStream, shared by several instances (see
    /// [`super::jetstream`]).
    Nats(Arc<JetStream>),
}

/// The kinds of backend: `persistence.backend`, and the `backend` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// In this process only.
    Memory,
    /// An embedded database under `persistence.path`.
    Embedded,
    /// NATS JetStream at `persistence.nats_url`.
    Nats,
}

// === impl BackendKind ===

impl BackendKind {
    /// Every kind, as configuration accepts them.
    pub const ALL: [BackendKind; 3] = [
        BackendKind::Memory,
        BackendKind::Embedded,
        BackendKind::Nats,
    ];

    /// The config value and metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            BackendKind::Memory => "memory",
            BackendKind::Embedded => "embedded",
            BackendKind::Nats => "nats",
        }
    }
}

// === impl Backend ===

impl Backend {
    /// Opens the configured backend, reporting to `meters`.
    pub async fn open(settings: &Settings, meters: Meters) -> Result<Backend, PersistError> {
        let topics = settings.topics.clone();
        match settings.backend {
            BackendKind::Memory => Ok(Backend::Memory(Engine::new(
                MemoryLog::new(),
                topics,
                settings.window,
                DEFAULT_MAX_SUBSCRIPTIONS,
                meters,
            )?)),
            BackendKind::Embedded => {
                let Some(path) = settings.path.clone() else {
                    // Validation requires it; kept an error, not a panic.
                    return Err(PersistError::Store(
                        "backend \"embedded\" needs persistence.path".to_owned(),
                    ));
                };
                // Opening checks the whole file: off the runtime's threads.
                let log = tokio::task::spawn_blocking(move || EmbeddedLog::open(&path))
                    .await
                    .map_err(|e| {
                        PersistError::Store(format!("opening the embedded store: {e}"))
                    })??;
                Ok(Backend::Embedded(Engine::new(
                    log,
                    topics,
                    settings.window,
                    DEFAULT_MAX_SUBSCRIPTIONS,
                    meters,
                )?))
            }
            BackendKind::Nats => {
                let Some(url) = settings.nats_url.as_deref() else {
                    // Validation requires it; kept an error, not a panic.
                    return Err(PersistError::Store(
                        "backend \"nats\" needs persistence.nats_url".to_owned(),
                    ));
                };
                let js = JetStream::connect(url, topics, settings.window, meters).await?;
                Ok(Backend::Nats(Arc::new(js)))
            }
        }
    }

    /// Starts its background work until `stop`: retention by age (the
    /// local backends), the stored gauges (NATS, where JetStream keeps
    /// retention itself).
    pub fn spawn_background(&self, stop: CancellationToken) {
        match self {
            Backend::Memory(e) => e.spawn_sweeper(stop),
            Backend::Embedded(e) => e.spawn_sweeper(stop),
            Backend::Nats(js) => js.spawn_usage(stop),
        }
    }

    /// Closes the store at shutdown, after the publishers have stopped:
    /// the embedded store's file (and its lock) is released when this
    /// returns, so a new gateway can open it at once. NATS keeps
    /// everything; this instance's deliveries end.
    pub fn close(&self) {
        match self {
            Backend::Memory(e) => e.close(),
            Backend::Embedded(e) => e.close(),
            Backend::Nats(js) => js.close(),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> BackendKind {
        match self {
            Backend::Memory(_) => BackendKind::Memory,
            Backend::Embedded(_) => BackendKind::Embedded,
            Backend::Nats(_) => BackendKind::Nats,
        }
    }

    /// Whether it can serve now (memory: always; embedded: unless a
    /// commit failed and the file is not yet reopened; NATS: while
    /// connected).
    pub fn ready(&self) -> Result<(), String> {
        match self {
            Backend::Memory(e) => e.ready(),
            Backend::Embedded(e) => e.ready(),
            Backend::Nats(js) if js.is_connected() => Ok(()),
            Backend::Nats(_) => Err("not connected to NATS".to_owned()),
        }
    }
}

impl Store for Backend {
    async fn publish(&self, topic: &str, data: &Payload) -> Result<Stored, PersistError> {
        // A store keeps what it is given (the memory backend, in memory):
        // never the client's read buffer the payload was decoded from.
        let data = &data.detach();
        match self {
            Backend::Memory(e) => e.publish(topic, data).await,
            Backend::Embedded(e) => e.publish(topic, data).await,
            Backend::Nats(js) => js.publish(topic, data).await,
        }
    }

    async fn publish_batch(
        &self,
        events: Vec<(String, Payload)>,
    ) -> Result<Vec<Stored>, PersistError> {
        // Detached already: the recorder queues its events detached.
        match self {
            Backend::Memory(e) => e.publish_batch(events).await,
            Backend::Embedded(e) => e.publish_batch(events).await,
            Backend::Nats(js) => js.publish_batch(events).await,
        }
    }

    async fn open(&self, id: &str, topic: &str) -> Result<Opened, PersistError> {
        match self {
            Backend::Memory(e) => e.open(id, topic).await,
            Backend::Embedded(e) => e.open(id, topic).await,
            Backend::Nats(js) => js.open(id, topic).await,
        }
    }

    async fn ack(&self, id: &str, seq: u64) -> Result<Acked, PersistError> {
        match self {
            Backend::Memory(e) => e.ack(id, seq).await,
            Backend::Embedded(e) => e.ack(id, seq).await,
            Backend::Nats(js) => js.ack(id, seq).await,
        }
    }

    async fn delete(&self, id: &str) -> Result<bool, PersistError> {
        match self {
            Backend::Memory(e) => e.delete(id).await,
            Backend::Embedded(e) => e.delete(id).await,
            Backend::Nats(js) => js.delete(id).await,
        }
    }

    async fn position(&self, id: &str) -> Result<Option<(String, u64)>, PersistError> {
        match self {
            Backend::Memory(e) => e.position(id).await,
            Backend::Embedded(e) => e.position(id).await,
            Backend::Nats(js) => js.position(id).await,
        }
    }

    async fn owned(&self, prefix: &str) -> Result<usize, PersistError> {
        match self {
            Backend::Memory(e) => e.owned(prefix).await,
            Backend::Embedded(e) => e.owned(prefix).await,
            Backend::Nats(js) => js.owned(prefix).await,
        }
    }
}
