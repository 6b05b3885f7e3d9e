//! Bounce scores, history and member preferences on PostgreSQL: the SQL of `crate::bounces`.
//! The scoring rule is the bounce stage's, passed in (`crate::ScoreRule`); this file only
//! reads and stores.

use super::{col, key, ms, unms, Db, PgStore};
use crate::bounces::{
    cap, BounceApplied, BounceEvent, BounceScore, NewBounce, EVENT_COLUMNS, MAX_EVENTS_PER_ADDRESS,
    MAX_REPUTATION_EVENTS,
};
use crate::error::DirectoryError;
use herald_types::{Address, ListId, MemberId, PostId};
use postgres::{GenericClient, Row};
use std::collections::HashSet;

fn event(r: &Row) -> Result<BounceEvent, DirectoryError> {
    Ok(BounceEvent {
        id: col(r, 0)?,
        list_id: ListId(col(r, 1)?),
        address: col(r, 2)?,
        at_ms: unms(col(r, 3)?),
        kind: col(r, 4)?,
        status: col(r, 5)?,
        diagnostic: col(r, 6)?,
        source: col(r, 7)?,
        post: col::<Option<i64>>(r, 8)?.map(|p| PostId(p as u64)),
        counted: col(r, 9)?,
        score: col(r, 10)?,
    })
}

fn score_on<C: GenericClient>(
    db: &mut Db<'_, C>,
    list: ListId,
    k: &str,
) -> Result<Option<BounceScore>, DirectoryError> {
    db.opt(
        "read bounce score",
        "SELECT score, last_counted_ms FROM bounce_scores WHERE list_id = $1 AND address_key = $2",
        &[&list.0, &k],
    )?
    .map(|r| {
        Ok(BounceScore {
            score: col(&r, 0)?,
            last_counted_ms: unms(col(&r, 1)?),
        })
    })
    .transpose()
}

impl PgStore {
    pub(crate) fn apply_bounce(
        &self,
        list: ListId,
        address: Option<&Address>,
        b: &NewBounce,
        rule: crate::ScoreRule,
    ) -> Result<BounceApplied, DirectoryError> {
        let addr = address.map(|a| a.to_string()).unwrap_or_default();
        let k = key(&addr);
        self.write(|db| {
            let settings = super::lists::list_by_id_on(db, list)?
                .ok_or_else(|| DirectoryError::no_such_list(list))?
                .settings;
            let member: Option<Option<String>> = if addr.is_empty() {
                None
            } else {
                db.opt(
                    "read member for bounce",
                    "SELECT disabled_reason FROM members WHERE list_id = $1 AND address_key = $2",
                    &[&list.0, &k],
                )?
                .map(|r| col(&r, 0))
                .transpose()?
            };
            let prior = match member {
                Some(_) => score_on(db, list, &k)?,
                None => None,
            };
            let scored = rule(crate::ScoreInput {
                member: member.as_ref(),
                prior,
                settings: &settings,
                bounce: b,
            });
            if scored.out.counted {
                db.exec(
                    "update bounce score",
                    "INSERT INTO bounce_scores (list_id, address, score, last_counted_ms) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (list_id, address_key) DO UPDATE \
                     SET score = excluded.score, last_counted_ms = excluded.last_counted_ms",
                    &[&list.0, &addr, &scored.out.score, &ms(b.at_ms)],
                )?;
            }
            if let Some(why) = &scored.disable {
                db.exec(
                    "disable bouncing member",
                    "UPDATE members SET disabled_reason = $3 WHERE list_id = $1 AND address_key = $2",
                    &[&list.0, &k, why],
                )?;
            }
            let out = scored.out;
            db.exec(
                "insert bounce event",
                "INSERT INTO bounce_events \
                 (list_id, address, at_ms, kind, status, diagnostic, source, post_id, counted, score) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                &[
                    &list.0,
                    &addr,
                    &ms(b.at_ms),
                    &cap(&b.kind),
                    &b.status.as_deref().map(cap),
                    &cap(&b.diagnostic),
                    &b.source,
                    &b.post.map(|p| p.0 as i64),
                    &out.counted,
                    &out.score,
                ],
            )?;
            let keep = i64::from(if addr.is_empty() {
                MAX_REPUTATION_EVENTS
            } else {
                MAX_EVENTS_PER_ADDRESS
            });
            db.exec(
                "prune bounce events",
                "DELETE FROM bounce_events WHERE list_id = $1 AND address_key = $2 AND id <= \
                 (SELECT id FROM bounce_events WHERE list_id = $1 AND address_key = $2 \
                  ORDER BY id DESC LIMIT 1 OFFSET $3)",
                &[&list.0, &k, &keep],
            )?;
            Ok(out)
        })
    }

    pub(crate) fn bounce_score(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<BounceScore>, DirectoryError> {
        let k = key(&address.to_string());
        self.read(|db| score_on(db, list, &k))
    }

    pub(crate) fn bounce_events(
        &self,
        list: Option<ListId>,
        address: Option<&Address>,
        kind: Option<&str>,
        limit: i64,
    ) -> Result<Vec<BounceEvent>, DirectoryError> {
        let k = address.map(|a| key(&a.to_string()));
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM bounce_events \
             WHERE ($1::BIGINT IS NULL OR list_id = $1) AND ($2::TEXT IS NULL OR address_key = $2) \
             AND ($3::TEXT IS NULL OR kind = $3) ORDER BY id DESC LIMIT $4"
        );
        self.read(|db| {
            if let Some(l) = list {
                super::lists::ensure_list(db, l)?;
            }
            db.all(
                "list bounces",
                &sql,
                &[&list.map(|l| l.0), &k, &kind, &limit],
            )?
            .iter()
            .map(event)
            .collect()
        })
    }

    pub(crate) fn set_skip_if_addressed(
        &self,
        list: ListId,
        address: &Address,
        skip: bool,
    ) -> Result<bool, DirectoryError> {
        let k = key(&address.to_string());
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            Ok(db.exec(
                "set member preference",
                "INSERT INTO member_prefs (member_id, skip_if_addressed) \
                 SELECT id, $3 FROM members WHERE list_id = $1 AND address_key = $2 \
                 ON CONFLICT (member_id) DO UPDATE SET skip_if_addressed = excluded.skip_if_addressed",
                &[&list.0, &k, &skip],
            )? > 0)
        })
    }

    pub(crate) fn skip_if_addressed_among(
        &self,
        list: ListId,
        addresses: &[Address],
    ) -> Result<HashSet<String>, DirectoryError> {
        let keys: Vec<String> = addresses.iter().map(|a| key(&a.to_string())).collect();
        self.read(|db| {
            db.all(
                "read member preferences",
                "SELECT m.address FROM members m JOIN member_prefs p ON p.member_id = m.id \
                 WHERE m.list_id = $1 AND m.address_key = ANY($2) AND p.skip_if_addressed",
                &[&list.0, &keys],
            )?
            .iter()
            .map(|r| col::<String>(r, 0).map(|a| a.to_ascii_lowercase()))
            .collect()
        })
    }

    pub(crate) fn is_enabled_member_upto(
        &self,
        list: ListId,
        up_to: MemberId,
        address: &Address,
    ) -> Result<bool, DirectoryError> {
        let k = key(&address.to_string());
        self.read(|db| {
            Ok(db
                .opt(
                    "check cross-post member",
                    "SELECT 1 FROM members WHERE list_id = $1 AND address_key = $2 AND id <= $3 \
                     AND disabled_reason IS NULL AND delivery = 'regular'",
                    &[&list.0, &k, &up_to.0],
                )?
                .is_some())
        })
    }

    pub(crate) fn reset_bounce_score(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<bool, DirectoryError> {
        let k = key(&address.to_string());
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            db.exec(
                "reset bounce score",
                "DELETE FROM bounce_scores WHERE list_id = $1 AND address_key = $2",
                &[&list.0, &k],
            )?;
            Ok(db
                .opt(
                    "find member",
                    "SELECT 1 FROM members WHERE list_id = $1 AND address_key = $2",
                    &[&list.0, &k],
                )?
                .is_some())
        })
    }
}
