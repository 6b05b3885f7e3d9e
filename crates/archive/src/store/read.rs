//! The archive's read side: listings (lists, months, a month, a thread), pages of messages
//! with their bodies for the mbox downloads, digests and the feed, one message, a sender's
//! posts. Every query reads through an index with a LIMIT, never the whole table (searches
//! are in [`super::search`], IMAP's UID reads in [`crate::uids`]).

use super::body::inflate;
use super::{
    month_key, Archive, ListTotals, MessageSummary, Month, Scope, StoredMessage, SUMMARY_COLS,
};
use crate::parse;
use crate::ArchiveError;
use rusqlite::{params, OptionalExtension};

impl Archive {
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

    /// Rows of `SUMMARY_COLS` then `body`, with the bodies inflated.
    pub(super) fn with_bodies<P: rusqlite::Params>(
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

    pub(super) fn summaries<P: rusqlite::Params>(
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
