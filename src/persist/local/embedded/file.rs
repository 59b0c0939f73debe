//! Opening the embedded store's database file: at start-up, and again by
//! the writer after a commit failed (a redb database that met an I/O
//! error refuses every later operation, "Previous I/O error occurred",
//! until it is closed and opened again).
//!
//! The file is reached through [`StoreFile`], redb's own file backend
//! plus a switch that makes writes fail ([`WriteFaults`]): the seam
//! through which tests make a real store meet a write error (a full disk)
//! without a tiny filesystem to fill. Nothing arms it outside tests.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::ops::Bound;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use redb::backends::FileBackend;
use redb::{
    BackendError, Database, DatabaseError, ReadableDatabase, ReadableTable, StorageBackend,
    StorageError,
};

use super::rows::{MESSAGES, POSITIONS, STARTS, TOPICS};
use super::CACHE_BYTES;
use crate::persist::local::Usage;
use crate::persist::PersistError;

/// Makes the writes of the stores opened in one directory fail with
/// "No space left on device" while armed (a test seam; see the module
/// doc).
#[doc(hidden)]
#[derive(Debug, Clone, Default)]
pub struct WriteFaults(Arc<AtomicBool>);

/// redb's file backend, whose writes fail while its [`WriteFaults`] are
/// armed; reads and locks are the file's own.
#[derive(Debug)]
struct StoreFile {
    file: FileBackend,
    faults: WriteFaults,
}

/// The faults registered per data directory by tests
/// ([`WriteFaults::register`]); empty unless a test registers one, so
/// its size is the number of directories tests use.
static REGISTERED: LazyLock<Mutex<HashMap<PathBuf, WriteFaults>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

// === impl WriteFaults ===

impl WriteFaults {
    /// The faults of every store opened in `dir` from now on (tests).
    pub fn register(dir: &Path) -> WriteFaults {
        let faults = WriteFaults::default();
        REGISTERED.lock().insert(dir.to_path_buf(), faults.clone());
        faults
    }

    /// Those registered for `dir`, or unarmed ones.
    pub(super) fn of(dir: &Path) -> WriteFaults {
        REGISTERED.lock().get(dir).cloned().unwrap_or_default()
    }

    /// Writes fail from now on (`true`) or succeed again.
    pub fn set(&self, fail: bool) {
        self.0.store(fail, Ordering::SeqCst);
    }

    fn check(&self) -> std::io::Result<()> {
        if self.0.load(Ordering::SeqCst) {
            // ENOSPC: what a full disk answers.
            return Err(std::io::Error::from_raw_os_error(28));
        }
        Ok(())
    }
}

// === impl StoreFile ===

impl StorageBackend for StoreFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.faults.check()?;
        self.file.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.faults.check()?;
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.faults.check()?;
        self.file.write(offset, data)
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

// === helpers ===

/// Opens (creating if absent) the database file at `path`, checks all of
/// it, creates the tables (so that read transactions find them) and sums
/// the retained totals.
pub(super) fn open_database(
    path: &Path,
    faults: &WriteFaults,
) -> Result<(Database, Usage), PersistError> {
    // Mode 0600 when it is created: it holds the messages, which may be
    // private even when the directory around it was made by someone else
    // with a wider mode.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| open_error(path, DatabaseError::Storage(StorageError::Io(e))))?;
    let file = FileBackend::new(file).map_err(|e| open_error(path, e))?;
    let backend = StoreFile {
        file,
        faults: faults.clone(),
    };
    let db = Database::builder()
        .set_check_integrity_on_open(true)
        .set_cache_size(CACHE_BYTES)
        .create_with_backend(backend)
        .map_err(|e| open_error(path, e))?;
    let usage = prepare(&db)
        .map_err(|e| PersistError::Store(format!("embedded store {}: {e}", path.display())))?;
    Ok((db, usage))
}

/// Creates the tables (the only commit not made by the writer) and sums
/// the retained totals over the `topics` rows.
fn prepare(db: &Database) -> Result<Usage, redb::Error> {
    let txn = db.begin_write()?;
    txn.open_table(MESSAGES)?;
    txn.open_table(TOPICS)?;
    txn.open_table(POSITIONS)?;
    txn.open_table(STARTS)?;
    txn.commit()?;
    let txn = db.begin_read()?;
    let topics = txn.open_table(TOPICS)?;
    let mut usage = Usage::default();
    for entry in topics.iter()? {
        let (_, count, bytes) = entry?.1.value();
        usage.messages += count;
        usage.bytes += bytes;
    }
    Ok(usage)
}

/// Why the database could not be opened, in words an operator can act on.
fn open_error(path: &Path, e: DatabaseError) -> PersistError {
    let file = path.display();
    PersistError::Store(match e {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => format!(
            "the embedded store {file} is open in another process \
             (another switchyard on the same persistence path?)"
        ),
        DatabaseError::Storage(StorageError::Corrupted(why)) => format!(
            "the embedded store {file} is damaged ({why}); \
             move it away to start with an empty store"
        ),
        DatabaseError::Storage(StorageError::Io(io)) => {
            format!("cannot open the embedded store {file}: {io}")
        }
        DatabaseError::UpgradeRequired(version) => format!(
            "the embedded store {file} has file format {version}, \
             which this redb cannot read"
        ),
        other => format!("cannot open the embedded store {file}: {other}"),
    })
}
