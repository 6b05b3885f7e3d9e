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

use crate::parse::{self, Limits, Parsed, Refused};
use crate::ArchiveError;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::{Compress, Compression, FlushCompress, Status};
use herald_store::{open_versioned, Versioned};
use rusqlite::{params, Connection, OptionalExtension};
use std::cell::RefCell;
use std::io::{Read, Write};
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

    /// Stores a batch in one transaction (one fsync for the batch: group commit).
    pub fn insert_batch(&mut self, batch: &[NewMessage]) -> Result<Vec<Stored>, ArchiveError> {
        let limits = self.limits;
        let tx = self.conn.transaction()?;
        let mut out = Vec::with_capacity(batch.len());
        for m in batch {
            out.push(insert_one(&tx, m, &limits)?);
        }
        tx.commit()?;
        Ok(out)
    }

    /// [`Archive::insert_batch`] for an import: the rows added are history (see the
    /// `history` table), in the same transaction.
    pub fn import_batch(&mut self, batch: &[NewMessage]) -> Result<Vec<Stored>, ArchiveError> {
        let limits = self.limits;
        let tx = self.conn.transaction()?;
        let mut out = Vec::with_capacity(batch.len());
        for m in batch {
            let stored = insert_one(&tx, m, &limits)?;
            if let Stored::Added { id, .. } = &stored {
                tx.execute(
                    "INSERT OR IGNORE INTO history (id) VALUES (?1)",
                    params![id],
                )?;
            }
            out.push(stored);
        }
        tx.commit()?;
        Ok(out)
    }

    /// Removes one message and leaves a tombstone. False when it was not archived (the
    /// tombstone is written anyway: a later import must not bring it in).
    pub fn remove(
        &mut self,
        list: &str,
        message_id: &str,
        now_ms: i64,
    ) -> Result<bool, ArchiveError> {
        let mid = parse::clean_id(message_id);
        let tx = self.conn.transaction()?;
        let id: Option<i64> = tx
            .query_row(
                "SELECT id FROM messages WHERE list = ?1 AND message_id = ?2",
                params![list, mid],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(id) = id {
            tx.execute("DELETE FROM fts WHERE rowid = ?1", [id])?;
            tx.execute("DELETE FROM messages WHERE id = ?1", [id])?;
            tx.execute(
                "INSERT INTO id_floor (one, id) VALUES (1, ?1)
                 ON CONFLICT (one) DO UPDATE SET id = max(id, excluded.id)",
                [id],
            )?;
        }
        tx.execute(
            "INSERT OR IGNORE INTO tombstones (list, message_id, removed_ms) VALUES (?1, ?2, ?3)",
            params![list, mid, now_ms],
        )?;
        tx.commit()?;
        Ok(id.is_some())
    }

    /// The posts whose sender is `address` (any case), oldest first, at most `limit`: a
    /// person's data export and erasure. `(list, message_id, date_ms,
    /// subject)`.
    pub fn by_sender(
        &self,
        address: &str,
        limit: usize,
    ) -> Result<Vec<(String, String, i64, String)>, ArchiveError> {
        let mut stmt = self.conn.prepare(
            "SELECT list, message_id, date_ms, subject FROM messages
             WHERE instr(lower(sender), lower(?1)) > 0 ORDER BY date_ms, id LIMIT ?2",
        )?;
        let rows = stmt.query_map(
            params![address, i64::try_from(limit).unwrap_or(i64::MAX)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every list with an archive or a privacy setting, with totals.
    pub fn lists(&self) -> Result<Vec<ListTotals>, ArchiveError> {
        let mut stmt = self.conn.prepare(
            "SELECT l.list, COUNT(m.id), COALESCE(SUM(m.size), 0), COALESCE(SUM(LENGTH(m.body)), 0)
             FROM (SELECT list FROM messages GROUP BY list UNION SELECT list FROM privacy) l
             LEFT JOIN messages m ON m.list = l.list GROUP BY l.list ORDER BY l.list",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<Result<Vec<(String, i64, i64, i64)>, _>>()?;
        rows.into_iter()
            .map(|(list, messages, raw_bytes, stored_bytes)| {
                Ok(ListTotals {
                    privacy: self.privacy(&list)?,
                    list,
                    messages,
                    raw_bytes,
                    stored_bytes,
                })
            })
            .collect()
    }

    /// Months with messages, newest first.
    pub fn months(&self, list: &str) -> Result<Vec<Month>, ArchiveError> {
        let mut stmt = self.conn.prepare(
            "SELECT month, COUNT(*) FROM messages WHERE list = ?1 GROUP BY month ORDER BY month DESC",
        )?;
        let rows = stmt
            .query_map([list], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows
            .into_iter()
            .filter_map(|(m, count)| {
                let (y, mo) = m.split_once('-')?;
                Some(Month {
                    year: y.parse().ok()?,
                    month: mo.parse().ok()?,
                    count,
                })
            })
            .collect())
    }

    /// One page of a month's messages in date order.
    pub fn month_page(
        &self,
        list: &str,
        year: i32,
        month: u8,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<MessageSummary>, ArchiveError> {
        self.summaries(
            &format!(
                "SELECT {SUMMARY_COLS} FROM messages WHERE list = ?1 AND month = ?2
                 ORDER BY date_ms, id LIMIT ?3 OFFSET ?4"
            ),
            params![list, month_key(year, month), limit as i64, offset as i64],
        )
    }

    /// One page of a thread in date order.
    pub fn thread(
        &self,
        list: &str,
        thread_id: i64,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<MessageSummary>, ArchiveError> {
        self.summaries(
            &format!(
                "SELECT {SUMMARY_COLS} FROM messages WHERE list = ?1 AND thread_id = ?2
                 ORDER BY date_ms, id LIMIT ?3 OFFSET ?4"
            ),
            params![list, thread_id, limit as i64, offset as i64],
        )
    }

    /// Messages of `list` between two dates (inclusive `since`, exclusive `until`) after row
    /// `after_id`, in id order: the export reads the archive a page at a time.
    pub fn range_page(
        &self,
        list: &str,
        since_ms: i64,
        until_ms: i64,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, ArchiveError> {
        self.with_bodies(
            &format!(
                "SELECT {SUMMARY_COLS}, body FROM messages WHERE list = ?1 AND date_ms >= ?2
                 AND date_ms < ?3 AND id > ?4 ORDER BY id LIMIT ?5"
            ),
            params![list, since_ms, until_ms, after_id, limit as i64],
        )
    }

    /// The list's posts after row `after_id` in id order, imported history left out: what a
    /// digest gathers (see [`Archive::pending_since`]).
    pub fn news_page(
        &self,
        list: &str,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, ArchiveError> {
        self.with_bodies(
            &format!(
                "SELECT {SUMMARY_COLS}, body FROM messages WHERE list = ?1 AND id > ?2
                 AND id NOT IN (SELECT id FROM history) ORDER BY id LIMIT ?3"
            ),
            params![list, after_id, limit as i64],
        )
    }

    /// The next `limit` messages of a month or a thread after the key `after` (date, row id),
    /// in date order: the mbox downloads read a month or a thread a page at a time through
    /// the (list, month|thread, date) indexes, so no page costs more than the rows it returns.
    pub fn scope_page(
        &self,
        list: &str,
        scope: Scope,
        after: (i64, i64),
        limit: usize,
    ) -> Result<Vec<StoredMessage>, ArchiveError> {
        let (column, key) = scope.column();
        self.with_bodies(
            &format!(
                "SELECT {SUMMARY_COLS}, body FROM messages WHERE list = ?1 AND {column} = ?2
                 AND (date_ms, id) > (?3, ?4) ORDER BY date_ms, id LIMIT ?5"
            ),
            params![list, key, after.0, after.1, limit as i64],
        )
    }

    /// [`Archive::scope_page`] without the bodies: one page of a month or a thread for the web
    /// pages, keyed by the last row shown (no page reads rows it does not show, however deep).
    pub fn scope_summaries(
        &self,
        list: &str,
        scope: Scope,
        after: (i64, i64),
        limit: usize,
    ) -> Result<Vec<MessageSummary>, ArchiveError> {
        let (column, key) = scope.column();
        self.summaries(
            &format!(
                "SELECT {SUMMARY_COLS} FROM messages WHERE list = ?1 AND {column} = ?2
                 AND (date_ms, id) > (?3, ?4) ORDER BY date_ms, id LIMIT ?5"
            ),
            params![list, key, after.0, after.1, limit as i64],
        )
    }

    /// The newest `limit` messages of `list` with their bytes, newest first (the Atom feed).
    pub fn latest(&self, list: &str, limit: usize) -> Result<Vec<StoredMessage>, ArchiveError> {
        self.with_bodies(
            &format!(
                "SELECT {SUMMARY_COLS}, body FROM messages WHERE list = ?1
                 ORDER BY date_ms DESC, id DESC LIMIT ?2"
            ),
            params![list, limit as i64],
        )
    }

    /// What `list` archived after row `after_id` (the digest's cursor): how many
    /// messages, their stored size in bytes, and the last row id (`after_id` when none). One
    /// range scan of the list's rows past the cursor. Imported history is not news: left out.
    pub fn pending_since(
        &self,
        list: &str,
        after_id: i64,
    ) -> Result<(u64, u64, i64), ArchiveError> {
        let (n, bytes, last): (i64, i64, Option<i64>) = self.conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(size), 0), MAX(id) FROM messages
             WHERE list = ?1 AND id > ?2 AND id NOT IN (SELECT id FROM history)",
            params![list, after_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        Ok((
            n.max(0) as u64,
            bytes.max(0) as u64,
            last.unwrap_or(after_id),
        ))
    }

    /// The last row of `list` archived with a date (its `Date:`) before `before_ms` (0 when
    /// none): where a new digest cursor starts, so history imported from an older list server
    /// is not mailed.
    pub fn last_id_before(&self, list: &str, before_ms: i64) -> Result<i64, ArchiveError> {
        let last: Option<i64> = self.conn.query_row(
            "SELECT MAX(id) FROM messages WHERE list = ?1 AND date_ms < ?2",
            params![list, before_ms],
            |r| r.get(0),
        )?;
        Ok(last.unwrap_or(0))
    }

    /// One message by Message-ID (with or without angle brackets).
    pub fn message(
        &self,
        list: &str,
        message_id: &str,
    ) -> Result<Option<StoredMessage>, ArchiveError> {
        let row = self
            .conn
            .query_row(
                &format!(
                    "SELECT {SUMMARY_COLS}, body FROM messages WHERE list = ?1 AND message_id = ?2"
                ),
                params![list, parse::clean_id(message_id)],
                |r| Ok((summary(r)?, r.get::<_, Vec<u8>>(8)?)),
            )
            .optional()?;
        row.map(|(s, body)| {
            Ok(StoredMessage {
                raw: inflate(&body).ok_or(ArchiveError::Corrupt(s.id))?,
                summary: s,
            })
        })
        .transpose()
    }

    /// Rebuilds the full-text index and the overview columns (subject, sender, base subject,
    /// parent) from the stored messages, `batch` rows per transaction, calling `progress(done,
    /// total)` after each: after an index was damaged or a Herald upgrade changed what is
    /// indexed. Row ids (the IMAP UIDs) and threads stay as they are. A run cut short leaves a
    /// partial index; running it again completes it. Returns the messages indexed.
    pub fn reindex(
        &mut self,
        batch: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64, ArchiveError> {
        let total = u64::try_from(self.count()?).unwrap_or(0);
        // A contentless FTS5 table is emptied by its own command, not by DELETE.
        self.conn
            .execute("INSERT INTO fts (fts) VALUES ('delete-all')", [])?;
        let limits = self.limits;
        let (mut after, mut done) = (0i64, 0u64);
        loop {
            let rows: Vec<(i64, Vec<u8>)> = {
                let mut st = self.conn.prepare_cached(
                    "SELECT id, body FROM messages WHERE id > ?1 ORDER BY id LIMIT ?2",
                )?;
                let r = st
                    .query_map(params![after, batch.max(1) as i64], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                r
            };
            let Some(&(last, _)) = rows.last() else { break };
            let tx = self.conn.transaction()?;
            for (id, body) in &rows {
                let raw = inflate(body).ok_or(ArchiveError::Corrupt(*id))?;
                // A message stored under older limits that the current ones refuse keeps its
                // row; it is only left out of the full-text index.
                let Ok(p) = parse::parse(&raw, &limits) else {
                    continue;
                };
                tx.prepare_cached(
                    "UPDATE messages SET subject = ?2, sender = ?3, base_subject = ?4, parent = ?5
                     WHERE id = ?1",
                )?
                .execute(params![
                    id,
                    p.subject,
                    p.from,
                    parse::base_subject(&p.subject),
                    p.parent
                ])?;
                tx.prepare_cached(
                    "INSERT INTO fts (rowid, subject, sender, body) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![id, p.subject, p.from, p.text])?;
            }
            tx.commit()?;
            done += rows.len() as u64;
            after = last;
            progress(done, total);
        }
        Ok(done)
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

    /// Rows of `SUMMARY_COLS` then `body`, with the bodies inflated.
    fn with_bodies<P: rusqlite::Params>(
        &self,
        sql: &str,
        p: P,
    ) -> Result<Vec<StoredMessage>, ArchiveError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let rows = stmt
            .query_map(p, |r| Ok((summary(r)?, r.get::<_, Vec<u8>>(8)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter()
            .map(|(s, body)| {
                Ok(StoredMessage {
                    raw: inflate(&body).ok_or(ArchiveError::Corrupt(s.id))?,
                    summary: s,
                })
            })
            .collect()
    }

    fn summaries<P: rusqlite::Params>(
        &self,
        sql: &str,
        p: P,
    ) -> Result<Vec<MessageSummary>, ArchiveError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let rows = stmt.query_map(p, summary)?.collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

pub(crate) fn summary(r: &rusqlite::Row<'_>) -> rusqlite::Result<MessageSummary> {
    Ok(MessageSummary {
        id: r.get(0)?,
        list: r.get(1)?,
        message_id: r.get(2)?,
        date_ms: r.get(3)?,
        thread_id: r.get(4)?,
        subject: r.get(5)?,
        from: r.get(6)?,
        size: r.get(7)?,
    })
}

fn insert_one(
    tx: &rusqlite::Transaction<'_>,
    m: &NewMessage,
    limits: &Limits,
) -> Result<Stored, ArchiveError> {
    let p = match parse::parse(&m.raw, limits) {
        Ok(p) => p,
        Err(r) => return Ok(Stored::Refused(r)),
    };
    let tomb: Option<i64> = tx
        .prepare_cached("SELECT 1 FROM tombstones WHERE list = ?1 AND message_id = ?2")?
        .query_row(params![m.list, p.message_id], |r| r.get(0))
        .optional()?;
    if tomb.is_some() {
        return Ok(Stored::Refused(Refused::Tombstoned));
    }
    // Dates before 1970 or more than a day ahead are a sender's clock, not history.
    let date_ms = p
        .date_ms
        .filter(|d| *d >= 0 && *d <= m.received_ms.max(0).saturating_add(86_400_000))
        .unwrap_or(m.received_ms);
    let base = parse::base_subject(&p.subject);
    let thread = find_thread(tx, &m.list, &p, &base)?;
    let body = deflate(&m.raw);
    let n = tx
        .prepare_cached(
            // The id: above every id in the table and every id ever removed (`id_floor`);
            // both lookups are one b-tree step.
            "INSERT OR IGNORE INTO messages (id, list, message_id, date_ms, month, thread_id,
             parent, base_subject, subject, sender, size, body) VALUES (
             max(coalesce((SELECT max(id) FROM messages), 0),
                 coalesce((SELECT id FROM id_floor WHERE one = 1), 0)) + 1,
             ?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
        )?
        .execute(params![
            m.list,
            p.message_id,
            date_ms,
            month_of(date_ms),
            thread.unwrap_or(0),
            p.parent,
            base,
            p.subject,
            p.from,
            m.raw.len() as i64,
            body
        ])?;
    if n == 0 {
        return Ok(Stored::Duplicate {
            message_id: p.message_id,
        });
    }
    let id = tx.last_insert_rowid();
    let thread_id = match thread {
        Some(t) => t,
        None => {
            tx.execute("UPDATE messages SET thread_id = ?1 WHERE id = ?1", [id])?;
            id
        }
    };
    // Replies archived before this message (out-of-order import) started threads of their
    // own; they join this one.
    tx.prepare_cached(
        "UPDATE messages SET thread_id = ?1 WHERE list = ?2 AND thread_id IN
         (SELECT thread_id FROM messages WHERE list = ?2 AND parent = ?3 AND thread_id = id)",
    )?
    .execute(params![thread_id, m.list, p.message_id])?;
    tx.prepare_cached("INSERT INTO fts (rowid, subject, sender, body) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![id, p.subject, p.from, p.text])?;
    Ok(Stored::Added {
        id,
        message_id: p.message_id,
    })
}

/// The thread a message joins: its parent's, else a referenced message's (nearest first),
/// else — for a reply by its subject only — the latest thread with the same base subject.
fn find_thread(
    tx: &rusqlite::Transaction<'_>,
    list: &str,
    p: &Parsed,
    base: &str,
) -> Result<Option<i64>, ArchiveError> {
    let mut by_id =
        tx.prepare_cached("SELECT thread_id FROM messages WHERE list = ?1 AND message_id = ?2")?;
    let candidates = p.parent.iter().chain(p.references.iter().rev());
    for id in candidates {
        if let Some(t) = by_id
            .query_row(params![list, id], |r| r.get(0))
            .optional()?
        {
            return Ok(Some(t));
        }
    }
    if p.parent.is_none() && parse::is_reply_subject(&p.subject) {
        let t = tx
            .prepare_cached(
                "SELECT thread_id FROM messages WHERE list = ?1 AND base_subject = ?2
                 ORDER BY date_ms DESC LIMIT 1",
            )?
            .query_row(params![list, base], |r| r.get(0))
            .optional()?;
        return Ok(t);
    }
    Ok(None)
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

/// Raw deflate at level 6. The compressor is kept per thread and reset for each body: a new
/// one allocates and zeroes its dictionary and hash tables (hundreds of KB), which cost more
/// than compressing a typical 2 KB post (the archive writer's top symbol in the intake bench).
fn deflate(raw: &[u8]) -> Vec<u8> {
    thread_local! {
        static COMPRESSOR: RefCell<Compress> = RefCell::new(Compress::new(Compression::new(6), false));
    }
    COMPRESSOR.with_borrow_mut(|c| {
        c.reset();
        let mut out = Vec::with_capacity(raw.len() / 2 + 64);
        // Each pass fills the spare capacity; a bound on passes keeps a compressor bug from
        // looping forever (the output of deflate is never more than ~1.001 × the input + 64).
        for _ in 0..64 {
            let read = usize::try_from(c.total_in())
                .unwrap_or(raw.len())
                .min(raw.len());
            match c.compress_vec(&raw[read..], &mut out, FlushCompress::Finish) {
                Ok(Status::StreamEnd) => return out,
                Ok(_) => out.reserve(out.capacity().max(64)),
                Err(_) => break,
            }
        }
        // Not reached in practice; the encoder of old is the fallback.
        let mut e = DeflateEncoder::new(Vec::with_capacity(raw.len() / 2), Compression::new(6));
        let _ = e.write_all(raw);
        e.finish().unwrap_or_default()
    })
}

pub(crate) fn inflate(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len() * 3);
    DeflateDecoder::new(body).read_to_end(&mut out).ok()?;
    Some(out)
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

mod search;
pub use search::{SearchOrder, SearchPage};

#[cfg(test)]
mod tests;
