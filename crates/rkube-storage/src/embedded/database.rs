//! The store's files and the open redb handle: who may read them, how a
//! data dir that has held a cluster is recognised, and reopening the
//! database after an I/O fault.
//!
//! ```text
//! DIR/                    0700 (also when DIR already existed)
//!   rkube.redb            0600  the database
//!   rkube.redb.marker     0600  written once the store was first created:
//!                               "this data dir has held a cluster"
//! ```
//!
//! **Missing or empty store.** redb silently initialises a missing or 0-byte
//! file as an empty database; on a data dir that has held a cluster that
//! would start an empty cluster whose resourceVersions went backwards
//! (clients holding newer ones then get errors). [`open_dir`] refuses that
//! case when the marker exists and says how to restore or start anew (delete
//! the marker), like etcd refusing a member dir without its data.
//!
//! **Sharing.** The database is opened in redb's `SingleWriter` concurrency
//! mode: this process is the only writer (a second writer, in this or
//! another process, gets `DatabaseAlreadyOpen`), and read-only handles of
//! other processes may open the file meanwhile and read consistent
//! snapshots; that is how `rkube snapshot save` works while the server runs
//! (see `snapshot.rs`). The mode costs a two-phase commit (two fsyncs per
//! batch of writes instead of one).
//!
//! **Faults.** After an I/O error (e.g. `ENOSPC`) redb latches the handle:
//! every later write fails with "Previous I/O error occurred. Please close
//! and re-open the database". [`DbSlot::reopen`] closes the handle and opens
//! the file again; redb's repair brings it back to its last commit, so every
//! acknowledged write is still there.

use std::fs::{OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redb::{Builder, ConcurrencyMode, Database};

use super::schema::storage_error;
use crate::{Result, StorageError};

/// The database file in the data dir.
pub const DB_FILE: &str = "rkube.redb";
/// The marker written once the store was created in the data dir.
pub const MARKER_FILE: &str = "rkube.redb.marker";
/// Mode of the data dir: only its owner may list or enter it.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the store's files (they hold every Secret).
pub const FILE_MODE: u32 = 0o600;

/// How long [`DbSlot::reopen`] waits for in-flight reads of the old handle to end.
const REOPEN_WAIT: Duration = Duration::from_secs(10);

/// The redb builder every handle of a store uses (see the module docs).
pub(crate) fn builder() -> Builder {
    let mut b = Builder::new();
    b.set_concurrency_mode(ConcurrencyMode::SingleWriter);
    b
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> StorageError {
    StorageError::Internal(format!("embedded store: {what} {}: {e}", path.display()))
}

/// Creates `dir` if needed and sets it to [`DIR_MODE`].
pub(crate) fn prepare_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io_error("create", dir, e))?;
    std::fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)).map_err(|e| io_error("chmod", dir, e))
}

/// Sets an existing file to [`FILE_MODE`].
pub(crate) fn restrict_file(path: &Path) -> Result<()> {
    std::fs::set_permissions(path, Permissions::from_mode(FILE_MODE)).map_err(|e| io_error("chmod", path, e))
}

/// Creates (or truncates) `path` with [`FILE_MODE`] from the start.
pub(crate) fn create_private_file(path: &Path) -> Result<std::fs::File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(|e| io_error("create", path, e))
}

/// Writes the marker of a data dir that holds a cluster (durably).
pub(crate) fn write_marker(dir: &Path) -> Result<()> {
    let path = dir.join(MARKER_FILE);
    let mut f = create_private_file(&path)?;
    let text = format!(
        "This data dir holds an rkube cluster; {DB_FILE} is its embedded store.\n\
         rkube refuses to start when {DB_FILE} is missing or empty while this file exists.\n\
         Delete this file only to start an empty cluster on purpose.\n"
    );
    f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).map_err(|e| io_error("write", &path, e))?;
    sync_dir(dir)
}

/// fsyncs a directory so a rename or create in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error("sync", dir, e))
}

/// Refuses a missing or empty store in a data dir whose marker says it held
/// a cluster (see the module docs). `Ok(true)` when the store file already
/// holds a database, `Ok(false)` when it is new.
pub(crate) fn check_existing(dir: &Path) -> Result<bool> {
    let db = dir.join(DB_FILE);
    let marker = dir.join(MARKER_FILE);
    let found = match std::fs::metadata(&db) {
        Ok(m) if m.len() > 0 => return Ok(true),
        Ok(_) => "is empty (0 bytes)",
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "is missing",
        Err(e) => return Err(io_error("stat", &db, e)),
    };
    if marker.exists() {
        return Err(StorageError::Internal(format!(
            "embedded store {} {found}, but {} says this data dir has held a cluster: starting would serve an \
             empty cluster whose resourceVersions went backwards. Restore a snapshot with `rkube snapshot restore \
             FILE --data-dir {}`, or delete {} to start an empty cluster on purpose",
            db.display(),
            marker.display(),
            dir.display(),
            marker.display(),
        )));
    }
    Ok(false)
}

/// Opens the store's database in `dir` for writing: prepares modes, refuses
/// a missing/empty store of a data dir that held a cluster, creates the
/// file (0600) when new. The marker is written by the caller once the
/// store's tables exist ([`write_marker`]).
///
/// Errors: `Unavailable` when the database is open elsewhere (another
/// server), `Internal` for the refusal above, I/O errors or corruption.
pub(crate) fn open_dir(dir: &Path) -> Result<(Database, bool)> {
    prepare_dir(dir)?;
    let existed = check_existing(dir)?;
    let path = dir.join(DB_FILE);
    if !existed {
        create_private_file(&path)?;
    }
    restrict_file(&path)?;
    let db = open_file(&path)?;
    Ok((db, existed))
}

/// Opens (or initialises, when empty) the database at `path` for writing.
pub(crate) fn open_file(path: &Path) -> Result<Database> {
    builder().create(path).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => {
            StorageError::Unavailable(format!("embedded store {} is already open", path.display()))
        }
        other => storage_error(&format!("open {}", path.display()), other),
    })
}

/// The open database, shared by readers and the writer thread; the writer
/// replaces it after an I/O fault ([`DbSlot::reopen`]).
///
/// Readers take a clone of the handle ([`DbSlot::get`]) for the length of
/// one read transaction and never keep it longer, so a reopen waits at most
/// for the reads in flight.
pub(crate) struct DbSlot {
    path: PathBuf,
    /// `None` only while a reopen failed; reads then fail with `Unavailable`.
    db: RwLock<Option<Arc<Database>>>,
}

impl DbSlot {
    /// A slot holding `db`, opened from `path`.
    pub fn new(path: PathBuf, db: Database) -> DbSlot {
        DbSlot { path, db: RwLock::new(Some(Arc::new(db))) }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current handle. Blocks while a reopen runs.
    pub fn get(&self) -> Result<Arc<Database>> {
        let guard = self.db.read().unwrap_or_else(|p| p.into_inner());
        guard.clone().ok_or_else(|| {
            StorageError::Unavailable(format!(
                "embedded store {} could not be reopened after an I/O error",
                self.path.display()
            ))
        })
    }

    /// Closes the current handle and opens the file again. Waits (up to
    /// 10 s) for reads holding the old handle; new reads wait for the reopen.
    /// Called by the writer thread only.
    pub fn reopen(&self) -> Result<()> {
        let mut guard = self.db.write().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = guard.take() {
            let deadline = Instant::now() + REOPEN_WAIT;
            let mut old = old;
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        drop(db);
                        break;
                    }
                    Err(still_shared) if Instant::now() < deadline => {
                        old = still_shared;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(still_shared) => {
                        *guard = Some(still_shared);
                        return Err(StorageError::Internal(format!(
                            "embedded store {}: reads still hold the database after {REOPEN_WAIT:?}; not reopened",
                            self.path.display()
                        )));
                    }
                }
            }
        }
        let db = open_file(&self.path)?;
        *guard = Some(Arc::new(db));
        Ok(())
    }
}
