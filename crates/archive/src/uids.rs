//! The archive as the IMAP server (`herald-imap`) reads it: one mailbox per list, whose UIDs
//! are the store's row ids and whose UIDVALIDITY is kept here.
//!
//! Why row ids are UIDs: SQLite gives each row an id larger than every id in the table when it
//! is inserted, so per list they only grow — what RFC 9051 §2.3.1.1 asks of UIDs — and a
//! message keeps its id for as long as it is archived. Ids beyond `u32::MAX` (four billion
//! archived messages) cannot be UIDs and are not served.
//!
//! Removing the newest message does not give its id back: new ids start above the largest id
//! ever removed (the store's `id_floor`). Archives written before that floor existed may have
//! reused one, so [`Archive::uid_validity`] still keeps, per list, the largest UID it has
//! handed out and the list's tombstone count: when a removal (a tombstone) took away the
//! newest message, UIDVALIDITY changes, so clients drop what they cached. A rebuilt `archive.db`
//! (restore into a fresh store, re-import) starts the table again and so a new UIDVALIDITY.
//!
//! Cost: listing a list's ids reads its entries of a covering index (no bodies), sorted here;
//! new ids are read by a row-id range (`+list` keeps SQLite off the list index), so a poll for
//! new posts reads only rows newer than the last one seen.
//!
//! SECURITY: list names and search words come from IMAP clients; every statement is
//! parameterized and search words become quoted FTS5 terms ([`crate::store`]).

use crate::store::SUMMARY_COLS;
use crate::store::{fts_query, inflate, summary, Archive, MessageSummary, StoredMessage};
use crate::ArchiveError;
use rusqlite::{params, OptionalExtension};

const UIDVALIDITY_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS imap_uidvalidity (
    list TEXT PRIMARY KEY,
    uidvalidity INTEGER NOT NULL,
    high_water INTEGER NOT NULL,
    tombstones INTEGER NOT NULL
)";

impl Archive {
    /// Every id of `list` that can be a UID, ascending.
    pub fn uids(&self, list: &str) -> Result<Vec<u32>, ArchiveError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM messages WHERE list = ?1")?;
        let mut out = Vec::new();
        let mut rows = stmt.query([list])?;
        while let Some(r) = rows.next()? {
            if let Ok(id) = u32::try_from(r.get::<_, i64>(0)?) {
                out.push(id);
            }
        }
        // The index SQLite walks is ordered by another column; ids come back in any order.
        out.sort_unstable();
        Ok(out)
    }

    /// The ids of `list` above `after`, ascending (new posts since the last look).
    pub fn uids_after(&self, list: &str, after: u32) -> Result<Vec<u32>, ArchiveError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM messages WHERE id > ?2 AND +list = ?1 ORDER BY id")?;
        let mut out = Vec::new();
        let mut rows = stmt.query(params![list, i64::from(after)])?;
        while let Some(r) = rows.next()? {
            if let Ok(id) = u32::try_from(r.get::<_, i64>(0)?) {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// How many messages of `list` were ever removed (tombstones): a change means messages
    /// a client may hold have gone.
    pub fn tombstone_count(&self, list: &str) -> Result<i64, ArchiveError> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*) FROM tombstones WHERE list = ?1",
            [list],
            |r| r.get(0),
        )?)
    }

    /// `(messages, largest id)` of `list` (STATUS).
    pub fn mailbox_totals(&self, list: &str) -> Result<(u32, u32), ArchiveError> {
        let (n, max): (i64, Option<i64>) = self.conn.query_row(
            "SELECT COUNT(*), MAX(id) FROM messages WHERE list = ?1",
            [list],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok((
            u32::try_from(n).unwrap_or(u32::MAX),
            max.and_then(|m| u32::try_from(m).ok()).unwrap_or(0),
        ))
    }

    /// The UIDVALIDITY of `list`, given its largest UID now and its tombstone count: fixed
    /// from the first time asked (the time then, in seconds), changed when a removal took the
    /// list's newest message (its id could be given again).
    pub fn uid_validity(
        &self,
        list: &str,
        max_uid: u32,
        tombstones: i64,
    ) -> Result<u32, ArchiveError> {
        self.conn.execute_batch(UIDVALIDITY_SCHEMA)?;
        let now = u32::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1),
        )
        .unwrap_or(u32::MAX)
        .max(1);
        let row: Option<(i64, i64, i64)> = self
            .conn
            .query_row(
                "SELECT uidvalidity, high_water, tombstones FROM imap_uidvalidity WHERE list = ?1",
                [list],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        let max = i64::from(max_uid);
        let (validity, high, tombs) = match row {
            None => (i64::from(now), max, tombstones),
            Some((v, high, tombs)) if tombs != tombstones && max < high => {
                // The newest UID handed out is gone: it may be handed out again.
                (v.saturating_add(1).max(i64::from(now)), max, tombstones)
            }
            Some((v, high, _)) => (v, high.max(max), tombstones),
        };
        if row != Some((validity, high, tombs)) {
            self.conn.execute(
                "INSERT INTO imap_uidvalidity (list, uidvalidity, high_water, tombstones)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (list) DO UPDATE SET
                 uidvalidity = excluded.uidvalidity, high_water = excluded.high_water,
                 tombstones = excluded.tombstones",
                params![list, validity, high, tombs],
            )?;
        }
        Ok(u32::try_from(validity).unwrap_or(u32::MAX).max(1))
    }

    /// The overview row of one message of `list` by id.
    pub fn summary_by_id(
        &self,
        list: &str,
        id: u32,
    ) -> Result<Option<MessageSummary>, ArchiveError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {SUMMARY_COLS} FROM messages WHERE id = ?1 AND list = ?2"
        ))?;
        Ok(stmt
            .query_row(params![i64::from(id), list], summary)
            .optional()?)
    }

    /// One message of `list` with its bytes, by id.
    pub fn message_by_id(
        &self,
        list: &str,
        id: u32,
    ) -> Result<Option<StoredMessage>, ArchiveError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {SUMMARY_COLS}, body FROM messages WHERE id = ?1 AND list = ?2"
        ))?;
        let row = stmt
            .query_row(params![i64::from(id), list], |r| {
                Ok((summary(r)?, r.get::<_, Vec<u8>>(8)?))
            })
            .optional()?;
        row.map(|(s, body)| {
            Ok(StoredMessage {
                raw: inflate(&body).ok_or(ArchiveError::Corrupt(s.id))?,
                summary: s,
            })
        })
        .transpose()
    }

    /// Calls `each` with every overview row of `list` (any order), one row in memory at a
    /// time: a SEARCH over the overview columns.
    pub fn scan_summaries(
        &self,
        list: &str,
        mut each: impl FnMut(&MessageSummary),
    ) -> Result<(), ArchiveError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {SUMMARY_COLS} FROM messages WHERE list = ?1"
        ))?;
        let mut rows = stmt.query([list])?;
        while let Some(r) = rows.next()? {
            each(&summary(r)?);
        }
        Ok(())
    }

    /// The ids of `list` whose subject, sender or text has every word of `query` (the FTS5
    /// index; words, not substrings), ascending. An empty query matches nothing here: the
    /// caller decides what an empty search string means.
    pub fn text_ids(&self, list: &str, query: &str) -> Result<Vec<u32>, ArchiveError> {
        let q = fts_query(query);
        if q.is_empty() {
            return Ok(Vec::new());
        }
        let mut stmt = self.conn.prepare_cached(
            "SELECT m.id FROM fts JOIN messages m ON m.id = fts.rowid
             WHERE fts MATCH ?1 AND m.list = ?2",
        )?;
        let mut out = Vec::new();
        let mut rows = stmt.query(params![q, list])?;
        while let Some(r) = rows.next()? {
            if let Ok(id) = u32::try_from(r.get::<_, i64>(0)?) {
                out.push(id);
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewMessage;

    fn msg(list: &str, mid: &str, body: &str) -> NewMessage {
        NewMessage {
            list: list.into(),
            raw: format!(
                "From: a@x.test\r\nSubject: s {mid}\r\nMessage-ID: <{mid}>\r\n\r\n{body}\r\n"
            )
            .into_bytes(),
            received_ms: 1_795_000_000_000,
        }
    }

    /// UIDs grow per list; new ones are found by range; text search finds words; removing the
    /// newest message changes UIDVALIDITY, removing an older one does not.
    #[test]
    fn uids_grow_and_uidvalidity_changes_only_when_the_newest_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = Archive::open(&dir.path().join("archive.db")).unwrap();
        a.insert_batch(&[
            msg("a@l", "1@x", "apple"),
            msg("b@l", "2@x", "pear"),
            msg("a@l", "3@x", "banana apple"),
        ])
        .unwrap();
        let uids = a.uids("a@l").unwrap();
        assert_eq!(uids.len(), 2);
        assert!(uids[0] < uids[1]);
        assert_eq!(a.uids_after("a@l", uids[0]).unwrap(), vec![uids[1]]);
        assert_eq!(a.text_ids("a@l", "apple").unwrap(), uids);
        assert_eq!(a.text_ids("a@l", "banana").unwrap(), vec![uids[1]]);
        assert!(a.text_ids("a@l", "\"(*").unwrap().is_empty());
        assert_eq!(a.mailbox_totals("a@l").unwrap(), (2, uids[1]));

        let v1 = a.uid_validity("a@l", uids[1], 0).unwrap();
        assert_eq!(a.uid_validity("a@l", uids[1], 0).unwrap(), v1);
        // An older message removed: UIDs still stand.
        a.remove("a@l", "1@x", 1).unwrap();
        let t = a.tombstone_count("a@l").unwrap();
        assert_eq!(t, 1);
        assert_eq!(a.uid_validity("a@l", uids[1], t).unwrap(), v1);
        // The newest removed: its id may come back.
        a.remove("a@l", "3@x", 2).unwrap();
        let (_, max) = a.mailbox_totals("a@l").unwrap();
        let v2 = a
            .uid_validity("a@l", max, a.tombstone_count("a@l").unwrap())
            .unwrap();
        assert_ne!(v2, v1);
        let m = a
            .message_by_id("b@l", a.uids("b@l").unwrap()[0])
            .unwrap()
            .unwrap();
        assert!(m.raw.ends_with(b"pear\r\n"));
        assert!(a.message_by_id("a@l", uids[1]).unwrap().is_none());
    }
}
