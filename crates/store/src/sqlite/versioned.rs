//! [`open_versioned`]: open one SQLite file, refuse it if a newer Herald wrote it, set the
//! pragmas its owner asks for and bring its schema up to date — the sequence every file in
//! the data directory (accounts, archive, statistics, digests, TLS reports) needs, written once.
//!
//! The schema version is SQLite's `PRAGMA user_version`, a header field. It is read before
//! anything is written, so a file from a newer Herald is refused untouched (not even the
//! journal mode changes) with a message that says what to do. The migration and the new
//! version are written in one transaction, so a crash leaves the old schema or the new one.
//!
//! SECURITY: the files are Herald's own; a damaged or foreign file is an error, never a panic.

use rusqlite::{Connection, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the refusal of a too-new file suggests besides upgrading Herald, for a file that holds
/// state worth keeping.
pub const RESTORE_BACKUP: &str = "restore a backup taken by this version";

/// `PRAGMA synchronous`: how much a commit waits for the disk. Each file chooses by what a
/// lost last moment would cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// No fsync: a crash may lose recent commits (and, on power loss, more).
    Off,
    /// With WAL: a power loss may lose the last commits, never the database.
    Normal,
    /// A commit is on disk when it returns.
    Full,
}

impl Synchronous {
    fn word(self) -> &'static str {
        match self {
            Synchronous::Off => "OFF",
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// Migrates a schema from the version found (the argument) to the owner's version, inside the
/// open's transaction, on every open: numbered steps skip what `found` already has.
pub type Migrate<'a> = &'a dyn Fn(&Transaction<'_>, i64) -> rusqlite::Result<()>;

/// How a file's schema is brought up to date.
pub enum Migration<'a> {
    /// One batch of `CREATE … IF NOT EXISTS` statements, run on every open: safe to repeat,
    /// and a table added to it later reaches files already stamped with the version.
    Schema(&'static str),
    /// Numbered steps ([`Migrate`]).
    Steps(Migrate<'a>),
}

/// One file's needs: its name in messages, its schema version, its pragmas and its migration.
pub struct Versioned<'a> {
    /// How messages name the file, e.g. "archive database" (the path follows).
    pub what: &'static str,
    /// The schema version this build writes and reads; a file at a higher one is refused.
    pub version: i64,
    /// What a refusal suggests besides upgrading Herald ([`RESTORE_BACKUP`] for state worth
    /// keeping).
    pub remedy: &'static str,
    pub synchronous: Synchronous,
    /// How long a statement waits for another connection's lock before failing.
    pub busy_timeout: Duration,
    /// `PRAGMA foreign_keys = ON` (per connection in SQLite).
    pub foreign_keys: bool,
    pub migration: Migration<'a>,
}

impl<'a> Versioned<'a> {
    /// A file whose schema is one idempotent batch ([`Migration::Schema`]), with the defaults
    /// of [`Versioned::steps`].
    pub fn schema(what: &'static str, version: i64, sql: &'static str) -> Versioned<'a> {
        Versioned::with(what, version, Migration::Schema(sql))
    }

    /// A file migrated by numbered steps. Defaults for state worth a backup: commits on disk
    /// when they return ([`Synchronous::Full`]), a 5-second busy timeout, no foreign keys
    /// asked for.
    pub fn steps(what: &'static str, version: i64, migrate: Migrate<'a>) -> Versioned<'a> {
        Versioned::with(what, version, Migration::Steps(migrate))
    }

    fn with(what: &'static str, version: i64, migration: Migration<'a>) -> Versioned<'a> {
        Versioned {
            what,
            version,
            remedy: RESTORE_BACKUP,
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            foreign_keys: false,
            migration,
        }
    }

    pub fn synchronous(mut self, s: Synchronous) -> Self {
        self.synchronous = s;
        self
    }

    pub fn busy_timeout(mut self, d: Duration) -> Self {
        self.busy_timeout = d;
        self
    }

    pub fn remedy(mut self, r: &'static str) -> Self {
        self.remedy = r;
        self
    }

    pub fn foreign_keys(mut self) -> Self {
        self.foreign_keys = true;
        self
    }
}

/// Why a file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{what} {}: {source}", .path.display())]
    Sql {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "{what} {} has schema version {found}, written by a newer Herald; this one reads up to \
         {supported}: upgrade Herald or {remedy}",
        .path.display()
    )]
    TooNew {
        what: &'static str,
        path: PathBuf,
        found: i64,
        supported: i64,
        remedy: &'static str,
    },
}

/// Opens (creating) the SQLite file at `path` in WAL mode as `spec` says, and migrates it.
pub fn open_versioned(path: &Path, spec: &Versioned<'_>) -> Result<Connection, OpenError> {
    let sql = |source| OpenError::Sql {
        what: spec.what,
        path: path.to_path_buf(),
        source,
    };
    let mut conn = Connection::open(path).map_err(sql)?;
    // The version first: a file from a newer Herald is refused before anything is written.
    let found = user_version(&conn).map_err(sql)?;
    refuse_newer(path, spec, found)?;
    conn.busy_timeout(spec.busy_timeout).map_err(sql)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(sql)?;
    conn.pragma_update(None, "synchronous", spec.synchronous.word())
        .map_err(sql)?;
    if spec.foreign_keys {
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sql)?;
    }
    migrate(&mut conn, path, spec, found)?;
    Ok(conn)
}

/// Runs the owner's migration and records the version in one transaction. An old file takes
/// the write lock at once (IMMEDIATE) and reads its version again under it, so two processes
/// opening a fresh file together do not both migrate it; an up-to-date file opens without
/// waiting for a writer.
fn migrate(
    conn: &mut Connection,
    path: &Path,
    spec: &Versioned<'_>,
    seen: i64,
) -> Result<(), OpenError> {
    let sql = |source| OpenError::Sql {
        what: spec.what,
        path: path.to_path_buf(),
        source,
    };
    let behavior = if seen < spec.version {
        TransactionBehavior::Immediate
    } else {
        TransactionBehavior::Deferred
    };
    let tx = conn.transaction_with_behavior(behavior).map_err(sql)?;
    let found = user_version(&tx).map_err(sql)?;
    refuse_newer(path, spec, found)?;
    match &spec.migration {
        Migration::Schema(batch) => tx.execute_batch(batch),
        Migration::Steps(steps) => steps(&tx, found),
    }
    .map_err(sql)?;
    if found < spec.version {
        tx.pragma_update(None, "user_version", spec.version)
            .map_err(sql)?;
        tracing::info!(file = %path.display(), from = found, to = spec.version, "{} migrated", spec.what);
    }
    tx.commit().map_err(sql)
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

fn refuse_newer(path: &Path, spec: &Versioned<'_>, found: i64) -> Result<(), OpenError> {
    if found > spec.version {
        return Err(OpenError::TooNew {
            what: spec.what,
            path: path.to_path_buf(),
            found,
            supported: spec.version,
            remedy: spec.remedy,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS t (x INTEGER);";

    fn spec<'a>(version: i64, migrate: Migrate<'a>) -> Versioned<'a> {
        Versioned::steps("test database", version, migrate).foreign_keys()
    }

    #[test]
    fn a_fresh_file_is_migrated_and_stamped_with_the_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let seen = Cell::new(None);
        let run = |tx: &Transaction<'_>, found: i64| {
            seen.set(Some(found));
            tx.execute_batch(SCHEMA)
        };
        let conn = open_versioned(&path, &spec(3, &run)).expect("open");
        assert_eq!(seen.get(), Some(0));
        assert_eq!(user_version(&conn).expect("version"), 3);
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .expect("mode");
        assert_eq!(mode, "wal");
        let fk: i64 = conn
            .pragma_query_value(None, "foreign_keys", |r| r.get(0))
            .expect("fk");
        assert_eq!(fk, 1);
        drop(conn);
        // Reopened: the migration sees the version it left.
        open_versioned(&path, &spec(3, &run)).expect("reopen");
        assert_eq!(seen.get(), Some(3));
    }

    #[test]
    fn an_idempotent_schema_runs_on_every_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let spec = Versioned::schema("test database", 1, SCHEMA);
        drop(open_versioned(&path, &spec).expect("open"));
        {
            let conn = Connection::open(&path).expect("reopen");
            conn.execute_batch("DROP TABLE t").expect("drop");
        }
        let conn = open_versioned(&path, &spec).expect("open again");
        conn.execute("INSERT INTO t VALUES (1)", [])
            .expect("the table is back");
        assert_eq!(user_version(&conn).expect("version"), 1);
    }

    #[test]
    fn a_file_from_a_newer_herald_is_refused_untouched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        {
            let conn = Connection::open(&path).expect("create");
            conn.pragma_update(None, "user_version", 9).expect("set");
        }
        let ran = Cell::new(false);
        let run = |_: &Transaction<'_>, _: i64| {
            ran.set(true);
            Ok(())
        };
        let err = open_versioned(&path, &spec(2, &run)).expect_err("refused");
        assert!(matches!(
            err,
            OpenError::TooNew {
                found: 9,
                supported: 2,
                ..
            }
        ));
        let text = err.to_string();
        assert!(text.contains("newer Herald") && text.contains("upgrade Herald"));
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(!ran.get(), "nothing may run on a newer file");
        let conn = Connection::open(&path).expect("reopen");
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .expect("mode");
        assert_eq!(mode, "delete", "the journal mode was not changed");
    }

    #[test]
    fn a_failed_migration_leaves_the_old_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let bad = |tx: &Transaction<'_>, _: i64| {
            tx.execute_batch("CREATE TABLE a (x INTEGER); THIS IS NOT SQL;")
        };
        assert!(matches!(
            open_versioned(&path, &spec(1, &bad)),
            Err(OpenError::Sql { .. })
        ));
        let conn = Connection::open(&path).expect("reopen");
        assert_eq!(user_version(&conn).expect("version"), 0);
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'a'",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(tables, 0, "the half migration was rolled back");
    }
}
