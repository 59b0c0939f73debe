//! The embedded store's writer: one thread that takes every batch staged
//! since its last commit, applies them all, in order, in ONE redb write
//! transaction, commits it once ([`Durability::Immediate`]: one `fsync`),
//! and only then resolves each batch's [`Ticket`]. While it commits, new
//! batches queue up for the next transaction: the more callers wait, the
//! more one `fsync` covers (group commit).
//!
//! Bounds: at most [`QUEUE`] staged changes wait for the writer (plus the
//! transaction being written, which holds at most what the queue held:
//! [`QUEUE`] changes, or one batch larger than that, admitted alone into
//! an empty queue). Staging into a full queue blocks the caller's thread
//! until the writer takes the queue, i.e. at most the commit in progress:
//! publishers and acknowledgers are pushed back, nothing is dropped.
//!
//! A batch whose changes fail (a redb error) fails its whole transaction:
//! every batch in it gets the error, nothing of it is on disk, and the
//! failure is logged here (at most one line per [`WARN_EVERY`]; a full
//! disk fails every commit). A redb database that met an I/O error
//! refuses every later operation until it is opened again, so after a
//! failed commit the writer drops the database, reports the failure
//! ([`Health`]: readiness turns red), refuses every batch at once, and
//! reopens the file after [`REOPEN_FIRST`], doubling the wait after each
//! failed attempt up to [`REOPEN_MAX`]; once it is open, commits go on
//! and readiness is green again. Reads fail while it is closed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use redb::{Database, Durability};

use super::apply::Tables;
use super::file::{open_database, WriteFaults};
use crate::persist::local::change::{Applied, Change, Outcome, Ticket};
use crate::persist::local::{Health, Usage};
use crate::persist::PersistError;
use crate::throttle::Throttle;

/// Staged changes waiting for the writer, at most (see the module doc).
pub const QUEUE: usize = 4096;

/// The first reopening is tried this long after a failed commit; each
/// failed attempt doubles the wait, up to [`REOPEN_MAX`].
pub const REOPEN_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two reopenings: once the disk has room
/// again, the store serves again within this.
pub const REOPEN_MAX: Duration = Duration::from_secs(5);

/// At most one warning line per kind (a commit failed, batches refused,
/// a reopening failed) this often; the next says how many were held back.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The writer thread and its queue.
pub(super) struct Writer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// What the callers and the thread share.
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a batch is queued or the writer is closed.
    work: Condvar,
    /// Signalled when the writer takes the queue (room for stagers).
    room: Condvar,
    /// The open database, shared with readers; `None` while the writer
    /// reopens it after a failed commit (reads fail meanwhile) and once
    /// the thread ended.
    db: RwLock<Option<Arc<Database>>>,
    /// `Some(why)` from a failed commit until the database is reopened.
    health: Health,
    /// Retained totals as of the last durable commit.
    usage: Mutex<Usage>,
    /// Durable commits made.
    commits: AtomicU64,
    /// Batches staged (barriers included).
    staged: AtomicU64,
    /// The database file, for error messages and to reopen it.
    path: PathBuf,
    /// The test seam its file is opened with (see `file.rs`).
    faults: WriteFaults,
    /// Rate-limits the warnings (a full disk fails every commit).
    throttle: Throttle,
}

#[derive(Default)]
struct Queue {
    batches: Vec<Batch>,
    /// Changes in `batches`.
    changes: usize,
    /// No more batches are taken (closing, or the thread ended).
    closed: bool,
}

/// One staged batch and where its outcome goes.
struct Batch {
    changes: Vec<Change>,
    done: tokio::sync::oneshot::Sender<Outcome>,
}

/// A database to reopen after a failed commit: when, and how long the
/// wait after the next failed attempt.
struct Reopen {
    at: Instant,
    wait: Duration,
}

/// Closes the queue when the thread ends, however it ends: later stagers
/// get an error at once instead of waiting for a writer that is gone.
struct Closer(Arc<Shared>);

// === impl Writer ===

impl Writer {
    /// Starts the writer over `db` (the file at `path`, opened with
    /// `faults`), whose retained totals are `usage`. The thread logs
    /// through the caller's tracing subscriber.
    pub(super) fn start(
        db: Database,
        usage: Usage,
        path: PathBuf,
        faults: WriteFaults,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            room: Condvar::new(),
            db: RwLock::new(Some(Arc::new(db))),
            health: Health::default(),
            usage: Mutex::new(usage),
            commits: AtomicU64::new(0),
            staged: AtomicU64::new(0),
            path,
            faults,
            throttle: Throttle::new(WARN_EVERY),
        });
        let closer = Closer(shared.clone());
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let thread = std::thread::Builder::new()
            .name("switchyard-store-writer".to_owned())
            .spawn(move || tracing::dispatcher::with_default(&dispatch, || closer.0.run()))?;
        Ok(Writer {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues `changes` for the next commit (waiting for room: module
    /// doc); the ticket resolves after that commit.
    pub(super) fn stage(&self, changes: Vec<Change>) -> Ticket {
        let n = changes.len();
        let mut queue = self.shared.queue.lock();
        loop {
            if queue.closed {
                return Ticket::ready(Err(self.shared.error("the store is closed")));
            }
            if queue.changes == 0 || queue.changes + n <= QUEUE {
                break;
            }
            self.shared.room.wait(&mut queue);
        }
        let (ticket, done) = Ticket::waiting();
        queue.changes += n;
        queue.batches.push(Batch { changes, done });
        self.shared.staged.fetch_add(1, Ordering::Relaxed);
        drop(queue);
        self.shared.work.notify_one();
        ticket
    }

    /// The open database (`None` while it is reopened, or closed).
    pub(super) fn db(&self) -> Option<Arc<Database>> {
        self.shared.db.read().clone()
    }

    /// Whether it can write now.
    pub(super) fn health(&self) -> Health {
        self.shared.health.clone()
    }

    /// Retained totals as of the last durable commit.
    pub(super) fn usage(&self) -> Usage {
        *self.shared.usage.lock()
    }

    /// Durable commits made so far.
    pub(super) fn commits(&self) -> u64 {
        self.shared.commits.load(Ordering::Relaxed)
    }

    /// Batches staged so far.
    pub(super) fn staged(&self) -> u64 {
        self.shared.staged.load(Ordering::Relaxed)
    }

    /// Commits what is queued, then stops the thread (and waits for it).
    pub(super) fn close(&mut self) {
        self.shared.queue.lock().closed = true;
        self.shared.work.notify_one();
        self.shared.room.notify_all();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("persistent store: the writer thread panicked");
            }
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.close();
    }
}

// === impl Shared ===

impl Shared {
    /// The thread: takes the whole queue, writes it as one transaction,
    /// until closed and drained. After a failed commit it drops the
    /// database and reopens it ([`Shared::reopen`]), refusing batches
    /// meanwhile.
    fn run(&self) {
        let mut reopen: Option<Reopen> = None;
        loop {
            let Some(batches) = self.take(reopen.as_ref().map(|r| r.at)) else {
                break;
            };
            self.room.notify_all();
            if let Some(r) = reopen.as_mut().filter(|r| Instant::now() >= r.at) {
                if self.reopen() {
                    reopen = None;
                } else {
                    r.at = Instant::now() + r.wait;
                    r.wait = (r.wait * 2).min(REOPEN_MAX);
                }
            }
            if reopen.is_some() {
                self.refuse(batches);
                continue;
            }
            if !self.commit(batches) {
                // The database refuses everything after an I/O error:
                // dropped now (readers hold it for one read at most) and
                // opened again.
                *self.db.write() = None;
                reopen = Some(Reopen {
                    at: Instant::now() + REOPEN_FIRST,
                    wait: REOPEN_FIRST * 2,
                });
            }
        }
        *self.db.write() = None;
    }

    /// Waits for batches (or for `until`, the next reopening: then
    /// possibly none) and takes them all; `None` once closed and drained.
    fn take(&self, until: Option<Instant>) -> Option<Vec<Batch>> {
        let mut queue = self.queue.lock();
        while queue.batches.is_empty() && !queue.closed {
            match until {
                Some(at) => {
                    if self.work.wait_until(&mut queue, at).timed_out() {
                        break;
                    }
                }
                None => self.work.wait(&mut queue),
            }
        }
        if queue.batches.is_empty() && queue.closed {
            return None;
        }
        queue.changes = 0;
        Some(std::mem::take(&mut queue.batches))
    }

    /// Opens the database again; whether it is open. While the old
    /// handle lingers (a read in progress) the file is still locked: the
    /// attempt fails and is made again later.
    fn reopen(&self) -> bool {
        match open_database(&self.path, &self.faults) {
            Ok((db, usage)) => {
                *self.usage.lock() = usage;
                *self.db.write() = Some(Arc::new(db));
                self.health.set(None);
                tracing::info!(path = %self.path.display(), "persistent store: reopened after a failed commit");
                true
            }
            Err(e) => {
                if let Some(held) = self.throttle.admit("reopen") {
                    tracing::warn!(error = %e, held_back = held, "persistent store: reopening failed; retrying with backoff");
                }
                false
            }
        }
    }

    /// Fails `batches` at once: the database is being reopened.
    fn refuse(&self, batches: Vec<Batch>) {
        if batches.is_empty() {
            return;
        }
        let why = self.health.failure().unwrap_or_default();
        let error = PersistError::Store(format!(
            "embedded store {why}; writes are refused until the store is reopened"
        ));
        if let Some(held) = self.throttle.admit("refused") {
            tracing::warn!(error = %error, held_back = held, "persistent store: writes refused until the store is reopened");
        }
        for batch in batches {
            // A caller that stopped waiting needs no answer.
            let _ = batch.done.send(Err(error.clone()));
        }
    }

    /// Writes `batches` in one transaction, committed once, then answers
    /// each; whether it committed. Barriers alone (empty batches) need no
    /// commit: everything staged before them was committed by an earlier
    /// turn (or failed, which their callers learn from their own
    /// tickets).
    fn commit(&self, batches: Vec<Batch>) -> bool {
        if batches.iter().all(|b| b.changes.is_empty()) {
            for batch in batches {
                // A caller that stopped waiting needs no answer.
                let _ = batch.done.send(Ok(Vec::new()));
            }
            return true;
        }
        let Some(db) = self.db.read().clone() else {
            self.refuse(batches);
            return false;
        };
        let mut usage = *self.usage.lock();
        match write(&db, &batches, &mut usage) {
            Ok(applied) => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                *self.usage.lock() = usage;
                for (batch, applied) in batches.into_iter().zip(applied) {
                    // A caller that stopped waiting needs no answer.
                    let _ = batch.done.send(Ok(applied));
                }
                true
            }
            Err(e) => {
                self.health
                    .set(Some(format!("{}: {e}", self.path.display())));
                let error = self.error(e);
                if let Some(held) = self.throttle.admit("commit") {
                    tracing::warn!(error = %error, batches = batches.len(), held_back = held, "persistent store: a commit failed; reopening the store");
                }
                for batch in batches {
                    // A caller that stopped waiting needs no answer.
                    let _ = batch.done.send(Err(error.clone()));
                }
                false
            }
        }
    }

    /// A failure as the store's error, naming the file.
    fn error(&self, e: impl std::fmt::Display) -> PersistError {
        PersistError::Store(format!("embedded store {}: {e}", self.path.display()))
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        let mut queue = self.0.queue.lock();
        queue.closed = true;
        // Their tickets resolve with "the store's writer stopped".
        queue.batches.clear();
        queue.changes = 0;
        drop(queue);
        self.0.room.notify_all();
    }
}

/// Applies every change of `batches`, in order, in one write transaction
/// committed durably; `usage` follows. Nothing is written on an error
/// (the transaction is aborted when dropped).
fn write(
    db: &Database,
    batches: &[Batch],
    usage: &mut Usage,
) -> Result<Vec<Vec<Applied>>, redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    let applied = {
        let mut tables = Tables::open(&txn)?;
        let mut out = Vec::with_capacity(batches.len());
        for batch in batches {
            let one = batch
                .changes
                .iter()
                .map(|change| tables.apply(change, usage))
                .collect::<Result<Vec<_>, _>>()?;
            out.push(one);
        }
        out
    };
    txn.commit()?;
    Ok(applied)
}
