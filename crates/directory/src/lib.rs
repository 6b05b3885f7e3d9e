//! herald-directory: lists and their members, stored in embedded SQLite (WAL mode, the
//! default) or in a PostgreSQL database several Herald nodes share (`[store] url`,
//! see `pg`). Both backends serve the same API and pass the same test suite.
//!
//! Place in the flow: inbound asks whether an address is a list and whether a sender may post
//! ([`Directory::list_by_address`], [`Directory::posting_state`]); the spool records
//! [`Directory::max_member_id`] when a post is accepted; fan-out expands recipients with
//! [`Directory::delivery_page`] (the members of one delivery mode); the HTTP API and CLI manage lists and members and import CSV
//! files ([`Directory::import_csv`]); bounce handling disables members
//! ([`Directory::set_member_status`]). Bans and the suppression list (`bans`, `suppression`)
//! are enforced here, on every path that adds or re-enables a member.
//!
//! The API is synchronous (rusqlite); async callers use `tokio::task::spawn_blocking`.
//! [`Directory`] is a cheap `Clone` handle, `Send + Sync`, usable from many threads at once: reads
//! use a small pool of connections and run concurrently with the single writer (see `store`).
//!
//! Invariants (see `schema` for how they are enforced):
//! - member ids only grow and are never reused, so "enabled members with id <= N" is the stable
//!   recipient snapshot of a post;
//! - addresses are unique per list, case-insensitively; re-adding one updates it and keeps its id;
//! - list ids are never reused; deleting a list deletes its members.
//!
//! SECURITY: addresses arrive as validated [`herald_types::Address`] values, except in CSV import,
//! which parses untrusted text (see `import`). Names, fields, disabled reasons and list texts that
//! later reach headers are refused if they carry control characters (no CR/LF injection).

/// The backend of a [`Directory`] method: evaluates to the SQLite store, or returns from the
/// method with `$e`, the PostgreSQL side of the same operation (`pg` names the `PgStore`).
macro_rules! sqlite_or {
    ($d:expr, $pg:ident => $e:expr) => {
        match $d.backend() {
            crate::Backend::Sqlite(store) => store,
            crate::Backend::Postgres($pg) => return $e,
        }
    };
}

mod bans;
mod bounces;
mod bulk;
mod config;
mod consent;
mod csvline;
mod delivery;
mod error;
mod import;
mod knowledge;
mod links;
mod lists;
mod members;
mod model;
mod moderation;
mod nodes;
mod patterns;
mod person;
mod pg;
mod refusal;
mod schema;
mod search;
mod shards;
mod store;
mod suppression;
mod texts;

pub use bans::{normalize_ban_pattern, Ban, MAX_BANS, MAX_BAN_PATTERN_CHARS, REGEX_SIZE_LIMIT};
pub use bounces::{
    cap as cap_bounce_text, BounceApplied, BounceEvent, BounceScore, NewBounce, ScoreInput,
    ScoreRule, Scored, DAY_MS, MAX_BOUNCE_LISTING, MAX_EVENTS_PER_ADDRESS, MAX_REPUTATION_EVENTS,
};
pub use bulk::{
    ban_pattern_matches, member_problem, BanPatterns, ImportMember, ImportOutcome, MemberOptions,
    MAX_IMPORT_BATCH,
};
pub use config::{StoreConfig, StoreLocation, SQLITE_FILE};
pub use consent::{Consent, ConsentSource, MAX_CLIENT_CHARS};
pub use error::DirectoryError;
pub use import::{IMPORT_BATCH_ROWS, MAX_LINE_BYTES, MAX_REPORTED_REJECTS};
pub use knowledge::{
    DedupClaim, DownHost, KnowledgeIn, KnowledgeOut, KnowledgeWindows, LoweredRate, ProviderRow,
    SeenPost, Sending, MAX_KNOWLEDGE_ROWS, MAX_KNOWLEDGE_TEXT,
};
pub use links::LinkKind;
pub use lists::{MAX_FOOTER_BYTES, MAX_LIST_NAME_CHARS, MAX_MODERATORS, MAX_SUBJECT_PREFIX_CHARS};
pub use members::{MAX_PAGE_LIMIT, MAX_REASON_CHARS};
pub use model::{
    ImportReport, MemberCounts, NewMember, RejectedRow, MAX_FIELDS, MAX_FIELD_NAME_CHARS,
    MAX_FIELD_VALUE_CHARS, MAX_NAME_CHARS,
};
pub use moderation::PostingState;
pub use nodes::{
    check_node, NewNode, NodeRecord, NodeState, NodeTable, MAX_NODES, MAX_NODE_ADDRESS_CHARS,
    MAX_NODE_ID_CHARS,
};
pub use person::{BounceRecord, Erased, MembershipRecord, PersonRecord, ScoreRecord};
pub use pg::{migrate_postgres_up_to, MigrationGuard};
pub use schema::SCHEMA_VERSION;
pub use search::{FoundMember, SearchBy, MAX_SEARCH_PAGE, MAX_SEARCH_PREFIX_CHARS};
pub use shards::{
    ClaimedShard, ClusterPostRow, NewClusterPost, ShardCounts, ShardKey, ShardNext, ShardReport,
    MAX_DONE_BYTES, MAX_SHARDS_PER_POST,
};
pub use suppression::{
    Refusal, Suppressed, Suppression, SuppressionSource, MAX_SUPPRESSION_LISTING,
};
pub use texts::ListText;

use std::path::Path;
use std::sync::Arc;

pub use pg::DEFAULT_MAX_CONNECTIONS;

/// Handle to the lists-and-members database. Clones share the same connections.
#[derive(Clone)]
pub struct Directory {
    backend: Arc<Backend>,
}

/// The kind of store a [`Directory`] uses (what a backup or `herald doctor` must know).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// A file in the data directory, copied by `herald backup`.
    Sqlite,
    /// A PostgreSQL database, possibly shared by several nodes; backed up with its own tools.
    Postgres,
}

impl StoreKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgresql",
        }
    }
}

/// Where the directory lives. Each public method matches on it once (`sqlite_or!`).
pub(crate) enum Backend {
    /// The embedded default: one file in the data directory.
    Sqlite(store::Store),
    /// A shared PostgreSQL database.
    Postgres(pg::PgStore),
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory").finish_non_exhaustive()
    }
}

impl Directory {
    /// Opens the database at `path`, creating it if absent, and migrates it to
    /// [`SCHEMA_VERSION`]. Fails with [`DirectoryError::SchemaTooNew`] for a database written by a
    /// newer Herald.
    pub fn open(path: &Path) -> Result<Directory, DirectoryError> {
        let store = store::Store::open(path)?;
        tracing::debug!(path = %path.display(), "directory opened");
        Ok(Directory {
            backend: Arc::new(Backend::Sqlite(store)),
        })
    }

    /// Opens the directory in the PostgreSQL database at `url` (`postgres://user:pass@host:port/db`
    /// or the key=value form), with at most `max_connections` connections, and migrates it to
    /// [`SCHEMA_VERSION`] under an advisory lock (nodes starting together apply it once).
    /// Fails with [`DirectoryError::StoreUrl`] for a URL that does not parse,
    /// [`DirectoryError::PgOpen`] when the server cannot be reached, and
    /// [`DirectoryError::SchemaTooNew`] as [`Directory::open`] does.
    pub fn open_postgres(url: &str, max_connections: usize) -> Result<Directory, DirectoryError> {
        Directory::open_postgres_guarded(url, max_connections, &MigrationGuard::default())
    }

    /// [`Directory::open_postgres`] for a node of a cluster: a migration the store needs is
    /// refused with [`DirectoryError::LiveNodesAtOtherSchema`] while nodes at another schema
    /// version are alive by `guard`'s window (other than `guard.node_id` itself).
    pub fn open_postgres_guarded(
        url: &str,
        max_connections: usize,
        guard: &MigrationGuard,
    ) -> Result<Directory, DirectoryError> {
        let store = pg::PgStore::open(url, max_connections, guard)?;
        tracing::debug!("directory opened on postgresql");
        Ok(Directory {
            backend: Arc::new(Backend::Postgres(store)),
        })
    }

    /// Connects to the PostgreSQL database at `url` once and returns its directory schema
    /// version (0 when it has none yet), changing nothing: `herald doctor`'s store check.
    pub fn probe_postgres(url: &str) -> Result<i64, DirectoryError> {
        pg::probe(url)
    }

    /// Which backend this handle uses.
    pub fn store_kind(&self) -> StoreKind {
        match self.backend() {
            Backend::Sqlite(_) => StoreKind::Sqlite,
            Backend::Postgres(_) => StoreKind::Postgres,
        }
    }

    /// Connects and statements that failed because the store was unreachable
    /// ([`DirectoryError::is_unavailable`]) since it was opened: `herald_store_errors_total`.
    /// Always 0 on SQLite (a local file is never unreachable; its errors are storage errors).
    pub fn store_errors(&self) -> u64 {
        match self.backend() {
            Backend::Sqlite(_) => 0,
            Backend::Postgres(pg) => pg.errors(),
        }
    }

    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `t` on a fresh SQLite file, then on a fresh PostgreSQL database (the test
    /// binary's own server, `herald-pg-harness`): the unit tests that touch storage run on both.
    pub(crate) fn on_both(t: impl Fn(Directory)) {
        let tmp = tempfile::tempdir().expect("tempdir");
        t(Directory::open(&tmp.path().join("d.db")).expect("sqlite"));
        let url = herald_pg_harness::PgServer::shared()
            .fresh_database()
            .expect("database");
        t(Directory::open_postgres(&url, 2).expect("postgresql"));
    }

    #[test]
    fn directory_is_clone_send_sync() {
        fn assert_traits<T: Clone + Send + Sync + 'static>() {}
        assert_traits::<Directory>();
    }
}
