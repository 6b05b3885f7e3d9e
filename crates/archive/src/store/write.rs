//! The archive's write side: storing a batch of messages (live or imported history) in one
//! transaction, threading each on arrival, removing one behind a tombstone, and rebuilding the
//! full-text index. Apart from the reads because these are the only statements that change
//! `messages`, `fts`, `tombstones`, `id_floor` and `history`, and they keep their invariants
//! together: a row id is never handed out twice, a tombstoned Message-ID never comes back.
//!
//! SECURITY: every message is untrusted bytes, parsed under [`Limits`] (a refused one is
//! answered [`Refused`], not stored); every statement is parameterized.

use super::body::{deflate, inflate};
use super::{month_of, Archive, NewMessage, Stored};
use crate::parse::{self, Limits, Parsed, Refused};
use crate::ArchiveError;
use rusqlite::{params, OptionalExtension};

impl Archive {
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
