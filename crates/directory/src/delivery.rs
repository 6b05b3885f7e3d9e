//! Per-member delivery mode: read, set, count, and the page scan that fan-out
//! uses to send a post to the members of one mode only.
//!
//! Invariants: the stored word is one of [`DeliveryMode`]'s four (a `CHECK` in the schema);
//! a member's mode never changes their status, id or membership, so a `nomail` member still
//! counts, may post and gets confirmations. The page is the same `members(list_id, id)` range
//! scan as `members_page` with one more column compared per row, so the fan-out hot path stays
//! one indexed scan (see the plan test in `members`).
//!
//! SECURITY: modes arrive typed ([`DeliveryMode`]); only its fixed words reach SQL, as bound
//! parameters.

use crate::error::{storage, DirectoryError};
use crate::lists::ensure_list;
use crate::pg::MemberColumn;
use crate::Directory;
use herald_types::{Address, DeliveryMode, ListId, Member, MemberId};
use rusqlite::{params, OptionalExtension};
use std::collections::BTreeMap;

impl Directory {
    /// Up to `limit` enabled members with `after < id <= up_to` whose delivery mode is `mode`,
    /// in id order (paging as [`Directory::members_page`]). Fan-out sends single posts to the
    /// `Regular` page and a digest to the page of its mode.
    pub fn delivery_page(
        &self,
        list: ListId,
        after: MemberId,
        up_to: MemberId,
        limit: usize,
        mode: DeliveryMode,
    ) -> Result<Vec<Member>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.page(list, after, up_to, limit, true, Some(mode)));
        self.page_where(
            store,
            list,
            after,
            up_to,
            limit,
            "AND disabled_reason IS NULL AND delivery = ?5",
            Some(mode.as_str()),
        )
    }

    /// Sets a member's delivery mode. False if the address is not on the list.
    pub fn set_delivery(
        &self,
        list: ListId,
        address: &Address,
        mode: DeliveryMode,
    ) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.update_member_column(list, address, MemberColumn::Delivery, Some(mode.as_str())));
        store.write(|tx| {
            ensure_list(tx, list)?;
            let n = tx
                .prepare_cached(
                    "UPDATE members SET delivery = ?3 WHERE list_id = ?1 AND address = ?2",
                )
                .and_then(|mut st| st.execute(params![list.0, address.to_string(), mode.as_str()]))
                .map_err(storage("set delivery mode"))?;
            Ok(n > 0)
        })
    }

    /// Sets (or with `None` clears) a member's display name, checked like any name. False if the
    /// address is not on the list.
    pub fn set_display_name(
        &self,
        list: ListId,
        address: &Address,
        name: Option<&str>,
    ) -> Result<bool, DirectoryError> {
        if let Some(n) = name {
            crate::model::check_name(n).map_err(|e| DirectoryError::invalid("name", e))?;
        }
        let store = sqlite_or!(self, pg => pg.update_member_column(list, address, MemberColumn::DisplayName, name));
        store.write(|tx| {
            ensure_list(tx, list)?;
            let n = tx
                .prepare_cached(
                    "UPDATE members SET display_name = ?3 WHERE list_id = ?1 AND address = ?2",
                )
                .and_then(|mut st| st.execute(params![list.0, address.to_string(), name]))
                .map_err(storage("set display name"))?;
            Ok(n > 0)
        })
    }

    /// The highest member id of `list` (0 when it has none). Ids only grow, so the members added
    /// after this call are exactly those above it: an import's welcome range.
    pub fn last_member_id(&self, list: ListId) -> Result<MemberId, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.last_member_id(list).map(MemberId));
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        conn.prepare_cached("SELECT COALESCE(MAX(id), 0) FROM members WHERE list_id = ?1")
            .and_then(|mut st| st.query_row([list.0], |r| r.get(0)))
            .map(MemberId)
            .map_err(storage("read the last member id"))
    }

    /// A member's delivery mode; `None` if the address is not on the list.
    pub fn delivery(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<DeliveryMode>, DirectoryError> {
        let store =
            sqlite_or!(self, pg => pg.delivery(list, address)?.map(|w| decode(&w)).transpose());
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        let word: Option<String> = conn
            .prepare_cached("SELECT delivery FROM members WHERE list_id = ?1 AND address = ?2")
            .and_then(|mut st| {
                st.query_row(params![list.0, address.to_string()], |r| r.get(0))
                    .optional()
            })
            .map_err(storage("read delivery mode"))?;
        word.map(|w| decode(&w)).transpose()
    }

    /// Enabled members per delivery mode (modes with none are left out). One scan of the
    /// list's members: for `herald list show` and the digest stage's "anyone to send to?".
    pub fn delivery_counts(
        &self,
        list: ListId,
    ) -> Result<BTreeMap<DeliveryMode, u64>, DirectoryError> {
        let store = sqlite_or!(self, pg => {
            let mut out = BTreeMap::new();
            for (word, n) in pg.delivery_counts(list)? {
                out.insert(decode(&word)?, u64::try_from(n).unwrap_or(0));
            }
            Ok(out)
        });
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        let mut st = conn
            .prepare_cached(
                "SELECT delivery, COUNT(*) FROM members \
                 WHERE list_id = ?1 AND disabled_reason IS NULL GROUP BY delivery",
            )
            .map_err(storage("count delivery modes"))?;
        let rows = st
            .query_map([list.0], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(storage("count delivery modes"))?;
        let mut out = BTreeMap::new();
        for row in rows {
            let (word, n) = row.map_err(storage("count delivery modes"))?;
            out.insert(decode(&word)?, u64::try_from(n).unwrap_or(0));
        }
        Ok(out)
    }
}

fn decode(word: &str) -> Result<DeliveryMode, DirectoryError> {
    DeliveryMode::parse(word).ok_or_else(|| DirectoryError::Corrupt {
        what: "members.delivery",
        reason: format!("unknown delivery mode {word:?}"),
    })
}
