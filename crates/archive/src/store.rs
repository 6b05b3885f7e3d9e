//! The archive database: one SQLite file (WAL) holding every archived message of every list.
//!
//! - `messages`: one row per (list, Message-ID), the body deflate-compressed in a BLOB, with the
//!   overview columns listings and threads read (month, date, thread, subject, sender). Pages
//!   read through the indexes below with LIMIT, never the whole table.
//! - `fts`: an FTS5 index (contentless: the text lives only in the compressed bodies, so the
//!   index stays a fraction of the archive; `contentless_delete` lets a removal drop its row).
//! - `tombstones`: Message-IDs an administrator removed, so neither the server nor a re-import
//!   stores them again.
//! - `privacy`: per-list archive visibility.
//!
//! Durability: `synchronous=FULL` per transaction and the writer commits a batch per
//! transaction (group commit, [`crate::stage`]).
//!
//! SECURITY: stores untrusted messages as bytes; every SQL statement is parameterized; a search
//! query is turned into quoted FTS5 phrases, so its syntax cannot reach FTS5's query language.
//!
//! Where things are: this file holds the schema, the types and the per-list settings
//! (privacy, address display); `write` stores, threads, removes and reindexes; `read` the
//! listings and pages; `search` full-text search; `body` the compressed bodies.

mod body;
mod read;
mod search;
mod write;

pub(crate) use body::inflate;
pub(crate) use read::summary;
pub use search::{SearchOrder, SearchPage};

use crate::parse::{Limits, Refused};
use crate::ArchiveError;
use herald_store::{open_versioned, Versioned};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;

/// Who may read a list's archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Privacy {
    /// Anybody, on the web; copies carry `Archived-At`.
    Public,
    /// Members only (a signed link until web sessions exist; administrators meanwhile).
    Members,
    /// Administrators only. The default: history is kept from the first post, nothing is
    /// published until an administrator decides to (an archive not kept cannot be made later;
    /// one published by mistake cannot be unpublished).
    #[default]
    Private,
    /// Nothing is archived.
    None,
}

impl Privacy {
    pub fn as_str(self) -> &'static str {
        match self {
            Privacy::Public => "public",
            Privacy::Members => "members",
            Privacy::Private => "private",
            Privacy::None => "none",
        }
    }
}

impl std::str::FromStr for Privacy {
    type Err = ArchiveError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "public" => Ok(Privacy::Public),
            "members" => Ok(Privacy::Members),
            "private" => Ok(Privacy::Private),
            "none" => Ok(Privacy::None),
            other => Err(ArchiveError::BadPrivacy(other.to_string())),
        }
    }
}

/// One message to archive.
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// The list address, lowercase.
    pub list: String,
    pub raw: Vec<u8>,
    /// Used as the date when the message has no readable Date (and for its month).
    pub received_ms: i64,
}

/// What became of one [`NewMessage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    Added {
        id: i64,
        message_id: String,
    },
    /// Already archived under this Message-ID (a re-delivery or a second import).
    Duplicate {
        message_id: String,
    },
    Refused(Refused),
}

/// Which messages an mbox download takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Month { year: i32, month: u8 },
    Thread(i64),
}

impl Scope {
    /// The indexed column that selects the scope, and its value.
    fn column(self) -> (&'static str, rusqlite::types::Value) {
        match self {
            Scope::Month { year, month } => (
                "month",
                rusqlite::types::Value::Text(month_key(year, month)),
            ),
            Scope::Thread(id) => ("thread_id", rusqlite::types::Value::Integer(id)),
        }
    }
}

/// Search filters (all optional): the sender contains `from` (any case); the date is in
/// `[since_ms, until_ms)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    pub from: Option<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
}

/// A row of a listing (no body).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MessageSummary {
    pub id: i64,
    pub list: String,
    pub message_id: String,
    pub date_ms: i64,
    pub thread_id: i64,
    pub subject: String,
    pub from: String,
    pub size: i64,
}

/// One message with its bytes.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub summary: MessageSummary,
    pub raw: Vec<u8>,
}

/// A month of a list with its message count.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Month {
    pub year: i32,
    pub month: u8,
    pub count: i64,
}

/// Totals for `ls` and metrics.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ListTotals {
    pub list: String,
    pub privacy: Privacy,
    pub messages: i64,
    pub raw_bytes: i64,
    pub stored_bytes: i64,
}

/// The archive's schema version (SQLite `user_version`). 1 is the schema below; Herald 0.1.0
/// wrote the same tables without setting a version (0), so 0 is read as 1. A later change adds
/// its step in [`Archive::open`] and bumps this.
pub const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    list TEXT NOT NULL,
    message_id TEXT NOT NULL,
    date_ms INTEGER NOT NULL,
    month TEXT NOT NULL,
    thread_id INTEGER NOT NULL DEFAULT 0,
    parent TEXT,
    base_subject TEXT NOT NULL,
    subject TEXT NOT NULL,
    sender TEXT NOT NULL,
    size INTEGER NOT NULL,
    body BLOB NOT NULL,
    UNIQUE (list, message_id)
);
CREATE INDEX IF NOT EXISTS messages_month ON messages (list, month, date_ms);
CREATE INDEX IF NOT EXISTS messages_date ON messages (list, date_ms);
CREATE INDEX IF NOT EXISTS messages_thread ON messages (list, thread_id, date_ms);
CREATE INDEX IF NOT EXISTS messages_parent ON messages (list, parent);
CREATE INDEX IF NOT EXISTS messages_subject ON messages (list, base_subject, date_ms);
CREATE TABLE IF NOT EXISTS tombstones (
    list TEXT NOT NULL,
    message_id TEXT NOT NULL,
    removed_ms INTEGER NOT NULL,
    PRIMARY KEY (list, message_id)
);
-- The largest message id ever removed. SQLite hands out max(id) + 1, so removing the newest
-- message would let the next one take its id again: an IMAP client would see a UID come back
-- with another message, and a digest whose cursor covered that id would skip the new post.
-- New ids start above this floor (`insert_one`), so an id is never handed out twice.
CREATE TABLE IF NOT EXISTS id_floor (one INTEGER PRIMARY KEY CHECK (one = 1), id INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS privacy (list TEXT PRIMARY KEY, privacy TEXT NOT NULL);
-- Rows an import brought (history from another list server): never news, so no digest mails
-- them. Ids are never handed out twice (id_floor), so a removed row's entry is harmless.
CREATE TABLE IF NOT EXISTS history (id INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS display (list TEXT PRIMARY KEY, show_addresses INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5 (
    subject, sender, body, content='', contentless_delete=1, detail=none
);
";

pub(crate) const SUMMARY_COLS: &str =
    "id, list, message_id, date_ms, thread_id, subject, sender, size";

/// The archive store. One connection; the writer stage, the CLI and the web pages each open
/// their own (SQLite WAL: one writer, many readers).
pub struct Archive {
    pub(crate) conn: Connection,
    limits: Limits,
    default_privacy: Privacy,
}

impl Archive {
    /// Opens (creating) the archive at `path`.
    pub fn open(path: &Path) -> Result<Archive, ArchiveError> {
        let spec = Versioned::schema("archive database", SCHEMA_VERSION, SCHEMA)
            .busy_timeout(std::time::Duration::from_secs(10));
        let conn = open_versioned(path, &spec)?;
        Ok(Archive {
            conn,
            limits: Limits::default(),
            default_privacy: Privacy::default(),
        })
    }

    /// The privacy of lists nobody set one for (`[archive] default_privacy`).
    pub fn with_default_privacy(mut self, p: Privacy) -> Self {
        self.default_privacy = p;
        self
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn privacy(&self, list: &str) -> Result<Privacy, ArchiveError> {
        let p: Option<String> = self
            .conn
            .query_row("SELECT privacy FROM privacy WHERE list = ?1", [list], |r| {
                r.get(0)
            })
            .optional()?;
        match p {
            Some(p) => p.parse(),
            None => Ok(self.default_privacy),
        }
    }

    pub fn set_privacy(&self, list: &str, p: Privacy) -> Result<(), ArchiveError> {
        self.conn.execute(
            "INSERT INTO privacy (list, privacy) VALUES (?1, ?2)
             ON CONFLICT (list) DO UPDATE SET privacy = excluded.privacy",
            params![list, p.as_str()],
        )?;
        Ok(())
    }

    /// Whether the web archive shows mail addresses as they are (`true`) or obfuscated
    /// (`user at example.org`, the default: an archive is a harvester's favourite page).
    pub fn shows_addresses(&self, list: &str) -> Result<bool, ArchiveError> {
        let v: Option<bool> = self
            .conn
            .query_row(
                "SELECT show_addresses FROM display WHERE list = ?1",
                [list],
                |r| r.get(0),
            )
            .optional()?;
        Ok(v.unwrap_or(false))
    }

    pub fn set_shows_addresses(&self, list: &str, show: bool) -> Result<(), ArchiveError> {
        self.conn.execute(
            "INSERT INTO display (list, show_addresses) VALUES (?1, ?2)
             ON CONFLICT (list) DO UPDATE SET show_addresses = excluded.show_addresses",
            params![list, show],
        )?;
        Ok(())
    }
    /// Messages in the archive, all lists (one `COUNT(*)` over the smallest index).
    pub fn count(&self) -> Result<i64, ArchiveError> {
        Ok(self
            .conn
            .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))?)
    }

    /// The database file, for its size on disk (`None` for an in-memory store).
    pub fn path(&self) -> Option<std::path::PathBuf> {
        self.conn.path().map(std::path::PathBuf::from)
    }

    /// Bytes used by the full-text index and by the message table (SQLite's dbstat), for the
    /// size comparison in BENCHMARKS.md.
    pub fn sizes(&self) -> Result<(i64, i64), ArchiveError> {
        let sum = |like: &str| -> Result<i64, ArchiveError> {
            Ok(self.conn.query_row(
                "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name LIKE ?1",
                [like],
                |r| r.get(0),
            )?)
        };
        Ok((sum("fts%")?, sum("messages%")?))
    }
}

fn month_key(year: i32, month: u8) -> String {
    format!("{year:04}-{month:02}")
}

/// `YYYY-MM` of a UTC time.
pub fn month_of(ms: i64) -> String {
    let z = jiff::tz::Offset::UTC
        .to_datetime(jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH));
    month_key(i32::from(z.year()), z.month() as u8)
}

/// Each word of the query (a run of letters and digits, as FTS5's unicode61 tokenizer cuts
/// them) as a quoted FTS5 term, at most 16: every term must occur. The index keeps no
/// positions (`detail=none`: 6.6 % of the raw corpus instead of 49 %, BENCHMARKS.md), so terms are matched, not phrases.
pub(crate) fn fts_query(q: &str) -> String {
    q.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(16)
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests;
