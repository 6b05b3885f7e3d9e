//! The PostgreSQL backend of the directory: the same [`crate::Directory`] API
//! over a database several Herald nodes share.
//!
//! Why a second set of SQL rather than one SQL text for both: the SQLite side is the tuned
//! default (a million-member `add_members` and the fan-out page are measured on it) and stays
//! exactly as it was; the dialects differ in nearly every statement that names an address
//! (SQLite's `COLLATE NOCASE` is a stored `address_key` column here), in ids (`RETURNING`
//! instead of `last_insert_rowid`) and in upserts (`INSERT OR IGNORE/REPLACE`). Each public
//! method of `Directory` picks its backend in one `match`; the checks that do not touch storage
//! (validation, ban patterns, refusal rules) are shared code. The per-table SQL lives in this
//! module's children, one per table group, mirroring the SQLite modules.
//!
//! Connections: a bounded pool ([`PgStore`], at most `max_connections`), a `Mutex<Vec>` with a
//! `Condvar` like the SQLite readers: a handful of long-lived connections needs no pool crate,
//! and the wait for a free one is the same bounded wait. Each connection keeps its prepared
//! statements (`Db::stmt`), so a hot statement is parsed once per connection.
//!
//! A connection on which the store proved unreachable (the server stopped, restarted or the
//! network broke: [`DirectoryError::is_unavailable`]) is discarded, never handed out again; the
//! next checkout opens a new one. So the pool heals by itself once the server is back, and
//! nothing in it waits: a refused connect fails at once (`connect_timeout` bounds a silent
//! network). Those errors are counted ([`PgStore::errors`], `herald_store_errors_total`).
//!
//! Writes: one transaction each, which first takes a transaction-level advisory lock
//! ([`WRITE_LOCK`]). That is SQLite's one-writer rule (`BEGIN IMMEDIATE`) across nodes: a
//! check-then-insert is atomic, and member ids are handed out in commit order, so "members with
//! id <= N" stays the stable recipient snapshot of a post even with several nodes writing.
//! Directory writes are administrative and bounce-rate; reads (the hot paths) take no lock.
//!
//! The blocking `postgres` client runs its own small runtime: it must never be called on a
//! tokio worker thread. The directory's async callers already call it through
//! `spawn_blocking` (its API has always been synchronous).
//!
//! SECURITY: the URL comes from the operator's configuration; its password is never logged
//! (errors name what failed, not the URL). Every value reaches SQL as a bound parameter; the
//! only formatted SQL is fixed text chosen in code. Connections are plain TCP or a Unix socket:
//! TLS to PostgreSQL is not offered yet (use loopback, a Unix socket or a private network).

mod bounces;
mod knowledge;
mod links;
mod lists;
mod members;
mod nodes;
mod person;
mod policy;
mod schema;
mod search;
mod shards;
mod texts;

pub(crate) use members::MemberColumn;
#[cfg(test)]
pub(crate) use schema::SCHEMA_SQL;
pub use schema::{migrate_postgres_up_to, MigrationGuard};

use crate::error::DirectoryError;
use postgres::types::{FromSql, ToSql};
use postgres::{Client, GenericClient, IsolationLevel, NoTls, Row, Statement, Transaction};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// The advisory lock key every directory write transaction takes (`pg_advisory_xact_lock`):
/// "HRLD" "DIR1" as bytes, so it cannot collide with a small number another program picks.
pub(crate) const WRITE_LOCK: i64 = 0x4852_4c44_4449_5231;

/// Default bound of the pool when the configuration does not say.
pub const DEFAULT_MAX_CONNECTIONS: usize = 8;

/// How long connecting may take when the URL does not set `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Prepared statements kept per connection; the directory has fewer distinct statements, so
/// this only bounds a bug.
const MAX_STATEMENTS: usize = 256;

/// `map_err` adapter: `.map_err(pg("insert member"))`.
pub(crate) fn pg(context: &'static str) -> impl FnOnce(postgres::Error) -> DirectoryError {
    move |source| DirectoryError::PgStorage { context, source }
}

/// One pooled connection and its prepared statements.
pub(crate) struct PgConn {
    client: Client,
    stmts: HashMap<String, Statement>,
}

struct Pool {
    idle: Vec<PgConn>,
    /// Connections that exist (idle + checked out); never above `max`.
    open: usize,
}

/// The PostgreSQL store: configuration, the pool, the compiled-ban cache.
pub(crate) struct PgStore {
    config: postgres::Config,
    max: usize,
    pool: Mutex<Pool>,
    returned: Condvar,
    /// Compiled bans and the row generation they were built from (as the SQLite store's).
    pub(crate) bans: crate::patterns::BanCache,
    /// The erasure key (migration 6), read on first use: it never changes.
    pub(crate) erasure_key: OnceLock<Vec<u8>>,
    /// Connects and statements that failed because the store was unreachable, since open.
    errors: AtomicU64,
}

/// A poisoned lock only means another thread panicked holding it; the pool's `Vec` is intact.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Closing a `postgres::Client` blocks on its own runtime, which panics on a tokio worker
/// thread, and the last `Directory` handle is commonly dropped there (the server's stages end
/// inside `async fn`s). So the idle connections are closed on a thread of their own.
impl Drop for PgStore {
    fn drop(&mut self) {
        let idle = std::mem::take(&mut lock(&self.pool).idle);
        if idle.is_empty() {
            return;
        }
        let closer = std::thread::Builder::new()
            .name("herald-pg-close".into())
            .spawn(move || drop(idle));
        if let Err(e) = closer {
            // The connections were dropped with the closure; the server closes them anyway
            // when our process's sockets go.
            tracing::warn!(error = %e, "cannot start a thread to close directory connections");
        }
    }
}

/// A checked-out connection; back to the pool on drop unless it broke.
struct Checked<'a> {
    conn: Option<PgConn>,
    store: &'a PgStore,
    /// Set when a statement on it showed the store unreachable: the driver may not have
    /// noticed the socket is dead yet (`is_closed` is false until it reads the end), and a
    /// connection to a server that restarted is useless.
    broken: bool,
}

impl Checked<'_> {
    /// Marks the connection broken when `out` says the store is unreachable.
    fn judge<T>(&mut self, out: Result<T, DirectoryError>) -> Result<T, DirectoryError> {
        if let Err(e) = &out {
            if e.is_unavailable() {
                self.broken = true;
                self.store.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        out
    }
}

impl Drop for Checked<'_> {
    fn drop(&mut self) {
        let mut pool = lock(&self.store.pool);
        match self.conn.take() {
            Some(c) if !self.broken && !c.client.is_closed() => pool.idle.push(c),
            // A broken connection is dropped; its slot frees for a new one.
            _ => pool.open -= 1,
        }
        self.store.returned.notify_one();
    }
}

impl PgStore {
    /// Parses `url`, connects once and migrates the schema (under an advisory lock, see
    /// `schema`).
    pub(crate) fn open(
        url: &str,
        max: usize,
        guard: &MigrationGuard,
    ) -> Result<PgStore, DirectoryError> {
        let config = parse_url(url)?;
        let store = PgStore {
            config,
            max: max.max(1),
            pool: Mutex::new(Pool {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
            bans: Default::default(),
            erasure_key: OnceLock::new(),
            errors: AtomicU64::new(0),
        };
        {
            let mut c = store.checkout()?;
            let conn = c
                .conn
                .as_mut()
                .unwrap_or_else(|| unreachable!("checked out"));
            schema::migrate(&mut conn.client, guard)?;
        }
        Ok(store)
    }

    /// A connection: an idle one, a new one while fewer than `max` exist, else the next one
    /// returned.
    fn checkout(&self) -> Result<Checked<'_>, DirectoryError> {
        let mut pool = lock(&self.pool);
        loop {
            if let Some(conn) = pool.idle.pop() {
                return Ok(Checked {
                    conn: Some(conn),
                    store: self,
                    broken: false,
                });
            }
            if pool.open < self.max {
                pool.open += 1;
                // Connect outside the lock: it waits on the network.
                drop(pool);
                return match connect(&self.config) {
                    Ok(client) => Ok(Checked {
                        conn: Some(PgConn {
                            client,
                            stmts: HashMap::new(),
                        }),
                        store: self,
                        broken: false,
                    }),
                    Err(source) => {
                        lock(&self.pool).open -= 1;
                        self.errors.fetch_add(1, Ordering::Relaxed);
                        self.returned.notify_one();
                        Err(DirectoryError::PgOpen {
                            what: "connect",
                            source,
                        })
                    }
                };
            }
            pool = self
                .returned
                .wait(pool)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Runs `f` in one write transaction holding [`WRITE_LOCK`]; commits if `f` returns Ok,
    /// rolls back otherwise.
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&mut Db<'_, Transaction<'_>>) -> Result<T, DirectoryError>,
    ) -> Result<T, DirectoryError> {
        self.unlocked_write(|db| {
            db.exec(
                "take the directory write lock",
                "SELECT pg_advisory_xact_lock($1)",
                &[&WRITE_LOCK],
            )?;
            f(db)
        })
    }

    /// Runs `f` in one transaction *without* the directory write lock: for tables no
    /// check-then-insert of the directory touches (the shared fan-out's, `shards`), whose
    /// writers must not queue behind a member import. ([`PgStore::write`] is this with the
    /// lock taken first.)
    pub(crate) fn unlocked_write<T>(
        &self,
        f: impl FnOnce(&mut Db<'_, Transaction<'_>>) -> Result<T, DirectoryError>,
    ) -> Result<T, DirectoryError> {
        let mut checked = self.checkout()?;
        let conn = checked
            .conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("checked out"));
        let out = (|| {
            let mut tx = conn.client.transaction().map_err(pg("begin write"))?;
            let out = f(&mut Db {
                c: &mut tx,
                stmts: &mut conn.stmts,
            })?;
            tx.commit().map_err(pg("commit"))?;
            Ok(out)
        })();
        checked.judge(out)
    }

    /// Runs `f` on a connection outside any transaction: each statement its own snapshot (the
    /// hot reads, as SQLite's reader connections).
    pub(crate) fn read<T>(
        &self,
        f: impl FnOnce(&mut Db<'_, Client>) -> Result<T, DirectoryError>,
    ) -> Result<T, DirectoryError> {
        let mut checked = self.checkout()?;
        let conn = checked
            .conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("checked out"));
        let mut db = Db {
            c: &mut conn.client,
            stmts: &mut conn.stmts,
        };
        let out = f(&mut db);
        checked.judge(out)
    }

    /// Runs `f` in one read-only REPEATABLE READ transaction: several statements, one snapshot
    /// (a person's export).
    pub(crate) fn snapshot<T>(
        &self,
        f: impl FnOnce(&mut Db<'_, Transaction<'_>>) -> Result<T, DirectoryError>,
    ) -> Result<T, DirectoryError> {
        let mut checked = self.checkout()?;
        let conn = checked
            .conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("checked out"));
        let out = (|| {
            let mut tx = conn
                .client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .map_err(pg("begin snapshot"))?;
            let out = f(&mut Db {
                c: &mut tx,
                stmts: &mut conn.stmts,
            })?;
            tx.commit().map_err(pg("end snapshot"))?;
            Ok(out)
        })();
        checked.judge(out)
    }

    /// Connects and statements that failed because the store was unreachable, since open.
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

/// The driver's configuration from a `[store] url`, with Herald's defaults.
fn parse_url(url: &str) -> Result<postgres::Config, DirectoryError> {
    let mut config: postgres::Config =
        url.parse()
            .map_err(|e: postgres::Error| DirectoryError::StoreUrl {
                // The driver's message names the bad part, never the password.
                reason: e.to_string(),
            })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("herald");
    }
    Ok(config)
}

/// Connects once and reads the schema version without changing anything (0: no directory
/// schema yet; `herald serve` creates it). For `herald doctor`.
pub(crate) fn probe(url: &str) -> Result<i64, DirectoryError> {
    let mut client = connect(&parse_url(url)?).map_err(|source| DirectoryError::PgOpen {
        what: "connect",
        source,
    })?;
    let exists: bool = col(
        &client
            .query_one("SELECT to_regclass('directory_schema') IS NOT NULL", &[])
            .map_err(pg("look for the schema"))?,
        0,
    )?;
    if !exists {
        return Ok(0);
    }
    let row = client
        .query_opt("SELECT version FROM directory_schema", &[])
        .map_err(pg("read schema version"))?;
    row.map_or(Ok(0), |r| col(&r, 0))
}

/// Connects and sets what every directory session needs.
///
/// `plan_cache_mode = force_custom_plan`: the statements stay prepared (parsed once per
/// connection), but each execution is planned with its actual values. The fan-out page
/// (`WHERE list_id = $1 AND id > $2 AND id <= $3 … ORDER BY id LIMIT $4`) is the reason: a
/// generic plan cannot know that a range covers the whole list and after five executions
/// PostgreSQL may switch to one that reads every member and sorts them for each page
/// (measured: 40 s instead of 1.3 s to page through 1,000,000 members). Planning such a query
/// costs tens of microseconds.
fn connect(config: &postgres::Config) -> Result<Client, postgres::Error> {
    let mut client = config.connect(NoTls)?;
    client.batch_execute("SET plan_cache_mode = force_custom_plan")?;
    Ok(client)
}

/// A connection (or transaction on it) with its statement cache: every query goes through
/// a prepared statement.
pub(crate) struct Db<'a, C: GenericClient> {
    c: &'a mut C,
    stmts: &'a mut HashMap<String, Statement>,
}

pub(crate) type Params<'p> = [&'p (dyn ToSql + Sync)];

impl<C: GenericClient> Db<'_, C> {
    fn stmt(&mut self, ctx: &'static str, sql: &str) -> Result<Statement, DirectoryError> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.c.prepare(sql).map_err(pg(ctx))?;
        if self.stmts.len() >= MAX_STATEMENTS {
            self.stmts.clear();
        }
        self.stmts.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    /// Runs a statement; the number of rows it changed.
    pub(crate) fn exec(
        &mut self,
        ctx: &'static str,
        sql: &str,
        p: &Params<'_>,
    ) -> Result<u64, DirectoryError> {
        let st = self.stmt(ctx, sql)?;
        self.c.execute(&st, p).map_err(pg(ctx))
    }

    /// At most one row.
    pub(crate) fn opt(
        &mut self,
        ctx: &'static str,
        sql: &str,
        p: &Params<'_>,
    ) -> Result<Option<Row>, DirectoryError> {
        let st = self.stmt(ctx, sql)?;
        self.c.query_opt(&st, p).map_err(pg(ctx))
    }

    /// Exactly one row.
    pub(crate) fn one(
        &mut self,
        ctx: &'static str,
        sql: &str,
        p: &Params<'_>,
    ) -> Result<Row, DirectoryError> {
        let st = self.stmt(ctx, sql)?;
        self.c.query_one(&st, p).map_err(pg(ctx))
    }

    /// Every row.
    pub(crate) fn all(
        &mut self,
        ctx: &'static str,
        sql: &str,
        p: &Params<'_>,
    ) -> Result<Vec<Row>, DirectoryError> {
        let st = self.stmt(ctx, sql)?;
        self.c.query(&st, p).map_err(pg(ctx))
    }
}

/// Column `i` of `row` as `T`; a type that does not match the schema is a typed error, never
/// a panic.
pub(crate) fn col<'r, T: FromSql<'r>>(row: &'r Row, i: usize) -> Result<T, DirectoryError> {
    row.try_get(i).map_err(pg("decode a column"))
}

/// The key addresses are compared by: SQLite's `NOCASE` folds ASCII letters only, and so does
/// PostgreSQL's `lower()` under the "C" collation (`schema`), which computes the stored key.
pub(crate) fn key(address: &str) -> String {
    address.to_ascii_lowercase()
}

/// Unix milliseconds as stored (BIGINT).
pub(crate) fn ms(at: u64) -> i64 {
    i64::try_from(at).unwrap_or(i64::MAX)
}

/// A stored BIGINT of milliseconds back to u64 (a negative value, never written, reads 0).
pub(crate) fn unms(at: i64) -> u64 {
    u64::try_from(at).unwrap_or(0)
}
