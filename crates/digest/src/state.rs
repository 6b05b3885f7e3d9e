//! The digest ledger, `digest.db` (SQLite, WAL, `synchronous=FULL`): per list the volume, the
//! next issue and the archive cursor (the last archived row a digest covered), and per digest
//! sent its number, format and Message-ID with a two-phase state.
//!
//! Never twice, also across `kill -9`, by a two-phase record:
//! 1. [`Ledger::take`]: one transaction advances the cursor and the issue and records the
//!    digest as `enqueuing`, *before* the digest is handed to the spool;
//! 2. the stage enqueues it (durable in the spool when `enqueue` returns);
//! 3. [`Ledger::enqueued`] marks it `enqueuing` → `enqueued`.
//!
//! A crash after 3 leaves nothing to do (the spool's recovery finishes the delivery). A crash
//! between 1 and 3 leaves an `enqueuing` row: at the next start the stage looks for its
//! Message-ID among the posts the spool recovered — found, it was accepted (mark it enqueued,
//! recovery delivers it); not found, it was not accepted, and the same bytes (rebuilt from the
//! same archive rows, same Message-ID) are enqueued again. A digest accepted *and fully
//! delivered and completed* between the spool's fsync and the ledger's next commit is found
//! too: the spool lists the digests whose PostDone its journal holds
//! (`Spool::completed_digests_at_open`). What remains is a compaction that removed that
//! journal segment inside the same milliseconds, before the crash.
//!
//! SECURITY: holds only numbers and our own Message-IDs; nothing from the network.

use herald_store::{open_versioned, Versioned};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::path::Path;

/// A list's digest position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListState {
    pub volume: u32,
    /// The number the next digest gets.
    pub next_issue: u32,
    /// The last archive row covered by a digest.
    pub cursor: i64,
    /// When the last digest was sent (or the state created): the schedule counts from here.
    pub last_sent_ms: i64,
    /// When the current volume began (a new year or month starts a new volume).
    pub volume_started_ms: i64,
}

/// A digest recorded by [`Ledger::take`], one per format sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub list: String,
    pub volume: u32,
    pub issue: u32,
    pub format: String,
    /// Archive rows `(from_id, upto_id]` it covers.
    pub from_id: i64,
    pub upto_id: i64,
    pub message_id: String,
}

/// Why the ledger failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("digest ledger: {0}")]
    Sql(#[from] rusqlite::Error),
    /// Opening failed, or the file is from a newer Herald (the message says what to do).
    #[error(transparent)]
    Open(#[from] herald_store::OpenError),
}

/// The ledger's schema version (SQLite `user_version`): 1 is the schema below. A later change
/// adds its step in [`Ledger::open`] and bumps this; a newer file is refused, never rewritten.
pub const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS lists (
    list              TEXT PRIMARY KEY,
    volume            INTEGER NOT NULL,
    next_issue        INTEGER NOT NULL,
    cursor            INTEGER NOT NULL,
    last_sent_ms      INTEGER NOT NULL,
    volume_started_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS digests (
    list       TEXT NOT NULL,
    volume     INTEGER NOT NULL,
    issue      INTEGER NOT NULL,
    format     TEXT NOT NULL,
    from_id    INTEGER NOT NULL,
    upto_id    INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('enqueuing', 'enqueued')),
    at_ms      INTEGER NOT NULL,
    PRIMARY KEY (list, volume, issue, format)
);
";

/// The ledger. One connection, used from the stage's blocking tasks one at a time.
pub struct Ledger {
    conn: Connection,
}

impl Ledger {
    pub fn open(path: &Path) -> Result<Ledger, LedgerError> {
        // Synchronous FULL (the default): a commit is on disk when it returns; phase 1 must be
        // before the enqueue.
        let spec = Versioned::schema("digest ledger", SCHEMA_VERSION, SCHEMA);
        let conn = open_versioned(path, &spec)?;
        Ok(Ledger { conn })
    }

    /// The list's state, created at volume 1, issue 1 with the cursor at `cursor` if absent.
    pub fn state(&self, list: &str, cursor: i64, now_ms: i64) -> Result<ListState, LedgerError> {
        self.conn.execute(
            "INSERT OR IGNORE INTO lists VALUES (?1, 1, 1, ?2, ?3, ?3)",
            params![list, cursor, now_ms],
        )?;
        Ok(self.conn.query_row(
            "SELECT volume, next_issue, cursor, last_sent_ms, volume_started_ms
             FROM lists WHERE list = ?1",
            [list],
            |r| {
                Ok(ListState {
                    volume: r.get(0)?,
                    next_issue: r.get(1)?,
                    cursor: r.get(2)?,
                    last_sent_ms: r.get(3)?,
                    volume_started_ms: r.get(4)?,
                })
            },
        )?)
    }

    /// Phase 1: records the digests of `(volume, issue)` covering `(from, upto]` (one per
    /// format) as `enqueuing` and moves the list on to `issue + 1` with the cursor at `upto`,
    /// in one durable transaction. Refuses (returns `false`) if the list is no longer at
    /// `from` / `issue` (a concurrent `send-now`): the caller then sends nothing.
    pub fn take(
        &mut self,
        digests: &[Taken],
        new_volume: bool,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        let Some(first) = digests.first() else {
            return Ok(false);
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let at: Option<(u32, u32, i64)> = tx
            .query_row(
                "SELECT volume, next_issue, cursor FROM lists WHERE list = ?1",
                [&first.list],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        let expected_volume = if new_volume {
            first.volume - 1
        } else {
            first.volume
        };
        let expected_issue = if new_volume { None } else { Some(first.issue) };
        match at {
            Some((v, i, c))
                if v == expected_volume
                    && expected_issue.is_none_or(|e| e == i)
                    && c == first.from_id => {}
            _ => return Ok(false),
        }
        for d in digests {
            tx.execute(
                "INSERT INTO digests VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'enqueuing', ?8)",
                params![
                    d.list,
                    d.volume,
                    d.issue,
                    d.format,
                    d.from_id,
                    d.upto_id,
                    d.message_id,
                    now_ms
                ],
            )?;
        }
        tx.execute(
            "UPDATE lists SET volume = ?2, next_issue = ?3, cursor = ?4, last_sent_ms = ?5,
             volume_started_ms = CASE WHEN ?6 THEN ?5 ELSE volume_started_ms END
             WHERE list = ?1",
            params![
                first.list,
                first.volume,
                first.issue + 1,
                first.upto_id,
                now_ms,
                new_volume
            ],
        )?;
        tx.commit()?;
        Ok(true)
    }

    /// Moves the cursor from `from` to `upto` without a digest (a list with no digest member).
    pub fn skip(&self, list: &str, from: i64, upto: i64, now_ms: i64) -> Result<(), LedgerError> {
        self.conn.execute(
            "UPDATE lists SET cursor = ?3, last_sent_ms = ?4 WHERE list = ?1 AND cursor = ?2",
            params![list, from, upto, now_ms],
        )?;
        Ok(())
    }

    /// Phase 3: the digest is in the spool.
    pub fn enqueued(&self, d: &Taken) -> Result<(), LedgerError> {
        self.conn.execute(
            "UPDATE digests SET state = 'enqueued'
             WHERE list = ?1 AND volume = ?2 AND issue = ?3 AND format = ?4",
            params![d.list, d.volume, d.issue, d.format],
        )?;
        Ok(())
    }

    /// Digests recorded but not known to be in the spool (a crash between phases 1 and 3).
    pub fn unfinished(&self) -> Result<Vec<Taken>, LedgerError> {
        let mut st = self.conn.prepare(
            "SELECT list, volume, issue, format, from_id, upto_id, message_id FROM digests
             WHERE state = 'enqueuing' ORDER BY list, volume, issue, format",
        )?;
        let rows = st.query_map([], |r| {
            Ok(Taken {
                list: r.get(0)?,
                volume: r.get(1)?,
                issue: r.get(2)?,
                format: r.get(3)?,
                from_id: r.get(4)?,
                upto_id: r.get(5)?,
                message_id: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every digest recorded for `list`, oldest first (for tests and `herald digest`).
    pub fn sent(&self, list: &str) -> Result<Vec<(Taken, String)>, LedgerError> {
        let mut st = self.conn.prepare(
            "SELECT list, volume, issue, format, from_id, upto_id, message_id, state FROM digests
             WHERE list = ?1 ORDER BY volume, issue, format",
        )?;
        let rows = st.query_map([list], |r| {
            Ok((
                Taken {
                    list: r.get(0)?,
                    volume: r.get(1)?,
                    issue: r.get(2)?,
                    format: r.get(3)?,
                    from_id: r.get(4)?,
                    upto_id: r.get(5)?,
                    message_id: r.get(6)?,
                },
                r.get(7)?,
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(issue: u32, volume: u32, from: i64, upto: i64) -> Taken {
        Taken {
            list: "dev@l.test".into(),
            volume,
            issue,
            format: "mime".into(),
            from_id: from,
            upto_id: upto,
            message_id: format!("digest.{volume}.{issue}.mime@h"),
        }
    }

    /// Phase 1 survives a reopen (it is what a crash leaves), moves the list on, and refuses a
    /// second take of the same issue or from a stale cursor; phase 3 clears it.
    #[test]
    fn take_is_durable_once_and_enqueued_settles_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("digest.db");
        let mut l = Ledger::open(&path).expect("open");
        let s = l.state("dev@l.test", 5, 1000).expect("state");
        assert_eq!((s.volume, s.next_issue, s.cursor), (1, 1, 5));
        assert!(l.take(&[taken(1, 1, 5, 9)], false, 2000).expect("take"));
        assert!(
            !l.take(&[taken(1, 1, 5, 9)], false, 2001).expect("again"),
            "same issue twice"
        );
        assert!(
            !l.take(&[taken(2, 1, 5, 12)], false, 2002).expect("stale"),
            "stale cursor"
        );
        drop(l);
        let mut l = Ledger::open(&path).expect("reopen");
        assert_eq!(l.unfinished().expect("u"), vec![taken(1, 1, 5, 9)]);
        let s = l.state("dev@l.test", 0, 0).expect("state");
        assert_eq!((s.next_issue, s.cursor, s.last_sent_ms), (2, 9, 2000));
        l.enqueued(&taken(1, 1, 5, 9)).expect("enqueued");
        assert!(l.unfinished().expect("u").is_empty());
        // A new volume restarts the issue number.
        assert!(l.take(&[taken(1, 2, 9, 15)], true, 3000).expect("volume 2"));
        let s = l.state("dev@l.test", 0, 0).expect("state");
        assert_eq!((s.volume, s.next_issue, s.volume_started_ms), (2, 2, 3000));
    }
}
