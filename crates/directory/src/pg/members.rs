//! Members on PostgreSQL: the SQL of `crate::members`, `crate::delivery`, `crate::consent` and
//! the write side of `crate::bulk` and `crate::import` (validation stays there, shared).
//!
//! Bulk writes are batched: [`upsert_members`] sends up to [`UPSERT_CHUNK`] members in one
//! `INSERT … SELECT FROM unnest($arrays) … ON CONFLICT DO UPDATE … RETURNING id` (one round
//! trip per chunk instead of one per member), and the suppression/ban check of a batch is one
//! query for all its addresses (`policy::refusals`).

use super::{col, key, ms, unms, Db, PgStore};
use crate::consent::{Consent, ConsentSource};
use crate::error::DirectoryError;
use crate::members::{fields_json, MemberRow, Upserted, MEMBER_COLUMNS};
use crate::model::NewMember;
use crate::refusal::Refusal;
use herald_types::{Address, DeliveryMode, ListId, Member, MemberId};
use postgres::{GenericClient, Row};
use std::collections::HashMap;

/// Members per upsert statement: large enough that the round trip is noise, small enough that
/// one statement's arrays stay a few MiB.
const UPSERT_CHUNK: usize = 10_000;

pub(crate) fn member_row(row: &Row) -> Result<MemberRow, DirectoryError> {
    Ok(MemberRow {
        id: col(row, 0)?,
        list_id: col(row, 1)?,
        address: col(row, 2)?,
        display_name: col(row, 3)?,
        disabled_reason: col(row, 4)?,
        fields: col(row, 5)?,
    })
}

/// Highest member id present (any list), as `crate::members::high_water`.
pub(crate) fn high_water<C: GenericClient>(db: &mut Db<'_, C>) -> Result<i64, DirectoryError> {
    let row = db.one(
        "read highest member id",
        "SELECT COALESCE(MAX(id), 0)::BIGINT FROM members",
        &[],
    )?;
    col(&row, 0)
}

/// Inserts or updates `members` in the caller's transaction, in chunks (see the module doc).
/// Same results as the SQLite upsert row by row: a repeated address keeps the id of its first
/// occurrence and the name, fields and spelling of its last, and counts as updated.
pub(crate) fn upsert_members<C: GenericClient>(
    db: &mut Db<'_, C>,
    list: ListId,
    members: &[&NewMember],
    high: &mut i64,
    consent: Option<&Consent>,
) -> Result<Upserted, DirectoryError> {
    let mut tally = Upserted::default();
    for chunk in members.chunks(UPSERT_CHUNK) {
        // One row per address within a statement (ON CONFLICT may not touch a row twice).
        let mut slot: HashMap<String, usize> = HashMap::with_capacity(chunk.len());
        let (mut addrs, mut names, mut fields) = (Vec::new(), Vec::new(), Vec::new());
        for m in chunk {
            let text = m.address.to_string();
            let f = fields_json(&m.fields)?;
            match slot.get(&key(&text)) {
                Some(&i) => {
                    addrs[i] = text;
                    names[i] = m.display_name.clone();
                    fields[i] = f;
                }
                None => {
                    slot.insert(key(&text), addrs.len());
                    addrs.push(text);
                    names.push(m.display_name.clone());
                    fields.push(f);
                }
            }
        }
        let rows = db.all(
            "upsert members",
            "INSERT INTO members (list_id, address, display_name, fields) \
             SELECT $1, a, n, f FROM unnest($2::text[], $3::text[], $4::text[]) \
                 WITH ORDINALITY AS t(a, n, f, i) ORDER BY i \
             ON CONFLICT (list_id, address_key) DO UPDATE SET address = excluded.address, \
                 display_name = excluded.display_name, fields = excluded.fields \
             RETURNING id",
            &[&list.0, &addrs, &names, &fields],
        )?;
        let mut ids = Vec::with_capacity(rows.len());
        let mut added = 0u64;
        let before = *high;
        for r in &rows {
            let id: i64 = col(r, 0)?;
            if id > before {
                added += 1;
            }
            *high = (*high).max(id);
            ids.push(id);
        }
        tally.added += added;
        tally.updated += chunk.len() as u64 - added;
        if let Some(c) = consent {
            // Fills missing records only: an update keeps the member's earlier consent.
            db.exec(
                "record consent",
                "INSERT INTO member_consent (member_id, at_ms, source, client) \
                 SELECT unnest($1::bigint[]), $2, $3, $4 ON CONFLICT (member_id) DO NOTHING",
                &[&ids, &ms(c.at_ms), &c.source.as_str(), &c.client],
            )?;
        }
    }
    Ok(tally)
}

/// Members added in one call from which the table's planner statistics are refreshed.
const ANALYZE_AFTER_ADDED: u64 = 10_000;

/// After a bulk add, refreshes the planner's statistics of `members` when the add is a tenth
/// of the table or more (or the table was never analyzed), as autovacuum would, but at once:
/// without them, the fan-out page right after a million-member import was planned as a scan
/// and sort of the whole list per page (measured: 25 s instead of 1.3 s for 1,000,000
/// members). ANALYZE samples a bounded number of rows, so it costs milliseconds to a few
/// hundred whatever the table's size.
fn refresh_stats<C: GenericClient>(db: &mut Db<'_, C>, added: u64) -> Result<(), DirectoryError> {
    if added < ANALYZE_AFTER_ADDED {
        return Ok(());
    }
    let r = db.one(
        "read table statistics",
        "SELECT reltuples::BIGINT FROM pg_class WHERE oid = 'members'::regclass",
        &[],
    )?;
    let known: i64 = col(&r, 0)?;
    if known < 0 || added.saturating_mul(10) >= u64::try_from(known).unwrap_or(0) {
        db.exec("analyze members", "ANALYZE members", &[])?;
    }
    Ok(())
}

/// Writes a consent row for `member_id`; `replace` false keeps an existing one.
pub(crate) fn record_consent<C: GenericClient>(
    db: &mut Db<'_, C>,
    member_id: i64,
    c: &Consent,
    replace: bool,
) -> Result<(), DirectoryError> {
    let sql = if replace {
        "INSERT INTO member_consent (member_id, at_ms, source, client) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (member_id) DO UPDATE SET at_ms = excluded.at_ms, source = excluded.source, \
         client = excluded.client"
    } else {
        "INSERT INTO member_consent (member_id, at_ms, source, client) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (member_id) DO NOTHING"
    };
    db.exec(
        "record consent",
        sql,
        &[&member_id, &ms(c.at_ms), &c.source.as_str(), &c.client],
    )?;
    Ok(())
}

pub(crate) fn member_id<C: GenericClient>(
    db: &mut Db<'_, C>,
    list: ListId,
    address: &Address,
) -> Result<Option<i64>, DirectoryError> {
    let k = key(&address.to_string());
    db.opt(
        "find member",
        "SELECT id FROM members WHERE list_id = $1 AND address_key = $2",
        &[&list.0, &k],
    )?
    .map(|r| col(&r, 0))
    .transpose()
}

fn refused(address: &Address, why: Refusal) -> DirectoryError {
    DirectoryError::Refused {
        address: address.clone(),
        why: Box::new(why),
    }
}

impl PgStore {
    pub(crate) fn add_members(
        &self,
        list: ListId,
        ms: &[NewMember],
    ) -> Result<Upserted, DirectoryError> {
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            let addrs: Vec<&Address> = ms.iter().map(|m| &m.address).collect();
            let why = super::policy::refusals(self, db, list, &addrs)?;
            if let Some((a, w)) = addrs.iter().zip(why).find_map(|(a, w)| w.map(|w| (*a, w))) {
                return Err(refused(a, w));
            }
            let mut high = high_water(db)?;
            let all: Vec<&NewMember> = ms.iter().collect();
            let tally = upsert_members(db, list, &all, &mut high, None)?;
            refresh_stats(db, tally.added)?;
            Ok(tally)
        })
    }

    pub(crate) fn add_member(
        &self,
        list: ListId,
        m: &NewMember,
        fields: &str,
        consent: Option<&Consent>,
    ) -> Result<i64, DirectoryError> {
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            if let Some(why) = super::policy::refusal(self, db, list, &m.address)? {
                return Err(refused(&m.address, why));
            }
            if member_id(db, list, &m.address)?.is_some() {
                return Err(DirectoryError::AlreadyMember(m.address.clone()));
            }
            let row = db.one(
                "insert member",
                "INSERT INTO members (list_id, address, display_name, fields) \
                 VALUES ($1, $2, $3, $4) RETURNING id",
                &[&list.0, &m.address.to_string(), &m.display_name, &fields],
            )?;
            let id: i64 = col(&row, 0)?;
            if let Some(c) = consent {
                record_consent(db, id, c, true)?;
            }
            Ok(id)
        })
    }

    pub(crate) fn remove_member(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<bool, DirectoryError> {
        let k = key(&address.to_string());
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            let n = db.exec(
                "delete member",
                "DELETE FROM members WHERE list_id = $1 AND address_key = $2",
                &[&list.0, &k],
            )?;
            for sql in [
                "DELETE FROM bounce_events WHERE list_id = $1 AND address_key = $2",
                "DELETE FROM bounce_scores WHERE list_id = $1 AND address_key = $2",
            ] {
                db.exec("delete member's bounce history", sql, &[&list.0, &k])?;
            }
            if n > 0 {
                super::links::record_departure(db, list, address, herald_types::unix_ms_now())?;
            }
            Ok(n > 0)
        })
    }

    pub(crate) fn member(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<Member>, DirectoryError> {
        let k = key(&address.to_string());
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            let sql = format!(
                "SELECT {MEMBER_COLUMNS} FROM members WHERE list_id = $1 AND address_key = $2"
            );
            match db.opt("read member", &sql, &[&list.0, &k])? {
                Some(r) => member_row(&r)?.decode().map(Some),
                None => Ok(None),
            }
        })
    }

    pub(crate) fn set_member_status(
        &self,
        list: ListId,
        address: &Address,
        reason: Option<&str>,
    ) -> Result<bool, DirectoryError> {
        let k = key(&address.to_string());
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            if reason.is_none() {
                if let Some(s) = super::policy::suppression_on(self, db, Some(list), address)? {
                    return Err(refused(address, Refusal::Suppressed(s)));
                }
            }
            let n = db.exec(
                "set member status",
                "UPDATE members SET disabled_reason = $3 WHERE list_id = $1 AND address_key = $2",
                &[&list.0, &k, &reason],
            )?;
            Ok(n > 0)
        })
    }

    /// One page of the `members(list_id, id)` range scan; `mode` narrows it to enabled
    /// members of one delivery mode, `enabled_only` to enabled members.
    pub(crate) fn page(
        &self,
        list: ListId,
        after: MemberId,
        up_to: MemberId,
        limit: usize,
        enabled_only: bool,
        mode: Option<DeliveryMode>,
    ) -> Result<Vec<Member>, DirectoryError> {
        if limit > crate::MAX_PAGE_LIMIT {
            return Err(DirectoryError::invalid(
                "limit",
                format!("at most {} members per page", crate::MAX_PAGE_LIMIT),
            ));
        }
        // `limit` <= MAX_PAGE_LIMIT, so the cast cannot truncate.
        let n = limit as i64;
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            let sql = page_sql(enabled_only, mode.is_some());
            let rows = match mode {
                Some(mode) => db.all(
                    "read member page",
                    &sql,
                    &[&list.0, &after.0, &up_to.0, &n, &mode.as_str()],
                )?,
                None => db.all("read member page", &sql, &[&list.0, &after.0, &up_to.0, &n])?,
            };
            rows.iter().map(|r| member_row(r)?.decode()).collect()
        })
    }

    /// (total, disabled) members of a list.
    pub(crate) fn member_counts(&self, list: ListId) -> Result<(i64, i64), DirectoryError> {
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            let r = db.one(
                "count members",
                "SELECT COUNT(*), COUNT(disabled_reason) FROM members WHERE list_id = $1",
                &[&list.0],
            )?;
            Ok((col(&r, 0)?, col(&r, 1)?))
        })
    }

    pub(crate) fn max_member_id(&self, list: ListId) -> Result<MemberId, DirectoryError> {
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            let r = db.one(
                "read max member id",
                "SELECT MAX(id) FROM members WHERE list_id = $1",
                &[&list.0],
            )?;
            Ok(MemberId(col::<Option<i64>>(&r, 0)?.unwrap_or(0)))
        })
    }

    /// Runs one of the single-member UPDATEs of `delivery` (mode, name) on the list.
    pub(crate) fn update_member_column(
        &self,
        list: ListId,
        address: &Address,
        column: MemberColumn,
        value: Option<&str>,
    ) -> Result<bool, DirectoryError> {
        let k = key(&address.to_string());
        let (ctx, sql) = match column {
            MemberColumn::Delivery => (
                "set delivery mode",
                "UPDATE members SET delivery = $3 WHERE list_id = $1 AND address_key = $2",
            ),
            MemberColumn::DisplayName => (
                "set display name",
                "UPDATE members SET display_name = $3 WHERE list_id = $1 AND address_key = $2",
            ),
        };
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            Ok(db.exec(ctx, sql, &[&list.0, &k, &value])? > 0)
        })
    }

    pub(crate) fn delivery(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<String>, DirectoryError> {
        let k = key(&address.to_string());
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            db.opt(
                "read delivery mode",
                "SELECT delivery FROM members WHERE list_id = $1 AND address_key = $2",
                &[&list.0, &k],
            )?
            .map(|r| col(&r, 0))
            .transpose()
        })
    }

    /// Whether `address` is an enabled member of `list` and whether it is moderated; `None`
    /// when it is not a member (`Directory::posting_state`).
    pub(crate) fn posting_state(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<crate::PostingState>, DirectoryError> {
        let k = key(&address.to_string());
        self.read(|db| {
            db.opt(
                "read posting right",
                "SELECT disabled_reason IS NULL, moderated FROM members \
                 WHERE list_id = $1 AND address_key = $2",
                &[&list.0, &k],
            )?
            .map(|r| {
                Ok(crate::PostingState {
                    enabled: col(&r, 0)?,
                    moderated: col(&r, 1)?,
                })
            })
            .transpose()
        })
    }

    pub(crate) fn set_moderated(
        &self,
        list: ListId,
        address: &Address,
        moderated: bool,
    ) -> Result<bool, DirectoryError> {
        let k = key(&address.to_string());
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            Ok(db.exec(
                "set moderation flag",
                "UPDATE members SET moderated = $3 WHERE list_id = $1 AND address_key = $2",
                &[&list.0, &k, &moderated],
            )? > 0)
        })
    }

    pub(crate) fn moderated(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<bool>, DirectoryError> {
        let k = key(&address.to_string());
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            db.opt(
                "read moderation flag",
                "SELECT moderated FROM members WHERE list_id = $1 AND address_key = $2",
                &[&list.0, &k],
            )?
            .map(|r| col(&r, 0))
            .transpose()
        })
    }

    /// The addresses of `list`'s moderated members in id order, at most `limit`.
    pub(crate) fn moderated_members(
        &self,
        list: ListId,
        limit: i64,
    ) -> Result<Vec<String>, DirectoryError> {
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            db.all(
                "list moderated members",
                "SELECT address FROM members WHERE list_id = $1 AND moderated \
                 ORDER BY id LIMIT $2",
                &[&list.0, &limit],
            )?
            .iter()
            .map(|r| col(r, 0))
            .collect()
        })
    }

    /// The highest member id of `list` (0 when it has none).
    pub(crate) fn last_member_id(&self, list: ListId) -> Result<i64, DirectoryError> {
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            let r = db.one(
                "read the last member id",
                "SELECT COALESCE(MAX(id), 0)::BIGINT FROM members WHERE list_id = $1",
                &[&list.0],
            )?;
            col(&r, 0)
        })
    }

    pub(crate) fn delivery_counts(
        &self,
        list: ListId,
    ) -> Result<Vec<(String, i64)>, DirectoryError> {
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            db.all(
                "count delivery modes",
                "SELECT delivery, COUNT(*) FROM members \
                 WHERE list_id = $1 AND disabled_reason IS NULL GROUP BY delivery",
                &[&list.0],
            )?
            .iter()
            .map(|r| Ok((col(r, 0)?, col(r, 1)?)))
            .collect()
        })
    }

    /// (id, delivery word) of the list's members with `first <= id <= last`.
    /// (id, delivery word, moderated) of `list`'s members with `first <= id <= last`.
    pub(crate) fn member_options(
        &self,
        list: ListId,
        first: i64,
        last: i64,
    ) -> Result<Vec<(i64, String, bool)>, DirectoryError> {
        self.read(|db| {
            db.all(
                "read member options",
                "SELECT id, delivery, moderated FROM members \
                 WHERE list_id = $1 AND id >= $2 AND id <= $3",
                &[&list.0, &first, &last],
            )?
            .iter()
            .map(|r| Ok((col(r, 0)?, col(r, 1)?, col(r, 2)?)))
            .collect()
        })
    }

    pub(crate) fn member_consent(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<(i64, String, Option<String>)>, DirectoryError> {
        let k = key(&address.to_string());
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            db.opt(
                "read consent",
                "SELECT c.at_ms, c.source, c.client FROM member_consent c \
                 JOIN members m ON m.id = c.member_id WHERE m.list_id = $1 AND m.address_key = $2",
                &[&list.0, &k],
            )?
            .map(|r| Ok((col(&r, 0)?, col(&r, 1)?, col(&r, 2)?)))
            .transpose()
        })
    }

    pub(crate) fn record_consent(
        &self,
        list: ListId,
        address: &Address,
        consent: &Consent,
    ) -> Result<bool, DirectoryError> {
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            match member_id(db, list, address)? {
                Some(id) => record_consent(db, id, consent, true).map(|()| true),
                None => Ok(false),
            }
        })
    }

    /// One CSV import batch (as `crate::import`'s): refused rows are returned as (line,
    /// reason), the rest upserted with import consent.
    pub(crate) fn import_batch(
        &self,
        list: ListId,
        batch: &[(u64, NewMember)],
        high: &mut Option<i64>,
    ) -> Result<(Upserted, Vec<(u64, String)>), DirectoryError> {
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            let mut h = match *high {
                Some(h) => h,
                None => high_water(db)?,
            };
            let consent = Consent::now(ConsentSource::Import, None);
            let addrs: Vec<&Address> = batch.iter().map(|(_, m)| &m.address).collect();
            let why = super::policy::refusals(self, db, list, &addrs)?;
            let mut refused = Vec::new();
            let mut ok = Vec::with_capacity(batch.len());
            for ((line, m), w) in batch.iter().zip(why) {
                match w {
                    Some(w) => refused.push((*line, format!("{} cannot be added: {w}", m.address))),
                    None => ok.push(m),
                }
            }
            let tally = upsert_members(db, list, &ok, &mut h, Some(&consent))?;
            refresh_stats(db, tally.added)?;
            *high = Some(h);
            Ok((tally, refused))
        })
    }

    /// `Directory::import_members` (see `crate::bulk`): `checked[i]` is member i's problem.
    pub(crate) fn import_members(
        &self,
        list: ListId,
        batch: &[crate::bulk::ImportMember],
        checked: &[Option<String>],
        consent: Option<&Consent>,
    ) -> Result<Vec<crate::bulk::ImportOutcome>, DirectoryError> {
        use crate::bulk::ImportOutcome;
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            let mut high = high_water(db)?;
            let addrs: Vec<&Address> = batch.iter().map(|m| &m.member.address).collect();
            let why = super::policy::refusals(self, db, list, &addrs)?;
            let mut out = Vec::with_capacity(batch.len());
            for ((m, invalid), w) in batch.iter().zip(checked).zip(why) {
                if let Some(problem) = invalid {
                    out.push(ImportOutcome::Invalid(problem.clone()));
                    continue;
                }
                if let Some(w) = w {
                    out.push(ImportOutcome::Refused(w));
                    continue;
                }
                let tally = upsert_members(
                    db,
                    list,
                    &[&m.member],
                    &mut high,
                    m.consent.as_ref().or(consent),
                )?;
                let k = key(&m.member.address.to_string());
                db.exec(
                    "set imported delivery mode and moderation",
                    "UPDATE members SET delivery = $3, moderated = $4 \
                     WHERE list_id = $1 AND address_key = $2",
                    &[&list.0, &k, &m.delivery.as_str(), &m.moderated],
                )?;
                if let Some(reason) = &m.disabled {
                    db.exec(
                        "disable imported member",
                        "UPDATE members SET disabled_reason = $3 \
                         WHERE list_id = $1 AND address_key = $2 AND disabled_reason IS NULL",
                        &[&list.0, &k, reason],
                    )?;
                }
                out.push(if tally.added > 0 {
                    ImportOutcome::Added
                } else {
                    ImportOutcome::Updated
                });
            }
            Ok(out)
        })
    }
}

/// The fan-out page: a range scan of `members(list_id, id)` (see the plan test below), only
/// enabled members when `enabled_only`, of one delivery mode (`$5`) when `by_mode`.
fn page_sql(enabled_only: bool, by_mode: bool) -> String {
    let filter = match (by_mode, enabled_only) {
        (true, _) => "AND disabled_reason IS NULL AND delivery = $5",
        (false, true) => "AND disabled_reason IS NULL",
        (false, false) => "",
    };
    format!(
        "SELECT {MEMBER_COLUMNS} FROM members WHERE list_id = $1 AND id > $2 AND id <= $3 \
         {filter} ORDER BY id LIMIT $4"
    )
}

/// The member columns `update_member_column` may set (fixed SQL per column).
#[derive(Debug, Clone, Copy)]
pub(crate) enum MemberColumn {
    Delivery,
    DisplayName,
}

/// A consent row's parts back to a [`Consent`] (as the SQLite side decodes it).
pub(crate) fn consent_from(at: i64, source: &str, client: Option<String>) -> Option<Consent> {
    Some(Consent {
        at_ms: unms(at),
        source: ConsentSource::parse(source)?,
        client,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Directory;
    use herald_types::ListSettings;

    /// As on SQLite (`members::tests`): the fan-out page is a range scan on
    /// `members(list_id, id)` that stops after `limit` rows, never a scan and sort of the list,
    /// for a page in the middle of a list that was just bulk-loaded.
    #[test]
    fn page_query_uses_the_list_id_index() {
        let url = herald_pg_harness::PgServer::shared()
            .fresh_database()
            .expect("database");
        let d = Directory::open_postgres(&url, 1).expect("open");
        let mut lists = Vec::new();
        for (name, n) in [("big", 20_000), ("small", 2_000)] {
            let list = d
                .create_list(
                    &Address::parse(&format!("{name}@x.example")).expect("a"),
                    &ListSettings::default(),
                )
                .expect("list");
            let ms: Vec<NewMember> = (0..n)
                .map(|i| {
                    NewMember::new(Address::parse(&format!("m{i}@d{}.example", i % 50)).expect("a"))
                })
                .collect();
            d.add_members(list.id, &ms).expect("add");
            lists.push(list);
        }
        let crate::Backend::Postgres(pg) = d.backend() else {
            unreachable!("opened on PostgreSQL")
        };
        for ((enabled, by_mode), list) in [(true, false), (false, false), (true, true)]
            .into_iter()
            .flat_map(|c| lists.iter().map(move |l| (c, l)))
        {
            let sql = format!("EXPLAIN {}", page_sql(enabled, by_mode));
            let (after, up_to, n) = (100i64, i64::MAX, 5000i64);
            let plan: Vec<String> = pg
                .read(|db| {
                    let rows = if by_mode {
                        db.all(
                            "explain",
                            &sql,
                            &[&list.id.0, &after, &up_to, &n, &"regular"],
                        )?
                    } else {
                        db.all("explain", &sql, &[&list.id.0, &after, &up_to, &n])?
                    };
                    rows.iter().map(|r| col::<String>(r, 0)).collect()
                })
                .expect("explain");
            let plan = plan.join(" | ");
            // An index scan in id order that the LIMIT stops: members_by_list, or for the list
            // holding most rows the primary key, which is as good there.
            assert!(plan.contains("Index Scan"), "plan: {plan}");
            assert!(
                !plan.contains("Sort") && !plan.contains("Seq Scan"),
                "plan: {plan}"
            );
            if list.address.local() == "small" {
                assert!(plan.contains("members_by_list"), "plan: {plan}");
            }
        }
    }
}
