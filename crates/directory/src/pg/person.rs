//! A person's data on PostgreSQL: the SQL of `crate::person` (export in one snapshot, erasure
//! in one transaction leaving only the HMAC of the address).

use super::members::consent_from;
use super::{col, key, ms, unms, Db, PgStore};
use crate::error::DirectoryError;
use crate::person::{BounceRecord, Erased, MembershipRecord, PersonRecord, ScoreRecord};
use crate::refusal::{Ban, Suppression, SuppressionSource};
use herald_types::{Address, ListId};
use postgres::GenericClient;

impl PgStore {
    pub(crate) fn person(&self, address: &Address) -> Result<PersonRecord, DirectoryError> {
        let addr = address.to_string();
        let k = key(&addr);
        self.snapshot(|db| {
            let memberships = memberships(db, &k)?;
            let bounce_events = db
                .all(
                    "read bounce events",
                    "SELECT l.address, e.at_ms, e.kind, e.status, e.diagnostic, e.source, e.score \
                     FROM bounce_events e JOIN lists l ON l.id = e.list_id \
                     WHERE e.address_key = $1 ORDER BY e.at_ms, e.id",
                    &[&k],
                )?
                .iter()
                .map(|r| {
                    Ok(BounceRecord {
                        list: col(r, 0)?,
                        at_ms: unms(col(r, 1)?),
                        kind: col(r, 2)?,
                        status: col(r, 3)?,
                        diagnostic: col(r, 4)?,
                        source: col(r, 5)?,
                        score: col(r, 6)?,
                    })
                })
                .collect::<Result<Vec<_>, DirectoryError>>()?;
            let bounce_scores = db
                .all(
                    "read bounce scores",
                    "SELECT l.address, s.score, s.last_counted_ms \
                     FROM bounce_scores s JOIN lists l ON l.id = s.list_id \
                     WHERE s.address_key = $1 ORDER BY l.address_key",
                    &[&k],
                )?
                .iter()
                .map(|r| {
                    Ok(ScoreRecord {
                        list: col(r, 0)?,
                        score: col(r, 1)?,
                        last_counted_ms: unms(col(r, 2)?),
                    })
                })
                .collect::<Result<Vec<_>, DirectoryError>>()?;
            let suppressions = db
                .all(
                    "read suppressions",
                    "SELECT list_id, reason, source, at_ms FROM suppressions \
                     WHERE address_key = $1 ORDER BY list_id IS NOT NULL, list_id",
                    &[&k],
                )?
                .iter()
                .map(|r| {
                    let source: String = col(r, 2)?;
                    Ok(Suppression {
                        list: col::<Option<i64>>(r, 0)?.map(ListId),
                        address: address.clone(),
                        reason: col(r, 1)?,
                        source: SuppressionSource::parse(&source)
                            .unwrap_or(SuppressionSource::Operator),
                        at_ms: unms(col(r, 3)?),
                    })
                })
                .collect::<Result<Vec<_>, DirectoryError>>()?;
            let bans = db
                .all(
                    "read bans",
                    r#"SELECT id, list_id, pattern, created_at_ms FROM bans
                       WHERE lower(pattern COLLATE "C") = $1 ORDER BY id"#,
                    &[&k],
                )?
                .iter()
                .map(|r| {
                    Ok(Ban {
                        id: col(r, 0)?,
                        list: col::<Option<i64>>(r, 1)?.map(ListId),
                        pattern: col(r, 2)?,
                        created_at_ms: unms(col(r, 3)?),
                    })
                })
                .collect::<Result<Vec<_>, DirectoryError>>()?;
            let erased_at_ms = super::policy::erased_at(self, db, address)?;
            Ok(PersonRecord {
                address: addr.clone(),
                memberships,
                bounce_events,
                bounce_scores,
                suppressions,
                bans,
                erased_at_ms,
            })
        })
    }

    pub(crate) fn erase_person(&self, address: &Address) -> Result<Erased, DirectoryError> {
        let k = key(&address.to_string());
        let now = ms(herald_types::unix_ms_now());
        self.write(|db| {
            let mut run = |sql: &str| db.exec("erase", sql, &[&k]);
            let erased = Erased {
                memberships: run("DELETE FROM members WHERE address_key = $1")?,
                bounce_events: run("DELETE FROM bounce_events WHERE address_key = $1")?,
                bounce_scores: run("DELETE FROM bounce_scores WHERE address_key = $1")?,
                suppressions: run("DELETE FROM suppressions WHERE address_key = $1")?,
                bans: run(r#"DELETE FROM bans WHERE lower(pattern COLLATE "C") = $1"#)?,
            };
            run("DELETE FROM departures WHERE address_key = $1")?;
            let ekey = super::policy::erasure_key(self, db)?;
            let hash = herald_types::token::erasure_hash(&ekey, address);
            db.exec(
                "record erasure",
                "INSERT INTO erased (hash, at_ms) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING",
                &[&hash, &now],
            )?;
            Ok(erased)
        })
    }
}

fn memberships<C: GenericClient>(
    db: &mut Db<'_, C>,
    k: &str,
) -> Result<Vec<MembershipRecord>, DirectoryError> {
    let rows = db.all(
        "read memberships",
        "SELECT l.address, m.id, m.address, m.display_name, m.fields, m.disabled_reason, \
                m.delivery, p.skip_if_addressed, c.at_ms, c.source, c.client, m.moderated, \
                m.language \
         FROM members m JOIN lists l ON l.id = m.list_id \
         LEFT JOIN member_prefs p ON p.member_id = m.id \
         LEFT JOIN member_consent c ON c.member_id = m.id \
         WHERE m.address_key = $1 ORDER BY l.address_key",
        &[&k],
    )?;
    rows.iter()
        .map(|r| {
            let fields: String = col(r, 4)?;
            let consent = match col::<Option<i64>>(r, 8)? {
                Some(at) => consent_from(at, &col::<String>(r, 9)?, col(r, 10)?),
                None => None,
            };
            Ok(MembershipRecord {
                list: col(r, 0)?,
                member_id: col(r, 1)?,
                address: col(r, 2)?,
                display_name: col(r, 3)?,
                // A field text that does not parse is shown empty rather than failing the export.
                fields: serde_json::from_str(&fields).unwrap_or_default(),
                disabled_reason: col(r, 5)?,
                delivery: col(r, 6)?,
                skip_if_addressed: col::<Option<bool>>(r, 7)?.unwrap_or(false),
                moderated: col(r, 11)?,
                language: col(r, 12)?,
                consent,
            })
        })
        .collect()
}
