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
//! failure is logged once here.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use redb::{Database, Durability};

use super::apply::Tables;
use crate::persist::local::change::{Applied, Change, Outcome, Ticket};
use crate::persist::local::Usage;
use crate::persist::PersistError;

/// Staged changes waiting for the writer, at most (see the module doc).
pub const QUEUE: usize = 4096;

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
    /// Retained totals as of the last durable commit.
    usage: Mutex<Usage>,
    /// Durable commits made.
    commits: AtomicU64,
    /// Batches staged (barriers included).
    staged: AtomicU64,
    /// The database file, for error messages.
    path: PathBuf,
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

/// Closes the queue when the thread ends, however it ends: later stagers
/// get an error at once instead of waiting for a writer that is gone.
struct Closer(Arc<Shared>);

// === impl Writer ===

impl Writer {
    /// Starts the writer over `db`, whose retained totals are `usage`.
    pub(super) fn start(db: Arc<Database>, usage: Usage, path: PathBuf) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            room: Condvar::new(),
            usage: Mutex::new(usage),
            commits: AtomicU64::new(0),
            staged: AtomicU64::new(0),
            path,
        });
        let closer = Closer(shared.clone());
        let thread = std::thread::Builder::new()
            .name("switchyard-store-writer".to_owned())
            .spawn(move || closer.0.run(&db))?;
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
    /// until closed and drained.
    fn run(&self, db: &Database) {
        loop {
            let batches = {
                let mut queue = self.queue.lock();
                while queue.batches.is_empty() && !queue.closed {
                    self.work.wait(&mut queue);
                }
                if queue.batches.is_empty() {
                    return;
                }
                queue.changes = 0;
                std::mem::take(&mut queue.batches)
            };
            self.room.notify_all();
            self.commit(db, batches);
        }
    }

    /// Writes `batches` in one transaction, committed once, then answers
    /// each. Barriers alone (empty batches) need no commit: everything
    /// staged before them was committed by an earlier turn.
    fn commit(&self, db: &Database, batches: Vec<Batch>) {
        if batches.iter().all(|b| b.changes.is_empty()) {
            for batch in batches {
                // A caller that stopped waiting needs no answer.
                let _ = batch.done.send(Ok(Vec::new()));
            }
            return;
        }
        let mut usage = *self.usage.lock();
        match write(db, &batches, &mut usage) {
            Ok(applied) => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                *self.usage.lock() = usage;
                for (batch, applied) in batches.into_iter().zip(applied) {
                    // A caller that stopped waiting needs no answer.
                    let _ = batch.done.send(Ok(applied));
                }
            }
            Err(e) => {
                let error = self.error(e);
                tracing::warn!(error = %error, batches = batches.len(), "persistent store: a commit failed");
                for batch in batches {
                    // A caller that stopped waiting needs no answer.
                    let _ = batch.done.send(Err(error.clone()));
                }
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
