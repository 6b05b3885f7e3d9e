//! Bounce history and scores (schema version 2), and the per-member preferences fan-out reads.
//!
//! Scoring: the rule is the bounce stage's (`herald_bounce::score`: weights, once per
//! [`DAY_MS`], stale scores, the threshold), passed in as a [`ScoreRule`]; this module reads the
//! member and its score, asks the rule, and stores the score, the disabling and the event.
//! Everything happens in one IMMEDIATE transaction, so two bounces racing cannot both count.
//!
//! Invariants: an event only ever changes the member it names, on the list it names; list
//! reputation events use the empty address and never touch a member.
//!
//! Limits: history is pruned to [`MAX_EVENTS_PER_ADDRESS`] events per member (and
//! [`MAX_REPUTATION_EVENTS`] per list for reputation events), so a bounce bomb cannot grow the
//! database without bound; listings return at most [`MAX_BOUNCE_LISTING`] rows.
//!
//! SECURITY: kinds, statuses and diagnostics come from hostile mail; the bounce stage bounds and
//! cleans them, and this module caps them again before storing.

use crate::error::{storage, DirectoryError};
use crate::lists::{ensure_list, list_by_id_on};
use crate::Directory;
use herald_types::{Address, ListId, MemberId, MemberStatus, PostId};
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;
use std::collections::HashSet;

/// The once-per-day rule's period.
pub const DAY_MS: u64 = 24 * 3600 * 1000;
/// Events kept per member address and list; older ones are pruned on insert.
pub const MAX_EVENTS_PER_ADDRESS: u32 = 100;
/// Reputation (no member) events kept per list.
pub const MAX_REPUTATION_EVENTS: u32 = 1000;
/// Most rows a bounce listing returns.
pub const MAX_BOUNCE_LISTING: usize = 1000;
const MAX_TEXT_CHARS: usize = 256;

/// One bounce to record, already classified by the bounce stage.
#[derive(Debug, Clone)]
pub struct NewBounce {
    /// The class name (`hard`, `soft`, `delayed`, `auto_reply`, `policy`, …).
    pub kind: String,
    /// Score added when counted: 1.0 hard, 0.5 soft, 0 for kinds that never count.
    pub weight: f64,
    pub status: Option<String>,
    pub diagnostic: String,
    /// `dsn` (a bounce message) or `smtp` (our own session's final reply).
    pub source: &'static str,
    pub post: Option<PostId>,
    pub at_ms: u64,
}

/// What recording a bounce did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BounceApplied {
    pub member_found: bool,
    pub counted: bool,
    pub score: f64,
    /// This bounce disabled the member.
    pub disabled: bool,
}

/// A stored bounce event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BounceEvent {
    pub id: i64,
    pub list_id: ListId,
    /// Empty for list-reputation events.
    pub address: String,
    pub at_ms: u64,
    pub kind: String,
    pub status: Option<String>,
    pub diagnostic: String,
    pub source: String,
    pub post: Option<PostId>,
    pub counted: bool,
    /// The member's score after this event.
    pub score: f64,
}

/// A member's current score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BounceScore {
    pub score: f64,
    pub last_counted_ms: u64,
}

/// A classifier's word cut for storage: no control characters, at most 256 characters.
pub fn cap(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(MAX_TEXT_CHARS)
        .collect()
}

impl BounceEvent {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<BounceEvent> {
        Ok(BounceEvent {
            id: r.get(0)?,
            list_id: ListId(r.get(1)?),
            address: r.get(2)?,
            at_ms: r.get::<_, i64>(3)?.max(0) as u64,
            kind: r.get(4)?,
            status: r.get(5)?,
            diagnostic: r.get(6)?,
            source: r.get(7)?,
            post: r.get::<_, Option<i64>>(8)?.map(|p| PostId(p as u64)),
            counted: r.get(9)?,
            score: r.get(10)?,
        })
    }
}

pub(crate) const EVENT_COLUMNS: &str =
    "id, list_id, address, at_ms, kind, status, diagnostic, source, post_id, counted, score";

impl Directory {
    /// Records a bounce for `address` on `list` (or, with `None`, against the list's reputation)
    /// and applies the scoring `rule` (the bounce stage's) in the same transaction.
    pub fn apply_bounce(
        &self,
        list: ListId,
        address: Option<&Address>,
        b: &NewBounce,
        rule: ScoreRule,
    ) -> Result<BounceApplied, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.apply_bounce(list, address, b, rule));
        store.write(|tx| {
            let settings = list_by_id_on(tx, list)?
                .ok_or_else(|| DirectoryError::no_such_list(list))?
                .settings;
            let addr = address.map(|a| a.to_string()).unwrap_or_default();
            let member: Option<Option<String>> = if addr.is_empty() {
                None
            } else {
                tx.prepare_cached(
                    "SELECT disabled_reason FROM members WHERE list_id = ?1 AND address = ?2",
                )
                .and_then(|mut st| st.query_row(params![list.0, addr], |r| r.get(0)).optional())
                .map_err(storage("read member for bounce"))?
            };
            let prior = match member {
                Some(_) => score_on(tx, list, &addr)?,
                None => None,
            };
            let scored = rule(ScoreInput {
                member: member.as_ref(),
                prior,
                settings: &settings,
                bounce: b,
            });
            if scored.out.counted {
                tx.prepare_cached(
                    "INSERT INTO bounce_scores (list_id, address, score, last_counted_ms) \
                     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (list_id, address) DO UPDATE \
                     SET score = excluded.score, last_counted_ms = excluded.last_counted_ms",
                )
                .and_then(|mut st| {
                    st.execute(params![list.0, addr, scored.out.score, b.at_ms as i64])
                })
                .map_err(storage("update bounce score"))?;
            }
            if let Some(why) = &scored.disable {
                tx.prepare_cached(
                    "UPDATE members SET disabled_reason = ?3 WHERE list_id = ?1 AND address = ?2",
                )
                .and_then(|mut st| st.execute(params![list.0, addr, why]))
                .map_err(storage("disable bouncing member"))?;
            }
            let out = scored.out;
            insert_event(tx, list, &addr, b, &out)?;
            Ok(out)
        })
    }

    /// A member's score, if it ever had a counted bounce.
    pub fn bounce_score(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<BounceScore>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.bounce_score(list, address));
        let conn = store.reader()?;
        score_on(&conn, list, &address.to_string())
    }

    /// Bounce events, newest first: for one address, for one list, or (with `list = None`) for
    /// every list. `kind` filters by class name.
    pub fn bounce_events(
        &self,
        list: Option<ListId>,
        address: Option<&Address>,
        kind: Option<&str>,
        limit: usize,
    ) -> Result<Vec<BounceEvent>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.bounce_events(list, address, kind, limit.min(MAX_BOUNCE_LISTING) as i64));
        let conn = store.reader()?;
        if let Some(l) = list {
            ensure_list(&conn, l)?;
        }
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM bounce_events \
             WHERE (?1 IS NULL OR list_id = ?1) AND (?2 IS NULL OR address = ?2) \
             AND (?3 IS NULL OR kind = ?3) ORDER BY id DESC LIMIT ?4"
        );
        let limit = limit.min(MAX_BOUNCE_LISTING) as i64;
        let mut st = conn.prepare_cached(&sql).map_err(storage("list bounces"))?;
        let rows = st
            .query_map(
                params![
                    list.map(|l| l.0),
                    address.map(|a| a.to_string()),
                    kind,
                    limit
                ],
                BounceEvent::from_row,
            )
            .map_err(storage("list bounces"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(storage("read bounce row"))
    }

    /// Sets a member's "not me too" option: skip the list copy of a post that names the member in
    /// To or Cc. False if the address is not on the list.
    pub fn set_skip_if_addressed(
        &self,
        list: ListId,
        address: &Address,
        skip: bool,
    ) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.set_skip_if_addressed(list, address, skip));
        store.write(|tx| {
            ensure_list(tx, list)?;
            let n = tx
                .prepare_cached(
                    "INSERT INTO member_prefs (member_id, skip_if_addressed) \
                     SELECT id, ?3 FROM members WHERE list_id = ?1 AND address = ?2 \
                     ON CONFLICT (member_id) DO UPDATE SET skip_if_addressed = excluded.skip_if_addressed",
                )
                .and_then(|mut st| st.execute(params![list.0, address.to_string(), skip]))
                .map_err(storage("set member preference"))?;
            Ok(n > 0)
        })
    }

    /// Of `addresses`, the members of `list` (lowercased) who asked to skip posts that name them.
    pub fn skip_if_addressed_among(
        &self,
        list: ListId,
        addresses: &[Address],
    ) -> Result<HashSet<String>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.skip_if_addressed_among(list, addresses));
        let conn = store.reader()?;
        let mut st = conn
            .prepare_cached(
                "SELECT m.address FROM members m JOIN member_prefs p ON p.member_id = m.id \
                 WHERE m.list_id = ?1 AND m.address = ?2 AND p.skip_if_addressed = 1",
            )
            .map_err(storage("read member preferences"))?;
        let mut out = HashSet::new();
        for a in addresses {
            let found: Option<String> = st
                .query_row(params![list.0, a.to_string()], |r| r.get(0))
                .optional()
                .map_err(storage("read member preference"))?;
            if let Some(f) = found {
                out.insert(f.to_ascii_lowercase());
            }
        }
        Ok(out)
    }

    /// Whether `address` is an enabled member of `list` with `id <= up_to` (cross-post dedup:
    /// "did the other list's post already reach this person?"). Only a `regular` member got that
    /// single copy: a digest or nomail member of the other list still gets this list's copy.
    pub fn is_enabled_member_upto(
        &self,
        list: ListId,
        up_to: MemberId,
        address: &Address,
    ) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.is_enabled_member_upto(list, up_to, address));
        let conn = store.reader()?;
        conn.prepare_cached(
            "SELECT 1 FROM members WHERE list_id = ?1 AND address = ?2 AND id <= ?3 \
             AND disabled_reason IS NULL AND delivery = 'regular'",
        )
        .and_then(|mut st| {
            st.query_row(params![list.0, address.to_string(), up_to.0], |_| Ok(()))
                .optional()
        })
        .map(|r| r.is_some())
        .map_err(storage("check cross-post member"))
    }

    /// Re-enables a member and clears their bounce score (an administrator's decision, or a
    /// confirmed re-subscription): without the reset, the next counted bounce would disable
    /// the member again at once. The history is kept. False if the address is not on the list.
    pub fn reset_bounces(&self, list: ListId, address: &Address) -> Result<bool, DirectoryError> {
        let found = self.set_member_status(list, address, &MemberStatus::Enabled)?;
        self.reset_bounce_score(list, address)?;
        Ok(found)
    }

    /// Clears a member's bounce score, leaving their status and history as they are (the
    /// score starts again from zero). False if the address is not on the list.
    pub fn reset_bounce_score(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.reset_bounce_score(list, address));
        let addr = address.to_string();
        store.write(|tx| {
            ensure_list(tx, list)?;
            tx.prepare_cached("DELETE FROM bounce_scores WHERE list_id = ?1 AND address = ?2")
                .and_then(|mut st| st.execute(params![list.0, addr]))
                .map_err(storage("reset bounce score"))?;
            tx.prepare_cached("SELECT 1 FROM members WHERE list_id = ?1 AND address = ?2")
                .and_then(|mut st| st.query_row(params![list.0, addr], |_| Ok(())).optional())
                .map(|found| found.is_some())
                .map_err(storage("find member"))
        })
    }
}

/// What a scoring rule sees of one bounce: the member (`None` when the address is not a
/// member, else its disabled reason, `None` meaning enabled), its stored score, the list's
/// settings and the bounce.
pub struct ScoreInput<'a> {
    pub member: Option<&'a Option<String>>,
    pub prior: Option<BounceScore>,
    pub settings: &'a herald_types::ListSettings,
    pub bounce: &'a NewBounce,
}

/// What a scoring rule decides for one bounce; the store records it in the same transaction.
pub struct Scored {
    pub out: BounceApplied,
    /// `Some(reason)`: disable the member with this reason.
    pub disable: Option<String>,
}

/// The scoring rule, owned by the bounce stage (`herald_bounce::score`) and passed in, so the
/// read, the decision and the writes are one transaction while the rule stays the stage's.
pub type ScoreRule = fn(ScoreInput<'_>) -> Scored;

fn score_on(
    conn: &Connection,
    list: ListId,
    addr: &str,
) -> Result<Option<BounceScore>, DirectoryError> {
    conn.prepare_cached(
        "SELECT score, last_counted_ms FROM bounce_scores WHERE list_id = ?1 AND address = ?2",
    )
    .and_then(|mut st| {
        st.query_row(params![list.0, addr], |r| {
            Ok(BounceScore {
                score: r.get(0)?,
                last_counted_ms: r.get::<_, i64>(1)?.max(0) as u64,
            })
        })
        .optional()
    })
    .map_err(storage("read bounce score"))
}

fn insert_event(
    tx: &Connection,
    list: ListId,
    addr: &str,
    b: &NewBounce,
    out: &BounceApplied,
) -> Result<(), DirectoryError> {
    tx.prepare_cached(
        "INSERT INTO bounce_events \
         (list_id, address, at_ms, kind, status, diagnostic, source, post_id, counted, score) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )
    .and_then(|mut st| {
        st.execute(params![
            list.0,
            addr,
            b.at_ms as i64,
            cap(&b.kind),
            b.status.as_deref().map(cap),
            cap(&b.diagnostic),
            b.source,
            b.post.map(|p| p.0 as i64),
            out.counted,
            out.score
        ])
    })
    .map_err(storage("insert bounce event"))?;
    let keep = if addr.is_empty() {
        MAX_REPUTATION_EVENTS
    } else {
        MAX_EVENTS_PER_ADDRESS
    };
    tx.prepare_cached(
        "DELETE FROM bounce_events WHERE list_id = ?1 AND address = ?2 AND id <= \
         (SELECT id FROM bounce_events WHERE list_id = ?1 AND address = ?2 \
          ORDER BY id DESC LIMIT 1 OFFSET ?3)",
    )
    .and_then(|mut st| st.execute(params![list.0, addr, keep]))
    .map_err(storage("prune bounce events"))?;
    Ok(())
}
