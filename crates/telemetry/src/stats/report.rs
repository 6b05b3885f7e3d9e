//! Report queries over the statistics store: the hourly table (mailstat), the day picture
//! (batchstat) and one post's report. Each reads roll-ups only, so a day of ten million
//! deliveries is at most 1,440 × 3 minute rows plus the hour × domain rows.

use super::aggregate::{reason_text, DEFERRED, DELIVERED, FAILED};
use super::StatsError;
use herald_types::PostId;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

/// One hour of the mailstat table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct HourRow {
    /// Start of the hour, ms since the epoch (UTC).
    pub hour_ms: u64,
    /// Copies delivered, and distinct recipient domains (hosts) they went to.
    pub delivered: u64,
    pub delivered_hosts: u64,
    pub failed: u64,
    pub failed_hosts: u64,
    /// Attempts deferred (a copy may count several times).
    pub deferred: u64,
}

/// One minute of the day picture.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct MinutePoint {
    pub minute_ms: u64,
    pub delivered: u64,
    pub failed: u64,
    pub deferred: u64,
}

/// A post's arrival, marked below the day picture's axis.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PostArrival {
    pub post: String,
    pub list: String,
    pub accepted_at_ms: u64,
    pub recipients: Option<u64>,
}

/// The batchstat picture's data: one UTC day.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct DayReport {
    pub day_start_ms: u64,
    /// Minutes with any attempt, in order.
    pub minutes: Vec<MinutePoint>,
    pub arrivals: Vec<PostArrival>,
    pub delivered: u64,
    pub failed: u64,
    pub deferred: u64,
}

/// Copies by reply (failures or deferrals by reason).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReasonRow {
    pub reason: String,
    pub copies: u64,
}

/// One destination domain of a post.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DestinationRow {
    pub domain: String,
    pub copies: u64,
    pub mean_ms: f64,
    pub max_ms: u64,
    /// When the last attempt to this domain ended, ms after the post's acceptance.
    pub last_after_ms: u64,
}

/// One point of a post's curve: outcomes in the second starting `second` s after acceptance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CurvePoint {
    pub second: u64,
    pub delivered: u64,
    pub failed: u64,
}

/// One post's report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PostReport {
    pub post: String,
    pub list: Option<String>,
    pub accepted_at_ms: Option<u64>,
    pub size: Option<u64>,
    pub recipients: Option<u64>,
    pub completed_at_ms: Option<u64>,
    pub delivered: u64,
    pub failed: u64,
    pub deferred: u64,
    /// Seconds after acceptance by which 50 %, 95 % and 100 % of the deliverable copies were
    /// delivered (curve resolution: 1 s in the first hour, 1 min afterwards).
    pub t50_secs: Option<u64>,
    pub t95_secs: Option<u64>,
    pub t100_secs: Option<u64>,
    pub curve: Vec<CurvePoint>,
    pub failures: Vec<ReasonRow>,
    pub deferrals: Vec<ReasonRow>,
    pub slowest: Vec<DestinationRow>,
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(crate) fn hourly(
    conn: &Connection,
    since_ms: u64,
    until_ms: u64,
) -> Result<Vec<HourRow>, StatsError> {
    let (from, to) = ((since_ms / 3_600_000) as i64, (until_ms / 3_600_000) as i64);
    let mut st = conn.prepare_cached(
        "SELECT hour, outcome, COUNT(*), SUM(copies) FROM hour_domains
         WHERE hour >= ?1 AND hour <= ?2 GROUP BY hour, outcome ORDER BY hour",
    )?;
    let mut rows: Vec<HourRow> = Vec::new();
    let mut q = st.query(params![from, to])?;
    while let Some(r) = q.next()? {
        let (hour, outcome, hosts, copies): (i64, u8, i64, i64) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        let hour_ms = u(hour) * 3_600_000;
        if rows.last().is_none_or(|l| l.hour_ms != hour_ms) {
            rows.push(HourRow {
                hour_ms,
                ..HourRow::default()
            });
        }
        if let Some(row) = rows.last_mut() {
            match outcome {
                DELIVERED => (row.delivered, row.delivered_hosts) = (u(copies), u(hosts)),
                FAILED => (row.failed, row.failed_hosts) = (u(copies), u(hosts)),
                _ => row.deferred = u(copies),
            }
        }
    }
    Ok(rows)
}

pub(crate) fn day(conn: &Connection, day_start_ms: u64) -> Result<DayReport, StatsError> {
    let first = (day_start_ms / 60_000) as i64;
    let mut st = conn.prepare_cached(
        "SELECT minute, outcome, copies FROM minute_totals
         WHERE minute >= ?1 AND minute < ?2 ORDER BY minute",
    )?;
    let mut rep = DayReport {
        day_start_ms,
        ..DayReport::default()
    };
    let mut q = st.query(params![first, first + 1440])?;
    while let Some(r) = q.next()? {
        let (minute, outcome, copies): (i64, u8, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let minute_ms = u(minute) * 60_000;
        if rep.minutes.last().is_none_or(|m| m.minute_ms != minute_ms) {
            rep.minutes.push(MinutePoint {
                minute_ms,
                ..MinutePoint::default()
            });
        }
        let copies = u(copies);
        if let Some(m) = rep.minutes.last_mut() {
            match outcome {
                DELIVERED => (m.delivered, rep.delivered) = (copies, rep.delivered + copies),
                FAILED => (m.failed, rep.failed) = (copies, rep.failed + copies),
                _ => (m.deferred, rep.deferred) = (copies, rep.deferred + copies),
            }
        }
    }
    let mut st = conn.prepare_cached(
        "SELECT post, coalesce(list, ''), accepted_at_ms, recipients FROM posts
         WHERE accepted_at_ms >= ?1 AND accepted_at_ms < ?2 ORDER BY accepted_at_ms LIMIT 100000",
    )?;
    let start = day_start_ms as i64;
    rep.arrivals = st
        .query_map(params![start, start + 86_400_000], |r| {
            Ok(PostArrival {
                post: PostId(r.get::<_, i64>(0)? as u64).to_string(),
                list: r.get(1)?,
                accepted_at_ms: u(r.get(2)?),
                recipients: r.get::<_, Option<i64>>(3)?.map(u),
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rep)
}

type Facts = (
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

pub(crate) fn post(
    conn: &Connection,
    post: PostId,
    slowest: usize,
) -> Result<Option<PostReport>, StatsError> {
    let pid = post.0 as i64;
    let facts: Option<Facts> = conn
        .query_row(
            "SELECT list, accepted_at_ms, size, recipients, completed_at_ms FROM posts WHERE post = ?1",
            params![pid],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .optional()?;
    let Some((list, accepted, size, recipients, completed)) = facts else {
        return Ok(None);
    };
    let mut rep = PostReport {
        post: post.to_string(),
        list,
        accepted_at_ms: accepted.map(u),
        size: size.map(u),
        recipients: recipients.map(u),
        completed_at_ms: completed.map(u),
        delivered: 0,
        failed: 0,
        deferred: 0,
        t50_secs: None,
        t95_secs: None,
        t100_secs: None,
        curve: Vec::new(),
        failures: Vec::new(),
        deferrals: Vec::new(),
        slowest: Vec::new(),
    };
    let mut st = conn.prepare_cached(
        "SELECT outcome, reason, SUM(copies) FROM post_domains WHERE post = ?1
         GROUP BY outcome, reason ORDER BY SUM(copies) DESC",
    )?;
    let mut q = st.query(params![pid])?;
    while let Some(r) = q.next()? {
        let (outcome, reason, copies): (u8, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
        let row = ReasonRow {
            reason: reason_text(u(reason)),
            copies: u(copies),
        };
        match outcome {
            DELIVERED => rep.delivered += row.copies,
            DEFERRED => {
                rep.deferred += row.copies;
                rep.deferrals.push(row);
            }
            _ => {
                rep.failed += row.copies;
                rep.failures.push(row);
            }
        }
    }
    rep.slowest = slowest_domains(conn, pid, rep.accepted_at_ms.unwrap_or(0), slowest)?;
    let mut st = conn.prepare_cached(
        "SELECT second, delivered, failed FROM post_curve WHERE post = ?1 ORDER BY second",
    )?;
    rep.curve = st
        .query_map(params![pid], |r| {
            Ok(CurvePoint {
                second: u(r.get(0)?),
                delivered: u(r.get(1)?),
                failed: u(r.get(2)?),
            })
        })?
        .collect::<Result<_, _>>()?;
    let deliverable = rep
        .recipients
        .map_or(rep.delivered, |r| r.saturating_sub(rep.failed));
    let at = |f: f64| percentile_secs(&rep.curve, deliverable, f);
    (rep.t50_secs, rep.t95_secs, rep.t100_secs) = (at(0.5), at(0.95), at(1.0));
    Ok(Some(rep))
}

/// Destinations of a post by mean SMTP time, slowest first (those that ever answered).
fn slowest_domains(
    conn: &Connection,
    pid: i64,
    accepted_ms: u64,
    limit: usize,
) -> Result<Vec<DestinationRow>, StatsError> {
    let mut st = conn.prepare_cached(
        "SELECT domain, SUM(copies), SUM(xdelay_ms), MAX(xdelay_max_ms), MAX(last_ms)
         FROM post_domains WHERE post = ?1 GROUP BY domain
         ORDER BY CAST(SUM(xdelay_ms) AS REAL) / SUM(copies) DESC, MAX(last_ms) DESC LIMIT ?2",
    )?;
    let rows = st
        .query_map(params![pid, limit as i64], |r| {
            let copies = u(r.get(1)?);
            Ok(DestinationRow {
                domain: r.get(0)?,
                copies,
                mean_ms: u(r.get(2)?) as f64 / copies.max(1) as f64,
                max_ms: u(r.get(3)?),
                last_after_ms: u(r.get(4)?).saturating_sub(accepted_ms),
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The end of the curve bucket in which cumulative deliveries reach `fraction` of `deliverable`.
fn percentile_secs(curve: &[CurvePoint], deliverable: u64, fraction: f64) -> Option<u64> {
    if deliverable == 0 {
        return None;
    }
    let need = ((deliverable as f64) * fraction).ceil().max(1.0) as u64;
    let mut sum = 0;
    for p in curve {
        sum += p.delivered;
        if sum >= need {
            let width = if p.second < super::aggregate::FINE_CURVE_SECS {
                1
            } else {
                60
            };
            return Some(p.second + width);
        }
    }
    None
}
