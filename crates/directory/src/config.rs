//! The `[store]` section: where the directory lives.
//!
//! `url` absent, empty or `sqlite:` → `herald.db` in the data directory (the embedded default,
//! unchanged; no other SQLite path is offered, because `herald backup`, the upgrade checks and
//! the tools find the directory there); `postgres://user:pass@host:port/db` (or `postgresql://`) → a PostgreSQL database several
//! Herald nodes may share. Anything else is refused when the configuration is checked, naming
//! the key, so a typo never falls back to a local file silently.
//!
//! SECURITY: the URL may carry a password; [`StoreConfig::describe`] is what logs and `herald
//! doctor` show, with the password replaced.

use crate::{Directory, DirectoryError};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The SQLite file's name in the data directory.
pub const SQLITE_FILE: &str = "herald.db";

/// The `[store]` section.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Where the directory lives (see the module doc). Default: SQLite in the data directory.
    pub url: Option<String>,
    /// Most connections a node opens to PostgreSQL (ignored for SQLite).
    pub max_connections: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: None,
            max_connections: crate::pg::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Where a [`StoreConfig`] points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    Sqlite(PathBuf),
    Postgres(String),
}

impl StoreConfig {
    /// Where the directory lives for a server whose data directory is `data_dir`; a URL of an
    /// unknown kind is `InvalidInput { field: "store.url" }`.
    pub fn location(&self, data_dir: &Path) -> Result<StoreLocation, DirectoryError> {
        let url = self.url.as_deref().unwrap_or("").trim();
        if url.is_empty() || url == "sqlite:" {
            return Ok(StoreLocation::Sqlite(data_dir.join(SQLITE_FILE)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            if self.max_connections == 0 {
                return Err(DirectoryError::invalid(
                    "store.max_connections",
                    "must be at least 1",
                ));
            }
            return Ok(StoreLocation::Postgres(url.to_string()));
        }
        Err(DirectoryError::invalid(
            "store.url",
            "expected sqlite: (herald.db in data_dir) or postgres://user:password@host:port/database",
        ))
    }

    /// Opens the directory where it lives (creating and migrating it as needed).
    pub fn open(&self, data_dir: &Path) -> Result<Directory, DirectoryError> {
        self.open_guarded(data_dir, &crate::MigrationGuard::default())
    }

    /// [`StoreConfig::open`] for a cluster node: a shared store is not migrated while nodes
    /// at another schema version are alive by `guard` (a SQLite file is never shared).
    pub fn open_guarded(
        &self,
        data_dir: &Path,
        guard: &crate::MigrationGuard,
    ) -> Result<Directory, DirectoryError> {
        match self.location(data_dir)? {
            StoreLocation::Sqlite(path) => Directory::open(&path),
            StoreLocation::Postgres(url) => {
                Directory::open_postgres_guarded(&url, self.max_connections, guard)
            }
        }
    }

    /// The store as logs may show it: the SQLite path, or the URL without its password.
    pub fn describe(&self, data_dir: &Path) -> String {
        match self.location(data_dir) {
            Ok(StoreLocation::Sqlite(p)) => format!("sqlite:{}", p.display()),
            Ok(StoreLocation::Postgres(url)) => redact(&url),
            Err(e) => e.to_string(),
        }
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some(parts) => parts,
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(url: &str) -> StoreConfig {
        StoreConfig {
            url: Some(url.into()),
            ..Default::default()
        }
    }

    #[test]
    fn urls_pick_the_backend_and_unknown_ones_are_refused() {
        let dir = Path::new("/var/lib/herald");
        assert_eq!(
            StoreConfig::default().location(dir).unwrap(),
            StoreLocation::Sqlite(dir.join("herald.db"))
        );
        assert_eq!(
            cfg("sqlite:").location(dir).unwrap(),
            StoreLocation::Sqlite(dir.join("herald.db"))
        );
        assert_eq!(
            cfg("postgres://h@127.0.0.1:5432/herald")
                .location(dir)
                .unwrap(),
            StoreLocation::Postgres("postgres://h@127.0.0.1:5432/herald".into())
        );
        for bad in [
            "mysql://x@y/z",
            "herald.db",
            "postgres:/x",
            "sqlite:other.db",
            "sqlite:/etc/passwd",
            "\u{0}",
        ] {
            match cfg(bad).location(dir) {
                Err(DirectoryError::InvalidInput { field, .. }) => assert_eq!(field, "store.url"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let zero = StoreConfig {
            url: Some("postgres://h@127.0.0.1/db".into()),
            max_connections: 0,
        };
        assert!(zero.location(dir).is_err());
    }

    #[test]
    fn the_password_never_reaches_the_description() {
        let d = cfg("postgres://herald:s3cret@db.internal:5432/herald").describe(Path::new("/d"));
        assert_eq!(d, "postgres://herald:***@db.internal:5432/herald");
        assert!(!d.contains("s3cret"));
        let d = cfg("postgres://p:a:b@c@host/db").describe(Path::new("/d"));
        assert!(!d.contains("a:b@c"), "{d}");
    }
}
