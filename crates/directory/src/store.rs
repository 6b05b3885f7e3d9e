//! Connections: one writer, a small pool of readers.
//!
//! SQLite in WAL mode lets readers run alongside one writer, but never two writers. So writes go
//! through a single connection behind a `Mutex` (writers queue in-process instead of spinning on
//! SQLITE_BUSY), and reads check out one of at most [`MAX_READERS`] connections. Both locks are
//! std `Mutex`es: the directory is synchronous (async callers use `spawn_blocking`), nothing
//! `.await`s while holding them, and the critical sections are only a `Vec` push/pop (readers) or
//! one SQLite transaction (writer).
//!
//! Write transactions are `BEGIN IMMEDIATE`: they take SQLite's write lock up front, so a
//! check-then-insert inside one is atomic even against another process (e.g. the CLI) using the
//! same file; `busy_timeout` makes such a process wait instead of failing.
//!
//! Durability: `synchronous=NORMAL` in WAL mode can lose the last transactions on power loss
//! (never on a process crash) but never corrupts the file. Directory writes are administrative and
//! can be repeated; the spool, not the directory, carries the "durable before 250" promise.
//!
//! Reader connections run with `query_only`, so a bug can never write through them.
//!
//! SECURITY: the path is opened without `SQLITE_OPEN_URI`, so a configured path such as
//! `file:x?mode=memory` is a file name, not a set of SQLite options.

use crate::error::{storage, DirectoryError};
use crate::schema;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Most reader connections open at once. Reads are short; more than a few per core only adds
/// memory (each connection has its own page cache).
pub(crate) const MAX_READERS: usize = 4;

/// How long a connection waits for a lock held by another process before SQLITE_BUSY.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Writer page cache, in KiB. Bulk adds insert into the `(list_id, address)` index at scattered
/// positions; 64 MiB holds that index for a million-member list, which measured ~25 % faster
/// than 16 MiB for `add_members` of 1,000,000 members. Pages are allocated only as used.
const WRITER_CACHE_KIB: i64 = 64 * 1024;

/// Reader page cache, in KiB. Reads are mostly sequential page scans that the OS cache serves
/// well; a smaller cache keeps [`MAX_READERS`] connections from adding up.
const READER_CACHE_KIB: i64 = 16 * 1024;

/// Prepared statements kept per connection (rusqlite's default of 16 is enough today; this leaves
/// room so the hot statements are never evicted).
const STATEMENT_CACHE: usize = 64;

pub(crate) struct Store {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<ReaderPool>,
    reader_returned: Condvar,
    /// Compiled bans and the row generation they were built from (`bans`).
    pub(crate) bans: crate::patterns::BanCache,
}

struct ReaderPool {
    idle: Vec<Connection>,
    /// Connections that exist (idle + checked out); never above `MAX_READERS`.
    open: usize,
}

/// A checked-out reader; goes back to the pool on drop.
pub(crate) struct Reader<'a> {
    conn: Option<Connection>,
    store: &'a Store,
}

impl std::ops::Deref for Reader<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        // Invariant: `conn` is Some from construction until drop.
        self.conn
            .as_ref()
            .unwrap_or_else(|| unreachable!("reader used after release"))
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            lock(&self.store.readers).idle.push(conn);
            self.store.reader_returned.notify_one();
        }
    }
}

/// A poisoned lock only means another thread panicked while holding it. The pool's `Vec` is still
/// consistent, and an unfinished transaction on the writer was rolled back when its `Transaction`
/// dropped during unwinding, so carrying on is safe.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Store {
    /// Opens (creating if needed) the database, switches it to WAL and applies migrations.
    pub(crate) fn open(path: &Path) -> Result<Store, DirectoryError> {
        let open_err = |source| DirectoryError::Open {
            path: path.to_path_buf(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut writer = Connection::open_with_flags(path, flags).map_err(open_err)?;
        configure(&writer, WRITER_CACHE_KIB).map_err(open_err)?;
        let mode: String = writer
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            // e.g. a file system that cannot share memory maps: concurrency guarantees would not hold.
            return Err(DirectoryError::Corrupt {
                what: "journal mode",
                reason: format!("SQLite refused WAL mode (got {mode:?})"),
            });
        }
        writer
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_err)?;
        schema::migrate(&mut writer)?;
        Ok(Store {
            path: path.to_path_buf(),
            writer: Mutex::new(writer),
            readers: Mutex::new(ReaderPool {
                idle: Vec::new(),
                open: 0,
            }),
            reader_returned: Condvar::new(),
            bans: Default::default(),
        })
    }

    /// Runs `f` inside one IMMEDIATE transaction on the writer; commits if `f` returns Ok, rolls
    /// back otherwise.
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, DirectoryError>,
    ) -> Result<T, DirectoryError> {
        let mut conn = lock(&self.writer);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(storage("begin write transaction"))?;
        let out = f(&tx)?;
        tx.commit().map_err(storage("commit"))?;
        Ok(out)
    }

    /// Checks out a reader, opening one if fewer than [`MAX_READERS`] exist, else waiting for one.
    pub(crate) fn reader(&self) -> Result<Reader<'_>, DirectoryError> {
        let mut pool = lock(&self.readers);
        loop {
            if let Some(conn) = pool.idle.pop() {
                return Ok(Reader {
                    conn: Some(conn),
                    store: self,
                });
            }
            if pool.open < MAX_READERS {
                pool.open += 1;
                // Open outside the lock: it touches the disk, and other threads may be returning
                // connections meanwhile.
                drop(pool);
                return match self.open_reader() {
                    Ok(conn) => Ok(Reader {
                        conn: Some(conn),
                        store: self,
                    }),
                    Err(e) => {
                        lock(&self.readers).open -= 1;
                        self.reader_returned.notify_one();
                        Err(e)
                    }
                };
            }
            pool = self
                .reader_returned
                .wait(pool)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn open_reader(&self) -> Result<Connection, DirectoryError> {
        let open_err = |source| DirectoryError::Open {
            path: self.path.clone(),
            source,
        };
        // No CREATE: the writer created the file; a reader must never make a fresh empty one.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags).map_err(open_err)?;
        configure(&conn, READER_CACHE_KIB).map_err(open_err)?;
        conn.pragma_update(None, "query_only", true)
            .map_err(open_err)?;
        Ok(conn)
    }
}

/// Settings every connection needs (they are per connection, not stored in the file).
fn configure(conn: &Connection, cache_kib: i64) -> Result<(), rusqlite::Error> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "foreign_keys", true)?;
    // A negative cache_size is in KiB rather than pages.
    conn.pragma_update(None, "cache_size", -cache_kib)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(())
}
