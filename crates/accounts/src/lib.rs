//! Web accounts for Herald's administrators: who may sign in, with what
//! role, for how long, and what they did.
//!
//! - **Accounts** ([`store`]): an address (the identity), an optional argon2id password
//!   ([`password`]) and a site-administrator flag. Members never need one: their own pages work
//!   by mailed links (`/manage`).
//! - **Roles** ([`principal`]): owner or moderator of a list. Owners are granted here (the
//!   `roles` table); moderators are granted here *or* by the list's own `moderators` setting,
//!   which already names who moderates by mail — the web does not ask for them twice.
//! - **Sessions** ([`session`]): a random 256-bit id in the cookie, only its SHA-256 stored;
//!   idle and absolute expiry; a CSRF token derived from the id.
//! - **One-time sign-in links** ([`link`]): random, stored hashed, single use, short-lived.
//! - **Throttling** ([`throttle`]): failed sign-ins per account and per client, mailed links per
//!   address and per client, in memory.
//! - **Audit log** ([`audit`]): every administrative action, bounded by a retention setting;
//!   erased addresses are replaced by a keyed hash.
//!
//! Storage is `<data_dir>/accounts.db` (SQLite, WAL), its own file so its migrations never
//! clash with the directory's; `herald backup` carries it. This crate is a library: the HTTP
//! side (`herald-api`) calls it, from `spawn_blocking` (every method may touch the disk, and
//! password hashing takes tens of milliseconds).
//!
//! SECURITY: addresses come from forms and are checked by `herald_types::Address::parse`
//! before they get here; every secret (session id, link token) is compared as a hash looked up
//! by primary key, and the CSRF token in constant time.

pub mod audit;
mod config;
mod db;
mod error;
pub mod link;
pub mod mail;
pub mod password;
pub mod principal;
pub mod session;
pub mod store;
pub mod throttle;

pub use audit::{AuditEvent, AuditQuery, AuditRow};
pub use config::AccountsConfig;
pub use error::AccountsError;
pub use principal::{Actor, Principal, Role};
pub use store::{Account, LoginOutcome};

use herald_types::Address;
use rusqlite::Connection;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// The canonical text of an address as stored here: its display form in lower case (domains
/// are already A-labels and local parts NFC, `Address::parse` saw to that).
pub fn key(address: &Address) -> String {
    address.to_string().to_lowercase()
}

/// The accounts store; cheap to clone (one connection behind a mutex).
#[derive(Clone)]
pub struct Accounts {
    inner: Arc<Inner>,
}

struct Inner {
    /// A std mutex: every use is synchronous (callers are in `spawn_blocking`), no `.await`
    /// happens under it.
    db: Mutex<Connection>,
    cfg: AccountsConfig,
    throttles: throttle::Throttles,
    audit: audit::Counters,
}

impl Accounts {
    /// Opens (creating and migrating) the store at `path`.
    pub fn open(path: &Path, cfg: AccountsConfig) -> Result<Accounts, AccountsError> {
        let conn = db::open(path)?;
        let throttles = throttle::Throttles::new(&cfg);
        Ok(Accounts {
            inner: Arc::new(Inner {
                db: Mutex::new(conn),
                cfg,
                throttles,
                audit: audit::Counters::default(),
            }),
        })
    }

    pub fn config(&self) -> &AccountsConfig {
        &self.inner.cfg
    }

    /// The connection. A panic while it was held (a bug) leaves SQLite consistent (every
    /// change is a statement or a transaction), so a poisoned lock is taken over.
    fn db(&self) -> MutexGuard<'_, Connection> {
        self.inner
            .db
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A store in a temporary directory (kept alive by the returned guard).
    pub fn store() -> (Accounts, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Accounts::open(&dir.path().join("accounts.db"), AccountsConfig::default())
            .expect("open");
        (a, dir)
    }

    pub fn addr(s: &str) -> Address {
        Address::parse(s).expect("address")
    }
}
