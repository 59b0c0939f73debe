//! [`EmbeddedLog`] as a [`Log`]: each call one redb transaction, committed
//! durably before it returns.

use super::*;

impl Log for EmbeddedLog {
    // Every change is committed (fsync) before it returns: the engine calls
    // it from tokio's blocking pool, never from an async worker.
    const BLOCKING: bool = true;

    fn append(
        &mut self,
        topic: &str,
        data: &Payload,
        at: SystemTime,
        retention: &Retention,
    ) -> Result<(Stored, Vec<u64>), PersistError> {
        self.do_append(topic, data, at, retention)
            .map_err(|e| self.error(e))
    }

    fn expire(
        &mut self,
        topic: &str,
        now: SystemTime,
        retention: &Retention,
    ) -> Result<Vec<u64>, PersistError> {
        self.do_expire(topic, now, retention)
            .map_err(|e| self.error(e))
    }

    fn read(&self, topic: &str, after: u64, limit: usize) -> Result<Vec<Stored>, PersistError> {
        self.do_read(topic, after, limit).map_err(|e| self.error(e))
    }

    fn last_seq(&self, topic: &str) -> Result<u64, PersistError> {
        self.do_last_seq(topic).map_err(|e| self.error(e))
    }

    fn position(&self, id: &str) -> Result<Option<Position>, PersistError> {
        self.do_position(id).map_err(|e| self.error(e))
    }

    fn set_position(&mut self, id: &str, position: &Position) -> Result<(), PersistError> {
        self.do_set_position(id, position)
            .map_err(|e| self.error(e))
    }

    fn remove_position(&mut self, id: &str) -> Result<bool, PersistError> {
        self.do_remove_position(id).map_err(|e| self.error(e))
    }

    fn topics(&self) -> Result<Vec<String>, PersistError> {
        self.do_topics().map_err(|e| self.error(e))
    }

    fn positions(&self) -> Result<Vec<(String, Position)>, PersistError> {
        self.do_positions().map_err(|e| self.error(e))
    }

    fn stats(&self) -> Result<Usage, PersistError> {
        Ok(self.usage)
    }

    fn close(&mut self) {
        // Every commit is already durable: dropping the handle only
        // releases the file and its lock.
        self.db = None;
    }
}
