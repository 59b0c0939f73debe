//! The embedded store: a [`Log`] in one redb database file under the
//! configured data directory (`[persistence] path`), for a single
//! switchyard instance whose persistent subscriptions must survive a crash
//! or a restart.
//!
//! # Durability contract
//!
//! Every staged change ([`Log::stage`]: appends, expiries that evict,
//! positions written or removed) is written by the one writer thread
//! (`writer`) in a redb write transaction committed with
//! [`redb::Durability::Immediate`] (redb writes the new pages and the
//! commit slot and `fsync`s the file) before its [`Ticket`] resolves. So
//!
//! - a **publish** is on disk before it is delivered to anyone (the engine
//!   wakes the sessions after the ticket resolved, and sessions read with
//!   read transactions, which see a commit only after its `fsync`) and
//!   before its publisher is answered;
//! - an **acknowledgement** is on disk before `{"acknowledged":true}` is
//!   sent (the engine replies after the ticket of its position resolved);
//! - after a `kill -9` (or a power loss on a disk that honours `fsync`),
//!   reopening finds every committed message, `last_seq` and position, and
//!   nothing half-written: a commit is atomic (copy-on-write B-trees, two
//!   commit slots with checksums; the newest valid one wins).
//!
//! # Group commit
//!
//! The writer takes every batch staged since its last commit and writes
//! them all, in the order staged, in ONE transaction with ONE commit, then
//! resolves each batch's ticket: while one `fsync` runs, everything staged
//! meanwhile (the recorder's events, publishes, the acks of every
//! subscriber, positions made or moved) waits for the next, so the cost
//! is one `fsync` per commit, not per change (one `fsync` is about 1.2 ms
//! on the shared VM of the loadgen `persist` run; one commit a change
//! stored 173 events/s there with 10 subscribers acknowledging each, group
//! commit the whole 1,000 events/s feed, p99 11.7 ms to delivery). The
//! engine stages with its lock held (a queue push) and waits for tickets
//! without it; reads (resume, backlog, redelivery) are read transactions
//! that run beside the writer's transaction. Staging waits for room
//! when [`QUEUE`] changes are already queued (the writer's module doc);
//! the engine calls the log from tokio's blocking pool, never from a
//! runtime worker.
//!
//! # A failing disk
//!
//! A commit that fails (a full disk, an I/O error) fails every batch in
//! it; redb then refuses every operation on that database, so the writer
//! closes it, reports the failure ([`Log::health`]: readiness and the
//! status page), refuses writes at once, and reopens the file with a
//! backoff ([`REOPEN_FIRST`] doubling to [`REOPEN_MAX`]) until it opens;
//! then the store serves again. Reads fail while it is closed.
//!
//! `rows` holds the table definitions, the row encodings and the
//! retention walk; `apply` one change applied to the open tables;
//! `writer` the thread, its queue and its bound, and the reopening after
//! a failed commit; `file` opening the file (through a backend whose
//! writes tests can make fail: [`WriteFaults`]); `log` the [`Log`]
//! implementation.
//!
//! # Layout of the file
//!
//! `<path>/persist.redb`, four tables:
//!
//! - `messages`: (topic, seq) → (stored_at in ms since the epoch, encoding
//!   tag, data bytes). Tag 0 is JSON text, 1 is CBOR bytes.
//! - `topics`: topic → (last seq, retained count, retained bytes). A row
//!   outlives the eviction of every message, so `last_seq` survives
//!   eviction and restart and sequences never restart from 1.
//! - `positions`: subscription id → (topic, floor, acknowledged sequences
//!   above the floor).
//! - `starts`: subscription id → the topic's last sequence when it was
//!   created (an id without a row, from a file older than this table,
//!   started at 0).
//!
//! The directory is created with mode 0700 if absent, and the file with
//! mode 0600 (messages may be private; the directory may be one the
//! operator made with a wider mode). The file is locked while open: a
//! second process on the same directory gets a clear error, as does an
//! unwritable directory or a damaged file. The whole file is checked (every page checksum) when it is
//! opened, so damage is an error at start-up, never a panic later.
//!
//! # Bounds
//!
//! Retention (`max_count`, `max_bytes` and `max_age` on append, `max_age`
//! in [`Log::expire`]) bounds what a topic keeps on disk, oldest first, as
//! the memory log does (a message alone larger than `max_bytes` is stored,
//! takes its sequence, and is evicted at once). A subscription's acknowledged set above its floor is bounded by the
//! engine's delivery window. Besides redb's page cache,
//! [`CACHE_BYTES`], memory holds at most [`QUEUE`] staged changes waiting
//! for the writer, plus the transaction it is writing.
//!
//! # Why redb (and not fjall)
//!
//! Both are pure-Rust, actively maintained embedded key-value stores; the
//! choice was made on crash safety, write throughput and maintenance.
//!
//! - **Crash safety.** redb (4.x) is a copy-on-write B-tree with ACID
//!   transactions: a commit is durable when `commit()` returns under
//!   `Durability::Immediate` (the default), and a crash leaves the previous
//!   or the new state, never a mix; a damaged file is reported as
//!   `Corrupted`. fjall (3.x) is an LSM tree with a write-ahead journal
//!   whose default is *not* to `fsync` each write (it flushes on a timer);
//!   durability per write needs an explicit `persist(SyncAll)` after each
//!   batch, and recovery replays the journal and depends on background
//!   flush and compaction threads being correct.
//! - **Write throughput.** fjall's appends are sequential journal writes
//!   and it wins on raw ingest when durability is relaxed. Here every
//!   publish and ack must be on disk before it is answered, so both pay
//!   one `fsync` per commit, which dominates; redb's single `fsync` per
//!   commit (1-phase commit with checksums) is as cheap as it gets for
//!   that contract.
//! - **Maintenance.** redb has one file, no background threads, a small
//!   dependency tree, a file format stable since 1.0 with upgrades
//!   announced and refused loudly (`UpgradeRequired`; v3 since 3.0,
//!   unchanged through 4.x), frequent releases and extensive fuzzing and
//!   crash testing upstream. fjall brings compaction and flush threads, a
//!   directory of segment files, and has changed its on-disk format at each
//!   major version.
//!
//! redb 4 needs Rust 1.90 (the crate's `rust-version`).

use std::fmt;
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable};

use self::file::open_database;
use self::rows::{age_cutoff, decode, from_millis, millis, MESSAGES, POSITIONS, STARTS, TOPICS};
use self::writer::Writer;
use super::{Applied, Change, Health, Log, Position, Ticket, Usage};
use crate::persist::{PersistError, Stored};

mod apply;
mod file;
mod log;
mod rows;
mod writer;

#[doc(hidden)]
pub use file::WriteFaults;
pub use writer::{QUEUE, REOPEN_FIRST, REOPEN_MAX};

/// The database file's name inside the data directory.
pub const FILE_NAME: &str = "persist.redb";

/// redb's page cache, the store's memory bound (redb's default is 1 GiB,
/// which a busy store fills: 490 MiB RSS in the loadgen persist run).
pub const CACHE_BYTES: usize = 64 * 1024 * 1024;

/// A [`Log`] in a redb database file; see the module doc.
pub struct EmbeddedLog {
    /// Its file, for error messages.
    path: PathBuf,
    /// The one thread that writes: every staged change goes through it.
    /// It also holds the open database (reads take it from there: it is
    /// replaced when the writer reopens the file after a failed commit)
    /// and keeps the retained totals (summed from `topics` when opened,
    /// then kept up to date by each commit). `None` once closed.
    writer: Option<Writer>,
}

// === impl EmbeddedLog ===

impl EmbeddedLog {
    /// Opens (creating if absent) the store in directory `dir`, which is
    /// created with mode 0700 if it does not exist; the file is created
    /// with mode 0600.
    pub fn open(dir: &Path) -> Result<Self, PersistError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                PersistError::Store(format!(
                    "cannot create the data directory {}: {e}",
                    dir.display()
                ))
            })?;
        let path = dir.join(FILE_NAME);
        let faults = WriteFaults::of(dir);
        let (db, usage) = open_database(&path, &faults)?;
        let writer = Writer::start(db, usage, path.clone(), faults)
            .map_err(|e| PersistError::Store(format!("embedded store {}: {e}", path.display())))?;
        Ok(EmbeddedLog {
            path,
            writer: Some(writer),
        })
    }

    /// Durable commits made by this handle's writer so far (each is one
    /// `fsync`, covering every batch staged while the one before was
    /// written).
    pub fn commits(&self) -> u64 {
        self.writer.as_ref().map_or(0, Writer::commits)
    }

    /// Batches handed to the writer so far (barriers included): with
    /// [`EmbeddedLog::commits`], how many batches a commit covers.
    pub fn staged(&self) -> u64 {
        self.writer.as_ref().map_or(0, Writer::staged)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The database, unless closed or being reopened.
    fn db(&self) -> Result<Arc<Database>, redb::Error> {
        self.writer
            .as_ref()
            .and_then(Writer::db)
            .ok_or(redb::Error::DatabaseClosed)
    }

    /// Whether none of `changes` (all expiries) would evict anything, as
    /// far as what is durable tells: a periodic sweep that finds nothing
    /// to do costs no commit. (What is staged and not yet durable is
    /// newer than what is durable, so no older.)
    fn expires_nothing(&self, changes: &[Change]) -> Result<bool, redb::Error> {
        for change in changes {
            let Change::Expire {
                topic,
                now,
                retention,
            } = change
            else {
                return Ok(false);
            };
            let Some(cutoff) = age_cutoff(millis(*now), retention) else {
                continue;
            };
            if let Some(oldest) = self.do_read(topic, 0, 1)?.first() {
                if millis(oldest.stored_at) <= cutoff {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// A redb failure as the store's error, naming the file.
    fn error(&self, e: impl fmt::Display) -> PersistError {
        PersistError::Store(format!("embedded store {}: {e}", self.path.display()))
    }

    fn do_read(&self, topic: &str, after: u64, limit: usize) -> Result<Vec<Stored>, redb::Error> {
        let txn = self.db()?.begin_read()?;
        let messages = txn.open_table(MESSAGES)?;
        let mut out = Vec::new();
        if after == u64::MAX || limit == 0 {
            return Ok(out);
        }
        for entry in messages.range((topic, after + 1)..=(topic, u64::MAX))? {
            let (key, value) = entry?;
            let (at_ms, tag, bytes) = value.value();
            out.push(Stored {
                topic: topic.to_owned(),
                seq: key.value().1,
                stored_at: from_millis(at_ms),
                data: decode(tag, bytes)?,
            });
            if out.len() == limit {
                break;
            }
        }
        Ok(out)
    }

    fn do_last_seq(&self, topic: &str) -> Result<u64, redb::Error> {
        let txn = self.db()?.begin_read()?;
        let topics = txn.open_table(TOPICS)?;
        Ok(topics.get(topic)?.map_or(0, |row| row.value().0))
    }

    fn do_position(&self, id: &str) -> Result<Option<Position>, redb::Error> {
        let txn = self.db()?.begin_read()?;
        let positions = txn.open_table(POSITIONS)?;
        let starts = txn.open_table(STARTS)?;
        let Some(row) = positions.get(id)? else {
            return Ok(None);
        };
        let (topic, floor, acked) = row.value();
        Ok(Some(Position {
            topic: topic.to_owned(),
            start: starts.get(id)?.map_or(0, |s| s.value()),
            floor,
            acked: acked.into_iter().collect(),
        }))
    }

    fn do_positions(&self) -> Result<Vec<(String, Position)>, redb::Error> {
        let txn = self.db()?.begin_read()?;
        let positions = txn.open_table(POSITIONS)?;
        let starts = txn.open_table(STARTS)?;
        let mut out = Vec::new();
        for entry in positions.iter()? {
            let (id, row) = entry?;
            let (topic, floor, acked) = row.value();
            let position = Position {
                topic: topic.to_owned(),
                start: starts.get(id.value())?.map_or(0, |s| s.value()),
                floor,
                acked: acked.into_iter().collect(),
            };
            out.push((id.value().to_owned(), position));
        }
        Ok(out)
    }

    fn do_topics(&self) -> Result<Vec<String>, redb::Error> {
        let txn = self.db()?.begin_read()?;
        let topics = txn.open_table(TOPICS)?;
        let mut out = Vec::new();
        for entry in topics.iter()? {
            let (topic, row) = entry?;
            if row.value().1 > 0 {
                out.push(topic.value().to_owned());
            }
        }
        Ok(out)
    }
}

impl fmt::Debug for EmbeddedLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedLog")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod failure_tests;
#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod tests;
