//! The directory's store test suite runs on both backends: each test written once
//! once as `fn name(kind: Kind)` and listed in [`both!`] becomes `<name>::sqlite` and `<name>::postgres`. PostgreSQL is a real server
//! started by this test binary (`herald-pg-harness`), one fresh database per test; when it
//! cannot start, the `postgres` tests fail with the reason (never skipped).

#![allow(dead_code, clippy::unwrap_used)]

use herald_directory::Directory;
use std::path::PathBuf;

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A fresh, empty store of one kind; [`Store::open`] may be called again (a restart, a second
/// process) and sees the same data.
pub struct Store {
    pub kind: Kind,
    target: Target,
    _tmp: tempfile::TempDir,
}

enum Target {
    File(PathBuf),
    Url(String),
}

impl Store {
    pub fn fresh(kind: Kind) -> Store {
        let tmp = tempfile::tempdir().unwrap();
        let target = match kind {
            Kind::Sqlite => Target::File(tmp.path().join("directory.db")),
            Kind::Postgres => Target::Url(
                herald_pg_harness::PgServer::shared()
                    .fresh_database()
                    .unwrap(),
            ),
        };
        Store {
            kind,
            target,
            _tmp: tmp,
        }
    }

    pub fn open(&self) -> Directory {
        self.try_open().unwrap()
    }

    pub fn try_open(&self) -> Result<Directory, herald_directory::DirectoryError> {
        match &self.target {
            Target::File(p) => Directory::open(p),
            Target::Url(u) => Directory::open_postgres(u, 4),
        }
    }

    /// The SQLite file, for tests that inspect or damage it.
    pub fn path(&self) -> Option<&std::path::Path> {
        match &self.target {
            Target::File(p) => Some(p),
            Target::Url(_) => None,
        }
    }

    /// The PostgreSQL URL, for tests that inspect the database directly.
    pub fn url(&self) -> Option<&str> {
        match &self.target {
            Target::File(_) => None,
            Target::Url(u) => Some(u),
        }
    }

    /// A direct SQL connection to the PostgreSQL database (tests only).
    pub fn pg_client(&self) -> postgres::Client {
        postgres::Client::connect(self.url().unwrap(), postgres::NoTls).unwrap()
    }
}

/// `both!(a, b, #[ignore] c)`: for each test function `fn a(kind: Kind)`, a module `a` with
/// the tests `a::sqlite` and `a::postgres`. The bodies stay ordinary functions (rustfmt and
/// clippy see them); attributes given before a name go on both of its tests.
#[macro_export]
macro_rules! both {
    ($($(#[$meta:meta])* $name:ident),* $(,)?) => {
        $(
            mod $name {
                $(#[$meta])*
                #[test]
                fn sqlite() {
                    super::$name($crate::common::Kind::Sqlite)
                }
                $(#[$meta])*
                #[test]
                fn postgres() {
                    super::$name($crate::common::Kind::Postgres)
                }
            }
        )*
    };
}
