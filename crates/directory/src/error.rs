//! The directory's one error type.
//!
//! Callers classify errors by variant (or with [`DirectoryError::is_client_error`] /
//! [`DirectoryError::is_not_found`]), never by matching on the text. Variants that describe a bad
//! request (`NoSuchList`, `AlreadyExists`, `AlreadyMember`, `InvalidInput`, `Refused`) are safe to show to
//! an API client; storage variants carry SQLite, PostgreSQL or I/O detail that belongs in the server log, and
//! the HTTP layer should answer them with a generic 500.

use herald_types::{Address, ListId};
use std::path::PathBuf;

/// Everything that can go wrong in the directory.
#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    /// No list has this id or address (the payload is the id or address as given).
    #[error("no such list: {0}")]
    NoSuchList(String),

    /// A list with this address (compared case-insensitively) already exists.
    #[error("a list with address {0} already exists")]
    AlreadyExists(Address),

    /// `add_member` for an address already on the list (compared case-insensitively).
    #[error("{0} is already a member of the list")]
    AlreadyMember(Address),

    /// A value supplied by the caller breaks a limit or a rule; `field` names it so an API can
    /// point at the offending input, `reason` says which rule.
    #[error("invalid {field}: {reason}")]
    InvalidInput { field: &'static str, reason: String },

    /// The database was written by a newer Herald; opening it could corrupt it, so we refuse.
    #[error(
        "database schema version {found} is newer than this Herald supports ({supported}); \
         upgrade Herald or restore a backup"
    )]
    SchemaTooNew { found: i64, supported: i64 },

    /// The shared store is at an older schema than this binary's, and nodes that use it at
    /// that version are alive: migrating it under them could break them.
    #[error(
        "refusing to migrate the shared store from schema {store} to schema {binary} while \
         nodes at another version use it: {nodes}; stop or drain those nodes first (a node \
         counts as gone once it has left, or its heartbeat is older than {window_secs} s), then \
         start this one again"
    )]
    LiveNodesAtOtherSchema {
        store: i64,
        binary: i64,
        nodes: String,
        window_secs: f64,
    },

    /// The database file could not be opened or configured.
    #[error("cannot open directory database {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    /// The `[store] url` does not parse as a PostgreSQL connection string.
    #[error("invalid [store] url: {reason}")]
    StoreUrl { reason: String },

    /// The PostgreSQL server could not be reached or refused the connection.
    #[error("cannot {what} to the PostgreSQL directory: {source}")]
    PgOpen {
        what: &'static str,
        #[source]
        source: postgres::Error,
    },

    /// PostgreSQL failed while doing `context` (e.g. "insert member").
    #[error("directory storage failed ({context}): {source}")]
    PgStorage {
        context: &'static str,
        #[source]
        source: postgres::Error,
    },

    /// SQLite failed while doing `context` (e.g. "insert member").
    #[error("directory storage failed ({context}): {source}")]
    Storage {
        context: &'static str,
        #[source]
        source: rusqlite::Error,
    },

    /// A stored value does not decode (bad JSON, invalid address): the file was edited by hand
    /// or damaged. `what` names the column.
    #[error("corrupt directory data in {what}: {reason}")]
    Corrupt { what: &'static str, reason: String },

    /// The address may not be added (or re-enabled): it is suppressed or banned.
    /// Safe to show: it names the ban's pattern or the suppression's source and reason.
    #[error("{address} cannot be added: {why}")]
    Refused {
        address: Address,
        why: Box<crate::refusal::Refusal>,
    },

    /// Reading an import stream failed (not a per-row problem: the stream itself broke).
    #[error("cannot read import input: {source}")]
    Read {
        #[source]
        source: std::io::Error,
    },
}

impl DirectoryError {
    /// True when the request itself was wrong (the HTTP API answers 4xx); false for storage and
    /// corruption problems (5xx, logged).
    pub fn is_client_error(&self) -> bool {
        matches!(
            self,
            DirectoryError::NoSuchList(_)
                | DirectoryError::AlreadyExists(_)
                | DirectoryError::AlreadyMember(_)
                | DirectoryError::InvalidInput { .. }
                | DirectoryError::Refused { .. }
        )
    }

    /// True when the store could not be reached or dropped the connection (PostgreSQL down,
    /// restarting or unreachable): the request was not wrong and may succeed later. Callers
    /// retry with backoff (fan-out, shard loops) or answer "unavailable" (HTTP 503, SMTP 4xx);
    /// the pool discards the connection it happened on.
    pub fn is_unavailable(&self) -> bool {
        match self {
            DirectoryError::PgOpen { source, .. } => {
                pg_unreachable(source) || source.as_db_error().is_none()
            }
            DirectoryError::PgStorage { source, .. } => pg_unreachable(source),
            _ => false,
        }
    }

    /// True when the error means "the list does not exist".
    pub fn is_not_found(&self) -> bool {
        matches!(self, DirectoryError::NoSuchList(_))
    }

    /// True for conflicts with existing data (HTTP 409).
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            DirectoryError::AlreadyExists(_) | DirectoryError::AlreadyMember(_)
        )
    }

    pub(crate) fn no_such_list(list: ListId) -> DirectoryError {
        DirectoryError::NoSuchList(list.to_string())
    }

    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> DirectoryError {
        DirectoryError::InvalidInput {
            field,
            reason: reason.into(),
        }
    }
}

/// Whether a PostgreSQL error means the server or the connection is gone, rather than a
/// statement that failed: the connection closed or broke (I/O), or the server said it is
/// shutting down, crashed, or not accepting connections yet (SQLSTATE class 08, and 57P01–03).
pub(crate) fn pg_unreachable(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
    }
    // Neither a server's answer nor a closed connection: an I/O error or a timeout on the
    // socket (the driver's other kinds — a bad parameter, a decoding error — carry no I/O
    // source).
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// `map_err` adapter: `.map_err(storage("insert member"))`.
pub(crate) fn storage(context: &'static str) -> impl FnOnce(rusqlite::Error) -> DirectoryError {
    move |source| DirectoryError::Storage { context, source }
}
