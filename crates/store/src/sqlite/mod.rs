//! SQLite: the engine behind every file in Herald's data directory (and the directory store
//! when no PostgreSQL is configured).

mod versioned;

pub use versioned::{
    open_versioned, Migrate, Migration, OpenError, Synchronous, Versioned, RESTORE_BACKUP,
};
