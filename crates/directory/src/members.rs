//! Members: bulk and single adds, removal, status, lookup, and the paged scan fan-out uses.
//!
//! Invariants:
//! - Member ids only grow (AUTOINCREMENT); re-adding an address already on the list keeps its id,
//!   replaces its name, fields and spelling (e.g. case of the local part), and keeps its status:
//!   re-importing a file must not re-enable members that bounce handling disabled.
//! - `members_page` returns rows in id order from a range scan on `members(list_id, id)`, so
//!   paging with `after = last id seen` visits every matching member exactly once, and `up_to`
//!   pins the snapshot a post was accepted against.
//!
//! Limits: a page holds at most [`MAX_PAGE_LIMIT`] members; names and fields are bounded by the
//! limits in [`crate::model`]; a disabled reason by [`MAX_REASON_CHARS`].

use crate::consent::Consent;
use crate::error::{storage, DirectoryError};
use crate::lists::ensure_list;
use crate::model::{is_forbidden_char, validate_new_member, MemberCounts, NewMember};
use crate::Directory;
use herald_types::{Address, ListId, Member, MemberId, MemberStatus};
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::collections::BTreeMap;

/// Largest page `members_page` serves; bounds the memory of one call.
pub const MAX_PAGE_LIMIT: usize = 100_000;
pub use crate::model::MAX_REASON_CHARS;

pub(crate) const MEMBER_COLUMNS: &str =
    "id, list_id, address, display_name, disabled_reason, fields";

const UPSERT: &str = "INSERT INTO members (list_id, address, display_name, fields) \
     VALUES (?1, ?2, ?3, ?4) \
     ON CONFLICT (list_id, address) DO UPDATE SET \
     address = excluded.address, display_name = excluded.display_name, fields = excluded.fields \
     RETURNING id";

/// Added/updated tally of one upsert batch.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Upserted {
    pub added: u64,
    pub updated: u64,
}

/// Highest member id ever handed out that is still present (any list). A row whose upsert
/// returns an id above this was inserted; at or below, it already existed. AUTOINCREMENT makes
/// new ids exceed every id ever used, so this needs no per-row lookup.
pub(crate) fn high_water(conn: &Connection) -> Result<i64, DirectoryError> {
    conn.query_row("SELECT COALESCE(MAX(id), 0) FROM members", [], |r| r.get(0))
        .map_err(storage("read highest member id"))
}

/// Inserts or updates `members` in the caller's transaction. `high` is the id high-water mark;
/// it advances as rows are inserted, so an address repeated within the input counts as updated.
pub(crate) fn upsert_members<'a>(
    conn: &Connection,
    list: ListId,
    members: impl IntoIterator<Item = &'a NewMember>,
    high: &mut i64,
    consent: Option<&Consent>,
) -> Result<Upserted, DirectoryError> {
    let mut st = conn
        .prepare_cached(UPSERT)
        .map_err(storage("prepare member upsert"))?;
    let mut tally = Upserted::default();
    for m in members {
        let fields = fields_json(&m.fields)?;
        let id: i64 = st
            .query_row(
                params![list.0, m.address.to_string(), m.display_name, fields],
                |r| r.get(0),
            )
            .map_err(storage("upsert member"))?;
        if let Some(c) = consent {
            // Fills a missing record only: an update keeps the member's earlier consent.
            crate::consent::record(conn, id, c, false)?;
        }
        if id > *high {
            *high = id;
            tally.added += 1;
        } else {
            tally.updated += 1;
        }
    }
    Ok(tally)
}

impl Directory {
    /// Adds many members in one transaction; members already on the list are updated (see the
    /// module doc). Returns how many were new. Everything is validated before anything is
    /// written, so an invalid member leaves the list untouched.
    pub fn add_members(&self, list: ListId, ms: &[NewMember]) -> Result<u64, DirectoryError> {
        for m in ms {
            validate_new_member(m)?;
        }
        let store = sqlite_or!(self, pg => pg.add_members(list, ms).map(|t| t.added));
        let tally = store.write(|tx| {
            ensure_list(tx, list)?;
            for m in ms {
                crate::suppression::refuse_on(store, tx, list, &m.address)?;
            }
            let mut high = high_water(tx)?;
            upsert_members(tx, list, ms, &mut high, None)
        })?;
        tracing::debug!(
            list = list.0,
            added = tally.added,
            updated = tally.updated,
            "members added"
        );
        Ok(tally.added)
    }

    /// Adds one member; `AlreadyMember` if the address (any case) is already on the list,
    /// `Refused` if it is suppressed or banned (see `suppression`). No consent is recorded (see [`Directory::add_member_consented`]).
    pub fn add_member(&self, list: ListId, m: &NewMember) -> Result<Member, DirectoryError> {
        self.add_member_with(list, m, None)
    }

    /// [`Directory::add_member`], recording how the subscription was consented to in the same
    /// transaction.
    pub fn add_member_consented(
        &self,
        list: ListId,
        m: &NewMember,
        consent: &Consent,
    ) -> Result<Member, DirectoryError> {
        self.add_member_with(list, m, Some(consent))
    }

    fn add_member_with(
        &self,
        list: ListId,
        m: &NewMember,
        consent: Option<&Consent>,
    ) -> Result<Member, DirectoryError> {
        validate_new_member(m)?;
        let fields = fields_json(&m.fields)?;
        let store = match self.backend() {
            crate::Backend::Sqlite(store) => store,
            crate::Backend::Postgres(pg) => {
                let id = pg.add_member(list, m, &fields, consent)?;
                return Ok(new_member(id, list, m));
            }
        };
        let id = store.write(|tx| {
            ensure_list(tx, list)?;
            // Before the membership check: a confirmed subscribe of a suppressed member that
            // is still on the list (disabled) must not go on to re-enable it.
            crate::suppression::refuse_on(store, tx, list, &m.address)?;
            if member_id(tx, list, &m.address)?.is_some() {
                return Err(DirectoryError::AlreadyMember(m.address.clone()));
            }
            tx.prepare_cached(
                "INSERT INTO members (list_id, address, display_name, fields) \
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    list.0,
                    m.address.to_string(),
                    m.display_name,
                    fields
                ])
            })
            .map_err(storage("insert member"))?;
            let id = tx.last_insert_rowid();
            if let Some(c) = consent {
                crate::consent::record(tx, id, c, true)?;
            }
            Ok(id)
        })?;
        Ok(new_member(id, list, m))
    }

    /// Removes a member, with their bounce history and score on this list (what is
    /// not needed any more is not kept; a re-subscribed member starts with a clean record),
    /// and records when they left (older subscription links then subscribe nobody).
    /// One transaction, so a crash never leaves the history of a removed member behind. False
    /// if the address was not on the list (any history under it is removed all the same).
    pub fn remove_member(&self, list: ListId, address: &Address) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.remove_member(list, address));
        let addr = address.to_string();
        store.write(|tx| {
            ensure_list(tx, list)?;
            let n = tx
                .prepare_cached("DELETE FROM members WHERE list_id = ?1 AND address = ?2")
                .and_then(|mut st| st.execute(params![list.0, addr]))
                .map_err(storage("delete member"))?;
            for sql in [
                "DELETE FROM bounce_events WHERE list_id = ?1 AND address = ?2",
                "DELETE FROM bounce_scores WHERE list_id = ?1 AND address = ?2",
            ] {
                tx.prepare_cached(sql)
                    .and_then(|mut st| st.execute(params![list.0, addr]))
                    .map_err(storage("delete member's bounce history"))?;
            }
            // Every way off a list passes here: the departure voids the older subscription
            // links still in the person's mailbox (see `links`).
            if n > 0 {
                crate::links::record_departure(tx, list, &addr, herald_types::unix_ms_now())?;
            }
            Ok(n > 0)
        })
    }

    /// The member with this address (any case), if on the list.
    pub fn member(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<Member>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.member(list, address));
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        let sql =
            format!("SELECT {MEMBER_COLUMNS} FROM members WHERE list_id = ?1 AND address = ?2");
        let row = conn
            .prepare_cached(&sql)
            .and_then(|mut st| {
                st.query_row(params![list.0, address.to_string()], MemberRow::from_row)
                    .optional()
            })
            .map_err(storage("read member"))?;
        row.map(MemberRow::decode).transpose()
    }

    /// Enables or disables a member. False if the address was not on the list; `Refused` when
    /// enabling a suppressed address.
    pub fn set_member_status(
        &self,
        list: ListId,
        address: &Address,
        status: &MemberStatus,
    ) -> Result<bool, DirectoryError> {
        let reason = match status {
            MemberStatus::Enabled => None,
            MemberStatus::Disabled(reason) => {
                check_reason(reason)?;
                Some(reason.as_str())
            }
        };
        let store = sqlite_or!(self, pg => pg.set_member_status(list, address, reason));
        store.write(|tx| {
            ensure_list(tx, list)?;
            if reason.is_none() {
                crate::suppression::refuse_enable_on(tx, list, address)?;
            }
            let n = tx
                .prepare_cached(
                    "UPDATE members SET disabled_reason = ?3 WHERE list_id = ?1 AND address = ?2",
                )
                .and_then(|mut st| st.execute(params![list.0, address.to_string(), reason]))
                .map_err(storage("set member status"))?;
            Ok(n > 0)
        })
    }

    /// Up to `limit` members with `after < id <= up_to`, in id order; only enabled ones when
    /// `enabled_only`. Page on by passing the last id returned as the next `after`; a page shorter
    /// than `limit` (or empty) is the last. Each page is its own read snapshot: a member disabled
    /// between pages is skipped if not yet reached, and one added later has an id above `up_to`.
    pub fn members_page(
        &self,
        list: ListId,
        after: MemberId,
        up_to: MemberId,
        limit: usize,
        enabled_only: bool,
    ) -> Result<Vec<Member>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.page(list, after, up_to, limit, enabled_only, None));
        let filter = if enabled_only {
            "AND disabled_reason IS NULL"
        } else {
            ""
        };
        self.page_where(store, list, after, up_to, limit, filter, None)
    }

    /// One page of the `members(list_id, id)` range scan with an extra `filter` (fixed SQL, never
    /// input), which may name `?5`, bound to `extra`. Shared by [`Directory::members_page`] and
    /// the delivery-mode page (`delivery`), so both keep the index plan tested below.
    #[allow(clippy::too_many_arguments)] // the scan's bounds plus its fixed filter
    pub(crate) fn page_where(
        &self,
        store: &crate::store::Store,
        list: ListId,
        after: MemberId,
        up_to: MemberId,
        limit: usize,
        filter: &str,
        extra: Option<&str>,
    ) -> Result<Vec<Member>, DirectoryError> {
        if limit > MAX_PAGE_LIMIT {
            return Err(DirectoryError::invalid(
                "limit",
                format!("at most {MAX_PAGE_LIMIT} members per page"),
            ));
        }
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        let sql = format!(
            "SELECT {MEMBER_COLUMNS} FROM members \
             WHERE list_id = ?1 AND id > ?2 AND id <= ?3 {filter} ORDER BY id LIMIT ?4"
        );
        let mut st = conn
            .prepare_cached(&sql)
            .map_err(storage("prepare member page"))?;
        // `limit` <= MAX_PAGE_LIMIT, so the cast cannot truncate.
        let (l, a, u, n) = (list.0, after.0, up_to.0, limit as i64);
        let rows = match extra {
            Some(x) => st.query_map(params![l, a, u, n, x], MemberRow::from_row),
            None => st.query_map(params![l, a, u, n], MemberRow::from_row),
        }
        .map_err(storage("read member page"))?;
        let mut out = Vec::with_capacity(limit.min(4096));
        for row in rows {
            out.push(row.map_err(storage("read member page"))?.decode()?);
        }
        Ok(out)
    }

    /// Total, enabled and disabled members of a list. One index scan: linear in list size
    /// (tens of milliseconds for a million members), so not for a per-copy hot path.
    pub fn member_counts(&self, list: ListId) -> Result<MemberCounts, DirectoryError> {
        let (total, disabled): (i64, i64) = match self.backend() {
            crate::Backend::Postgres(pg) => pg.member_counts(list)?,
            crate::Backend::Sqlite(store) => {
                let conn = store.reader()?;
                ensure_list(&conn, list)?;
                conn.prepare_cached(
                    "SELECT COUNT(*), COUNT(disabled_reason) FROM members WHERE list_id = ?1",
                )
                .and_then(|mut st| st.query_row([list.0], |r| Ok((r.get(0)?, r.get(1)?))))
                .map_err(storage("count members"))?
            }
        };
        let total = u64::try_from(total).unwrap_or(0);
        let disabled = u64::try_from(disabled).unwrap_or(0);
        Ok(MemberCounts {
            total,
            enabled: total.saturating_sub(disabled),
            disabled,
        })
    }

    /// The highest member id on the list (0 when empty): the snapshot a post records at
    /// acceptance.
    pub fn max_member_id(&self, list: ListId) -> Result<MemberId, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.max_member_id(list));
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        let max: Option<i64> = conn
            .prepare_cached("SELECT MAX(id) FROM members WHERE list_id = ?1")
            .and_then(|mut st| st.query_row([list.0], |r| r.get(0)))
            .map_err(storage("read max member id"))?;
        Ok(MemberId(max.unwrap_or(0)))
    }
}

/// The member `add_member` just inserted.
fn new_member(id: i64, list: ListId, m: &NewMember) -> Member {
    Member {
        id: MemberId(id),
        list_id: list,
        address: m.address.clone(),
        display_name: m.display_name.clone(),
        status: MemberStatus::Enabled,
        fields: m.fields.clone(),
    }
}

fn member_id(
    conn: &Connection,
    list: ListId,
    address: &Address,
) -> Result<Option<i64>, DirectoryError> {
    conn.prepare_cached("SELECT id FROM members WHERE list_id = ?1 AND address = ?2")
        .and_then(|mut st| {
            st.query_row(params![list.0, address.to_string()], |r| r.get(0))
                .optional()
        })
        .map_err(storage("find member"))
}

pub(crate) fn check_reason(reason: &str) -> Result<(), DirectoryError> {
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(DirectoryError::invalid(
            "status",
            format!("disabled reason is longer than {MAX_REASON_CHARS} characters"),
        ));
    }
    if let Some(c) = reason.chars().find(|&c| is_forbidden_char(c)) {
        return Err(DirectoryError::invalid(
            "status",
            format!("disabled reason contains control character {c:?}"),
        ));
    }
    Ok(())
}

/// Custom fields as stored: a JSON object. The common empty case skips serde.
pub(crate) fn fields_json(fields: &BTreeMap<String, String>) -> Result<String, DirectoryError> {
    if fields.is_empty() {
        return Ok("{}".to_string());
    }
    serde_json::to_string(fields)
        .map_err(|e| DirectoryError::invalid("fields", format!("cannot serialize: {e}")))
}

/// A member row before its text columns are decoded (both backends decode with it).
pub(crate) struct MemberRow {
    pub(crate) id: i64,
    pub(crate) list_id: i64,
    pub(crate) address: String,
    pub(crate) display_name: Option<String>,
    pub(crate) disabled_reason: Option<String>,
    pub(crate) fields: String,
}

impl MemberRow {
    pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<MemberRow> {
        Ok(MemberRow {
            id: row.get(0)?,
            list_id: row.get(1)?,
            address: row.get(2)?,
            display_name: row.get(3)?,
            disabled_reason: row.get(4)?,
            fields: row.get(5)?,
        })
    }

    pub(crate) fn decode(self) -> Result<Member, DirectoryError> {
        let address = Address::parse(&self.address).map_err(|e| DirectoryError::Corrupt {
            what: "members.address",
            reason: format!("{:?}: {e}", self.address),
        })?;
        let fields = if self.fields == "{}" {
            BTreeMap::new()
        } else {
            serde_json::from_str(&self.fields).map_err(|e| DirectoryError::Corrupt {
                what: "members.fields",
                reason: e.to_string(),
            })?
        };
        Ok(Member {
            id: MemberId(self.id),
            list_id: ListId(self.list_id),
            address,
            display_name: self.display_name,
            status: match self.disabled_reason {
                None => MemberStatus::Enabled,
                Some(reason) => MemberStatus::Disabled(reason),
            },
            fields,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_types::ListSettings;

    /// The fan-out page query must be a range scan on `members(list_id, id)`, not a table scan
    /// or a sort: that is what keeps a page of a million-member list cheap.
    #[test]
    fn page_query_uses_the_list_id_index() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Directory::open(&tmp.path().join("d.db")).unwrap();
        let list = d
            .create_list(
                &Address::parse("l@x.example").unwrap(),
                &ListSettings::default(),
            )
            .unwrap();
        let crate::Backend::Sqlite(store) = d.backend() else {
            unreachable!("opened on SQLite")
        };
        let conn = store.reader().unwrap();
        for filter in [
            "AND disabled_reason IS NULL",
            "",
            "AND disabled_reason IS NULL AND delivery = 'regular'",
        ] {
            let sql = format!(
                "EXPLAIN QUERY PLAN SELECT {MEMBER_COLUMNS} FROM members \
                 WHERE list_id = ?1 AND id > ?2 AND id <= ?3 {filter} ORDER BY id LIMIT ?4"
            );
            let mut st = conn.prepare(&sql).unwrap();
            let plan: Vec<String> = st
                .query_map(params![list.id.0, 0, i64::MAX, 10], |r| {
                    r.get::<_, String>(3)
                })
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join(" | ");
            assert!(plan.contains("members_by_list"), "plan: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "plan sorts: {plan}");
        }
    }
}
