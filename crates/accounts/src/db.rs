//! `accounts.db`: its schema and migrations (SQLite `user_version`), kept apart from the
//! directory's database so the two number their migrations independently (the directory is
//! also the part that may move to PostgreSQL; accounts stay on the node that serves HTTP).
//!
//! Addresses are stored in their canonical text ([`crate::key`]: `Address` display, lower
//! case), so `Ann@X.test` and `ann@x.test` are one account.

use crate::error::AccountsError;
use herald_store::{open_versioned, Synchronous, Versioned};
use rusqlite::{Connection, Transaction};
use std::path::Path;

/// The schema this code writes.
pub const VERSION: i64 = 1;

const V1: &str = "
CREATE TABLE accounts (
    address     TEXT PRIMARY KEY,
    password    TEXT,                 -- argon2id PHC string; NULL: sign-in by mailed link only
    site_admin  INTEGER NOT NULL DEFAULT 0,
    created_ms  INTEGER NOT NULL
);
CREATE TABLE roles (
    address TEXT NOT NULL REFERENCES accounts(address) ON DELETE CASCADE,
    list    TEXT NOT NULL,            -- the list's address, canonical text
    role    TEXT NOT NULL CHECK (role IN ('owner', 'moderator')),
    PRIMARY KEY (address, list)
);
CREATE INDEX roles_by_list ON roles(list);
CREATE TABLE sessions (
    id_hash    BLOB PRIMARY KEY,      -- SHA-256 of the cookie value; the value is never stored
    address    TEXT,                  -- NULL: signed in with the admin token
    token_hash BLOB,                  -- then: SHA-256 of that token (a new token ends the session)
    created_ms INTEGER NOT NULL,
    seen_ms    INTEGER NOT NULL,
    client     TEXT
);
CREATE INDEX sessions_by_address ON sessions(address);
CREATE TABLE login_links (
    hash       BLOB PRIMARY KEY,      -- SHA-256 of the token in the mailed link
    address    TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE TABLE audit (
    id      INTEGER PRIMARY KEY,
    at_ms   INTEGER NOT NULL,
    actor   TEXT NOT NULL,
    client  TEXT,
    action  TEXT NOT NULL,
    list    TEXT,
    target  TEXT,
    outcome TEXT NOT NULL
);
CREATE INDEX audit_by_time ON audit(at_ms);
CREATE INDEX audit_by_list ON audit(list, at_ms);
CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
";

/// Opens (creating) and migrates the database.
pub fn open(path: &Path) -> Result<Connection, AccountsError> {
    let spec = Versioned::steps("accounts database", VERSION, &migrate)
        // A session touch or an audit row is not worth an fsync each; WAL with NORMAL loses
        // at most the last moments on power loss, never the database.
        .synchronous(Synchronous::Normal)
        .foreign_keys();
    Ok(open_versioned(path, &spec)?)
}

/// The numbered steps from the version found; each runs once, in the open's transaction.
fn migrate(tx: &Transaction<'_>, found: i64) -> rusqlite::Result<()> {
    if found < 1 {
        tx.execute_batch(V1)?;
        // The key that turns erased addresses in the audit log into hashes.
        let key: [u8; 32] = rand::random();
        tx.execute(
            "INSERT INTO meta (name, value) VALUES ('erasure_key', ?1)",
            [&key[..]],
        )?;
    }
    Ok(())
}
