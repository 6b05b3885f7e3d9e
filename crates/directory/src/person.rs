//! One person's data (GDPR articles 15 and 17): everything the directory holds
//! about an address — memberships with names, fields, status, delivery mode, preferences and
//! consent, bounce history and scores, suppression entries, exact-address bans — read in one
//! snapshot ([`Directory::person`]) or erased in one transaction ([`Directory::erase_person`]).
//!
//! Erasure leaves exactly one trace: an HMAC of the address (`herald_types::token::
//! erasure_hash`) under a key generated in this database at migration 6, in the `erased` table.
//! Every add path checks it (see `suppression::suppression_on`), so the person is not re-added by
//! an import or a forged subscription, yet the address cannot be read back.
//!
//! Invariant (tested by walking the schema): after `erase_person(a)`, no column of any table
//! holds `a`.
//!
//! SECURITY: addresses arrive as validated [`Address`] values; the exported data is the person's
//! own and is returned only to an administrator (the API's admin guard).

use crate::error::storage;
use crate::refusal::{Ban, Suppression, SuppressionSource};
use crate::Directory;
use herald_types::{Address, ListId};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One membership, as the person's data export shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MembershipRecord {
    pub list: String,
    pub member_id: i64,
    /// The address as stored on this list (its case as given).
    pub address: String,
    pub display_name: Option<String>,
    pub fields: BTreeMap<String, String>,
    /// `None`: enabled; otherwise why it is disabled.
    pub disabled_reason: Option<String>,
    pub delivery: String,
    pub skip_if_addressed: bool,
    /// The member's posts are held for a moderator (see `moderation`).
    #[serde(default)]
    pub moderated: bool,
    /// The member's preferred language (`None`: the list's; see `texts`).
    #[serde(default)]
    pub language: Option<String>,
    pub consent: Option<crate::Consent>,
}

/// One bounce event about the person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BounceRecord {
    pub list: String,
    pub at_ms: u64,
    pub kind: String,
    pub status: Option<String>,
    pub diagnostic: String,
    pub source: String,
    pub score: f64,
}

/// A bounce score kept for the person on one list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreRecord {
    pub list: String,
    pub score: f64,
    pub last_counted_ms: u64,
}

/// Everything the directory holds about one address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PersonRecord {
    pub address: String,
    pub memberships: Vec<MembershipRecord>,
    pub bounce_events: Vec<BounceRecord>,
    pub bounce_scores: Vec<ScoreRecord>,
    pub suppressions: Vec<Suppression>,
    /// Bans naming exactly this address (domain and pattern bans are not about one person).
    pub bans: Vec<Ban>,
    /// When the address was erased, if it was (only this is left of it).
    pub erased_at_ms: Option<u64>,
}

/// What [`Directory::erase_person`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Erased {
    pub memberships: u64,
    pub bounce_events: u64,
    pub bounce_scores: u64,
    pub suppressions: u64,
    pub bans: u64,
}

/// The directory's erasure key (migration 6).
fn erasure_key(conn: &Connection) -> Result<Vec<u8>, crate::DirectoryError> {
    conn.prepare_cached("SELECT value FROM directory_keys WHERE name = 'erasure'")
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .map_err(storage("read erasure key"))
}

/// When `address` was erased, if it was.
pub(crate) fn erased_at(
    conn: &Connection,
    address: &Address,
) -> Result<Option<u64>, crate::DirectoryError> {
    let hash = herald_types::token::erasure_hash(&erasure_key(conn)?, address);
    conn.prepare_cached("SELECT at_ms FROM erased WHERE hash = ?1")
        .and_then(|mut st| st.query_row([hash], |r| r.get::<_, i64>(0)).optional())
        .map_err(storage("find erasure"))
        .map(|at| at.map(|ms| u64::try_from(ms).unwrap_or(0)))
}

/// The suppression an erasure amounts to (for the add paths' refusal).
pub(crate) fn erasure_suppression(address: &Address, at_ms: u64) -> Suppression {
    Suppression {
        list: None,
        address: address.clone(),
        reason: "the person's data was erased at their request".into(),
        source: SuppressionSource::Erasure,
        at_ms,
    }
}

impl Directory {
    /// Everything held about `address` (GDPR art. 15), read in one snapshot.
    pub fn person(&self, address: &Address) -> Result<PersonRecord, crate::DirectoryError> {
        let store = sqlite_or!(self, pg => pg.person(address));
        let conn = store.reader()?;
        let addr = address.to_string();
        let memberships = memberships(&conn, &addr)?;
        let bounce_events = conn
            .prepare_cached(
                "SELECT l.address, e.at_ms, e.kind, e.status, e.diagnostic, e.source, e.score
                 FROM bounce_events e JOIN lists l ON l.id = e.list_id
                 WHERE e.address = ?1 ORDER BY e.at_ms, e.id",
            )
            .and_then(|mut st| {
                st.query_map([&addr], |r| {
                    Ok(BounceRecord {
                        list: r.get(0)?,
                        at_ms: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                        kind: r.get(2)?,
                        status: r.get(3)?,
                        diagnostic: r.get(4)?,
                        source: r.get(5)?,
                        score: r.get(6)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(storage("read bounce events"))?;
        let bounce_scores = conn
            .prepare_cached(
                "SELECT l.address, s.score, s.last_counted_ms
                 FROM bounce_scores s JOIN lists l ON l.id = s.list_id
                 WHERE s.address = ?1 ORDER BY l.address",
            )
            .and_then(|mut st| {
                st.query_map([&addr], |r| {
                    Ok(ScoreRecord {
                        list: r.get(0)?,
                        score: r.get(1)?,
                        last_counted_ms: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(storage("read bounce scores"))?;
        let suppressions = conn
            .prepare_cached(
                "SELECT list_id, reason, source, at_ms FROM suppressions WHERE address = ?1
                 ORDER BY list_id IS NOT NULL, list_id",
            )
            .and_then(|mut st| {
                st.query_map([&addr], |r| {
                    Ok((
                        r.get::<_, Option<i64>>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(storage("read suppressions"))?
            .into_iter()
            .map(|(list, reason, source, at_ms)| Suppression {
                list: list.map(ListId),
                address: address.clone(),
                reason,
                source: SuppressionSource::parse(&source).unwrap_or(SuppressionSource::Operator),
                at_ms: u64::try_from(at_ms).unwrap_or(0),
            })
            .collect();
        let bans = conn
            .prepare_cached(
                "SELECT id, list_id, pattern, created_at_ms FROM bans WHERE pattern = ?1
                 COLLATE NOCASE ORDER BY id",
            )
            .and_then(|mut st| {
                st.query_map([&addr], |r| {
                    Ok(Ban {
                        id: r.get(0)?,
                        list: r.get::<_, Option<i64>>(1)?.map(ListId),
                        pattern: r.get(2)?,
                        created_at_ms: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(storage("read bans"))?;
        Ok(PersonRecord {
            address: addr,
            memberships,
            bounce_events,
            bounce_scores,
            suppressions,
            bans,
            erased_at_ms: erased_at(&conn, address)?,
        })
    }

    /// Erases `address` everywhere in the directory (GDPR art. 17), in one transaction: its
    /// memberships (with their consent and preferences), bounce history and scores, its
    /// suppression entries and exact-address bans; what is left is its erasure hash, which keeps
    /// every add path refusing it. Idempotent.
    pub fn erase_person(&self, address: &Address) -> Result<Erased, crate::DirectoryError> {
        let addr = address.to_string();
        let now = i64::try_from(herald_types::unix_ms_now()).unwrap_or(i64::MAX);
        let erased = match self.backend() {
            crate::Backend::Postgres(pg) => pg.erase_person(address)?,
            crate::Backend::Sqlite(store) => store.write(|tx| {
                let run = |sql: &str| -> Result<u64, crate::DirectoryError> {
                    tx.prepare_cached(sql)
                        .and_then(|mut st| st.execute([&addr]))
                        .map(|n| n as u64)
                        .map_err(storage("erase"))
                };
                let erased = Erased {
                    memberships: run("DELETE FROM members WHERE address = ?1")?,
                    bounce_events: run("DELETE FROM bounce_events WHERE address = ?1")?,
                    bounce_scores: run("DELETE FROM bounce_scores WHERE address = ?1")?,
                    suppressions: run("DELETE FROM suppressions WHERE address = ?1")?,
                    bans: run("DELETE FROM bans WHERE pattern = ?1 COLLATE NOCASE")?,
                };
                run("DELETE FROM departures WHERE address = ?1")?;
                let hash = herald_types::token::erasure_hash(&erasure_key(tx)?, address);
                tx.prepare_cached("INSERT OR IGNORE INTO erased (hash, at_ms) VALUES (?1, ?2)")
                    .and_then(|mut st| st.execute(params![hash, now]))
                    .map_err(storage("record erasure"))?;
                Ok(erased)
            })?,
        };
        tracing::info!(
            memberships = erased.memberships,
            bounce_events = erased.bounce_events,
            "person erased"
        );
        Ok(erased)
    }
}

fn memberships(
    conn: &Connection,
    addr: &str,
) -> Result<Vec<MembershipRecord>, crate::DirectoryError> {
    type Row = (
        String,
        i64,
        String,
        Option<String>,
        String,
        Option<String>,
        String,
        Option<i64>,
        bool,
        Option<String>,
    );
    let rows: Vec<Row> = conn
        .prepare_cached(
            "SELECT l.address, m.id, m.address, m.display_name, m.fields, m.disabled_reason,
                    m.delivery, p.skip_if_addressed, m.moderated, m.language
             FROM members m JOIN lists l ON l.id = m.list_id
             LEFT JOIN member_prefs p ON p.member_id = m.id
             WHERE m.address = ?1 ORDER BY l.address",
        )
        .and_then(|mut st| {
            st.query_map([addr], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()
        })
        .map_err(storage("read memberships"))?;
    let mut out = Vec::with_capacity(rows.len());
    for (
        list,
        member_id,
        address,
        display_name,
        fields,
        disabled_reason,
        delivery,
        skip,
        moderated,
        language,
    ) in rows
    {
        out.push(MembershipRecord {
            list,
            member_id,
            address,
            display_name,
            // A field text that does not parse is shown empty rather than failing the export.
            fields: serde_json::from_str(&fields).unwrap_or_default(),
            disabled_reason,
            delivery,
            skip_if_addressed: skip.unwrap_or(0) != 0,
            moderated,
            language,
            consent: consent_of(conn, member_id)?,
        });
    }
    Ok(out)
}

/// The consent recorded for member `id`.
fn consent_of(conn: &Connection, id: i64) -> Result<Option<crate::Consent>, crate::DirectoryError> {
    let row: Option<(i64, String, Option<String>)> = conn
        .prepare_cached("SELECT at_ms, source, client FROM member_consent WHERE member_id = ?1")
        .and_then(|mut st| {
            st.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .map_err(storage("read consent"))?;
    Ok(row.and_then(|(at, source, client)| {
        Some(crate::Consent {
            at_ms: u64::try_from(at).unwrap_or(0),
            source: crate::ConsentSource::parse(&source)?,
            client,
        })
    }))
}
