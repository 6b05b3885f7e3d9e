//! Herald's storage plumbing: how a database file is opened, configured and migrated, written
//! once for every store that keeps one.
//!
//! Each stage still owns its tables and the SQL over them; this crate owns what is the same for
//! all of them — the connection, the pragmas, the schema version and the refusal of a file
//! written by a newer Herald. Engines sit side by side as modules (`sqlite` today), as in
//! Stalwart's `store/src/backend/`.

pub mod sqlite;

pub use sqlite::{
    open_versioned, Migrate, Migration, OpenError, Synchronous, Versioned, RESTORE_BACKUP,
};
