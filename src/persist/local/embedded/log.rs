//! [`EmbeddedLog`] as a [`Log`]: changes go to the writer (one commit for
//! everything staged while the previous one was written); reads are redb
//! read transactions, which run beside the writer and see only what is
//! committed (redb publishes a commit to this process's readers after its
//! `fsync`), so nothing read was ever not durable.

use super::*;

impl Log for EmbeddedLog {
    // Reads block on the disk, and staging may wait for room in the
    // writer's queue: the engine calls it from tokio's blocking pool,
    // never from an async worker.
    const BLOCKING: bool = true;

    fn stage(&mut self, changes: Vec<Change>) -> Ticket {
        let Some(writer) = self.writer.as_ref() else {
            return Ticket::ready(Err(self.error(redb::Error::DatabaseClosed)));
        };
        if !changes.is_empty() {
            match self.expires_nothing(&changes) {
                Ok(true) => {
                    let none = changes.iter().map(|_| Applied::Expired(Vec::new()));
                    return Ticket::ready(Ok(none.collect()));
                }
                Ok(false) => {}
                Err(e) => return Ticket::ready(Err(self.error(e))),
            }
        }
        writer.stage(changes)
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

    fn topics(&self) -> Result<Vec<String>, PersistError> {
        self.do_topics().map_err(|e| self.error(e))
    }

    fn positions(&self) -> Result<Vec<(String, Position)>, PersistError> {
        self.do_positions().map_err(|e| self.error(e))
    }

    fn stats(&self) -> Result<Usage, PersistError> {
        Ok(self.writer.as_ref().map(Writer::usage).unwrap_or_default())
    }

    fn close(&mut self) {
        // The writer commits what is queued, then ends and drops the
        // database (readers hold it only for the length of one read):
        // the file and its lock are released.
        if let Some(mut writer) = self.writer.take() {
            writer.close();
        }
    }

    fn health(&self) -> Health {
        self.writer
            .as_ref()
            .map_or_else(Health::default, Writer::health)
    }
}

impl Drop for EmbeddedLog {
    fn drop(&mut self) {
        self.close();
    }
}
