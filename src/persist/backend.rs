//! [`Backend`]: the configured store, one variant per kind. The rest of
//! switchyard holds an `Arc<Backend>` and calls the [`Store`] methods on
//! it; each call dispatches to the variant.
//!
//! Adding a backend is a variant here, its arm in each `match` below, and
//! its [`BackendKind`] (the `backend` metric label and config value).
//!
//! The embedded backend's calls that may write run on tokio's blocking
//! pool: each commits and `fsync`s before it returns (its durability
//! contract), and a runtime worker blocked on a disk would stall every
//! connection's I/O.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

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
}

/// The configured store.
#[derive(Debug)]
pub enum Backend {
    /// Kept in this process only (the default without a data directory).
    Memory(Engine<MemoryLog>),
    /// A redb database under `persistence.path`: every publish and ack on
    /// disk before it is answered (see [`EmbeddedLog`]).
    Embedded(Engine<EmbeddedLog>),
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
            kind @ BackendKind::Nats => Err(PersistError::Store(format!(
                "backend {:?} is not available in this build yet",
                kind.as_str()
            ))),
        }
    }

    /// Starts its background work (retention by age) until `stop`.
    pub fn spawn_background(&self, stop: CancellationToken) {
        match self {
            Backend::Memory(e) => e.spawn_sweeper(stop),
            Backend::Embedded(e) => e.spawn_sweeper(stop),
        }
    }

    /// Closes the store at shutdown, after the publishers have stopped:
    /// the embedded store's file (and its lock) is released when this
    /// returns, so a new gateway can open it at once.
    pub fn close(&self) {
        match self {
            Backend::Memory(e) => e.close(),
            Backend::Embedded(e) => e.close(),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> BackendKind {
        match self {
            Backend::Memory(_) => BackendKind::Memory,
            Backend::Embedded(_) => BackendKind::Embedded,
        }
    }

    /// Whether it can serve now (the local backends: once opened, always).
    pub fn ready(&self) -> Result<(), String> {
        match self {
            Backend::Memory(_) | Backend::Embedded(_) => Ok(()),
        }
    }
}

impl Store for Backend {
    async fn publish(&self, topic: &str, data: &Payload) -> Result<Stored, PersistError> {
        match self {
            Backend::Memory(e) => e.publish(topic, data).await,
            Backend::Embedded(e) => {
                let (e, topic, data) = (e.clone(), topic.to_owned(), data.clone());
                blocking(move || block_on(e.publish(&topic, &data))).await
            }
        }
    }

    async fn open(&self, id: &str, topic: &str) -> Result<Opened, PersistError> {
        match self {
            Backend::Memory(e) => e.open(id, topic).await,
            Backend::Embedded(e) => {
                let (e, id, topic) = (e.clone(), id.to_owned(), topic.to_owned());
                blocking(move || block_on(e.open(&id, &topic))).await
            }
        }
    }

    async fn ack(&self, id: &str, seq: u64) -> Result<Acked, PersistError> {
        match self {
            Backend::Memory(e) => e.ack(id, seq).await,
            Backend::Embedded(e) => {
                let (e, id) = (e.clone(), id.to_owned());
                blocking(move || block_on(e.ack(&id, seq))).await
            }
        }
    }

    async fn delete(&self, id: &str) -> Result<bool, PersistError> {
        match self {
            Backend::Memory(e) => e.delete(id).await,
            Backend::Embedded(e) => {
                let (e, id) = (e.clone(), id.to_owned());
                blocking(move || block_on(e.delete(&id))).await
            }
        }
    }

    async fn position(&self, id: &str) -> Result<Option<(String, u64)>, PersistError> {
        match self {
            Backend::Memory(e) => e.position(id).await,
            Backend::Embedded(e) => e.position(id).await,
        }
    }
}

/// Runs a call of the embedded engine on tokio's blocking pool: it commits
/// and `fsync`s before it returns, which must not hold one of the
/// runtime's few workers (every connection's I/O runs on them). At most
/// as many threads as calls in flight, within tokio's blocking-pool cap.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, PersistError> + Send + 'static,
) -> Result<T, PersistError> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| PersistError::Store(format!("store call ended: {e}")))?
}

/// Drives one engine call to its end on the current (blocking-pool)
/// thread. The engine's calls never wait on I/O or timers; the handle
/// lets the ones that spawn (a session) reach the runtime.
fn block_on<F: std::future::Future>(call: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(call)
}
