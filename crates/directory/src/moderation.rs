//! Per-member moderation (Mailman's "moderated" flag): a member whose posts are held
//! for a moderator whatever the list's posting policy, while they keep receiving the list. The
//! flag is what importers bring over from Mailman 2's `MODERATE` option and Mailman 3's
//! per-member `moderation_action`, and what an administrator sets with `herald member set
//! <list> <addr> moderated=true` — typically for a new member of a discussion list, or one who
//! has been warned.
//!
//! Invariants: the flag never changes a member's status, id, delivery mode or membership; a
//! moderated member still receives the list and still confirms; the list's own moderators are
//! never moderated (they approve posts, so holding theirs would only make them approve their
//! own). The column is `0`/`1` under a `CHECK` in the schema.
//!
//! SECURITY: the flag arrives typed (`bool`); addresses are bound parameters.

use crate::error::{storage, DirectoryError};
use crate::lists::ensure_list;
use crate::Directory;
use herald_types::{Address, ListId};
use rusqlite::{params, OptionalExtension};

/// What the directory knows of a member that posts: the input of enqueue's posting rule
/// (`herald_enqueue::posting_right`), which owns the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostingState {
    /// Not disabled (bounces, an administrator).
    pub enabled: bool,
    /// The member's posts are held for a moderator.
    pub moderated: bool,
}

impl Directory {
    /// The posting state of `sender` on `list`; `None` when not a member. Addresses compare
    /// as the member table's uniqueness does (ASCII letters without case).
    pub fn posting_state(
        &self,
        list: ListId,
        sender: &Address,
    ) -> Result<Option<PostingState>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.posting_state(list, sender));
        let conn = store.reader()?;
        conn.prepare_cached(
            "SELECT disabled_reason IS NULL, moderated FROM members \
             WHERE list_id = ?1 AND address = ?2",
        )
        .and_then(|mut st| {
            st.query_row(params![list.0, sender.to_string()], |r| {
                Ok(PostingState {
                    enabled: r.get(0)?,
                    moderated: r.get(1)?,
                })
            })
            .optional()
        })
        .map_err(storage("read posting right"))
    }

    /// Sets or clears a member's moderation flag. False if the address is not on the list.
    pub fn set_moderated(
        &self,
        list: ListId,
        address: &Address,
        moderated: bool,
    ) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.set_moderated(list, address, moderated));
        store.write(|tx| {
            ensure_list(tx, list)?;
            let n = tx
                .prepare_cached(
                    "UPDATE members SET moderated = ?3 WHERE list_id = ?1 AND address = ?2",
                )
                .and_then(|mut st| st.execute(params![list.0, address.to_string(), moderated]))
                .map_err(storage("set moderation flag"))?;
            Ok(n > 0)
        })
    }

    /// A member's moderation flag; `None` if the address is not on the list.
    pub fn moderated(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<bool>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.moderated(list, address));
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        conn.prepare_cached("SELECT moderated FROM members WHERE list_id = ?1 AND address = ?2")
            .and_then(|mut st| {
                st.query_row(params![list.0, address.to_string()], |r| r.get(0))
                    .optional()
            })
            .map_err(storage("read moderation flag"))
    }

    /// The addresses of the list's moderated members, in member-id order: for exports and
    /// `herald list show`. Moderation is rare, so this is a short list in practice; `limit`
    /// bounds it anyway.
    pub fn moderated_members(
        &self,
        list: ListId,
        limit: usize,
    ) -> Result<Vec<Address>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg
            .moderated_members(list, i64::try_from(limit).unwrap_or(i64::MAX))?
            .iter()
            .map(|t| parse_stored(t))
            .collect());
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        let mut st = conn
            .prepare_cached(
                "SELECT address FROM members WHERE list_id = ?1 AND moderated = 1 \
                 ORDER BY id LIMIT ?2",
            )
            .map_err(storage("list moderated members"))?;
        let rows = st
            .query_map(
                params![list.0, i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| r.get::<_, String>(0),
            )
            .map_err(storage("list moderated members"))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(parse_stored(
                &row.map_err(storage("list moderated members"))?,
            )?);
        }
        Ok(out)
    }
}

/// A stored member address back to an [`Address`].
fn parse_stored(text: &str) -> Result<Address, DirectoryError> {
    Address::parse(text).map_err(|e| DirectoryError::Corrupt {
        what: "members.address",
        reason: format!("{text:?}: {e}"),
    })
}
