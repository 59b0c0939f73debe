//! The engine as a [`Store`]: each call runs on the engine, on tokio's
//! blocking pool (one at a time) when its log blocks on the disk.

use super::*;

impl<L: Log> Store for Engine<L> {
    async fn publish(&self, topic: &str, data: &Payload) -> Result<Stored, PersistError> {
        let (topic, data) = (topic.to_owned(), data.clone());
        self.call(move |e| e.publish_now(&topic, &data)).await
    }

    async fn open(&self, id: &str, topic: &str) -> Result<Opened, PersistError> {
        let (id, topic) = (id.to_owned(), topic.to_owned());
        self.call(move |e| e.open_now(&id, &topic)).await
    }

    async fn ack(&self, id: &str, seq: u64) -> Result<Acked, PersistError> {
        let id = id.to_owned();
        self.call(move |e| e.ack_now(&id, seq)).await
    }

    async fn delete(&self, id: &str) -> Result<bool, PersistError> {
        let id = id.to_owned();
        self.call(move |e| e.delete_now(&id)).await
    }

    async fn position(&self, id: &str) -> Result<Option<(String, u64)>, PersistError> {
        let id = id.to_owned();
        self.call(move |e| e.position_now(&id)).await
    }
}

impl<L: Log> Engine<L> {
    /// Runs `f` here, or on tokio's blocking pool when the log blocks
    /// ([`Log::BLOCKING`]: disk I/O must not hold up the async workers).
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Self) -> Result<T, PersistError> + Send + 'static,
    ) -> Result<T, PersistError> {
        if !L::BLOCKING {
            return f(self);
        }
        let engine = self.clone();
        blocking(move || f(&engine)).await
    }
}

/// Blocking store calls running at once. They take the engine's lock in
/// turn anyway; without this bound every waiting call (10 pipelining
/// subscribers keep thousands of acks in flight) held a blocking-pool
/// thread of its own, up to tokio's 512, each with its own allocator heap
/// (500 MiB RSS in the persist benchmark). Callers past it wait here, as
/// futures.
static DISK_CALLS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Runs `f` on tokio's blocking pool, one call at a time.
pub(in crate::persist::local) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, PersistError> + Send + 'static,
) -> Result<T, PersistError> {
    let _turn = DISK_CALLS
        .acquire()
        .await
        .map_err(|e| PersistError::Store(format!("store closed: {e}")))?;
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(PersistError::Store(format!("store task failed: {e}"))))
}
