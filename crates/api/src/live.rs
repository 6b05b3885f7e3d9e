//! Live views: `/api/top` (everything `herald top` and the dashboard refresh every second, in
//! one request) and the stragglers with their actions.
//!
//! The queue is shown by lane (`fast`: first attempts; `slow`: retries and stragglers), and the
//! down hosts come from the scheduler's host health (MX name and address).

use crate::{ApiError, ApiState};
use axum::extract::{Query, State};
use axum::Json;
use herald_directory::DirectoryError;
use herald_scheduler::{Action, ChannelView, DestinationView, Selector};
use herald_telemetry::classes::ClassView;
use herald_telemetry::contention::{LockView, StageView};
use herald_telemetry::process::ProcessStats;
use herald_telemetry::rate::RatePoint;
use herald_telemetry::{PostSummary, Stragglers};
use herald_types::{Address, MemberStatus};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// Seconds of per-second rates in a top snapshot.
const RATE_SECS: usize = 300;
/// Destinations shown in a top snapshot.
const TOP_DESTINATIONS: usize = 15;

#[derive(Serialize)]
pub struct Lane {
    pub lane: &'static str,
    pub queued: usize,
    pub ready: usize,
    pub waiting: usize,
    pub connections: usize,
}

#[derive(Serialize)]
pub struct Internals {
    pub stages: Vec<StageView>,
    pub locks: Vec<LockView>,
    pub channels: Vec<ChannelView>,
}

#[derive(Serialize)]
pub struct Top {
    pub now_ms: u64,
    pub uptime_secs: u64,
    /// Outcomes per second, oldest first (the last complete seconds).
    pub rates: Vec<RatePoint>,
    pub totals: Totals,
    /// Posts not yet complete, then the most recent complete ones (at most 10 in all).
    pub posts: Vec<PostSummary>,
    pub queued: usize,
    pub resolving: usize,
    pub connections: usize,
    pub lanes: Vec<Lane>,
    /// Destinations holding the most queued copies.
    pub destinations: Vec<DestinationView>,
    /// Hosts (MX name and address) marked down now, soonest probe first.
    pub down: Vec<DownHost>,
    /// Destination classes by mean SMTP transaction time, slowest first.
    pub slowest: Vec<ClassView>,
    pub process: ProcessStats,
    pub internals: Internals,
}

/// A down host as `herald top` and the dashboard show it.
#[derive(Serialize)]
pub struct DownHost {
    /// The MX host name.
    pub destination: String,
    pub addr: String,
    pub consecutive_failures: u32,
    /// Seconds until the next probe.
    pub down_for_secs: Option<u64>,
    pub last_error: Option<String>,
}

#[derive(Serialize)]
pub struct Totals {
    pub delivered: u64,
    pub deferred: u64,
    pub failed: u64,
}

pub async fn top(State(s): St) -> Result<Json<Top>, ApiError> {
    let now = herald_types::unix_ms_now();
    let q = s
        .scheduler
        .queue_snapshot()
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let m = s.telemetry.metrics();
    let mut posts = s.telemetry.all_progress();
    posts.sort_by_key(|p| (p.complete, std::cmp::Reverse(p.accepted_at_ms)));
    posts.truncate(10);
    let lanes = vec![
        Lane {
            lane: "fast",
            queued: q.fast_lane,
            ready: q.destinations.iter().map(|d| d.ready).sum(),
            waiting: 0,
            connections: q.connections.saturating_sub(q.slow_connections),
        },
        Lane {
            lane: "slow",
            queued: q.slow_lane,
            ready: q.destinations.iter().map(|d| d.retry_ready).sum(),
            waiting: q.destinations.iter().map(|d| d.waiting).sum(),
            connections: q.slow_connections,
        },
    ];
    let down: Vec<DownHost> = q
        .down_hosts
        .iter()
        .take(TOP_DESTINATIONS)
        .map(|h| DownHost {
            destination: h.host.clone(),
            addr: h.addr.clone(),
            consecutive_failures: h.consecutive_failures,
            down_for_secs: Some(h.probe_in_secs),
            last_error: h.last_error.clone(),
        })
        .collect();
    let destinations = q
        .destinations
        .iter()
        .filter(|d| d.ready + d.retry_ready + d.waiting > 0)
        .take(TOP_DESTINATIONS)
        .cloned()
        .collect();
    use std::sync::atomic::Ordering::Relaxed;
    Ok(Json(Top {
        now_ms: now,
        uptime_secs: s.started.elapsed().as_secs(),
        rates: m.rates.recent(now, RATE_SECS),
        totals: Totals {
            delivered: m.copies_delivered.load(Relaxed),
            deferred: m.copies_deferred.load(Relaxed),
            failed: m.copies_failed.load(Relaxed),
        },
        posts,
        queued: q.queued,
        resolving: q.resolving,
        connections: q.connections,
        lanes,
        destinations,
        down,
        slowest: m.classes.slowest(),
        process: herald_telemetry::process::read_self(),
        internals: Internals {
            stages: s.telemetry.contention().stages(),
            locks: s.telemetry.contention().locks(),
            channels: s.scheduler.channels(),
        },
    }))
}

#[derive(Deserialize)]
pub struct Limit {
    pub limit: Option<usize>,
}

pub async fn stragglers(State(s): St, Query(l): Query<Limit>) -> Json<Stragglers> {
    Json(s.telemetry.stragglers(l.limit.unwrap_or(20).clamp(1, 1000)))
}

/// An action on stragglers: exactly one of `recipient` or `domain`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub recipient: Option<String>,
    pub domain: Option<String>,
    /// For `disable`: the list (default: every list of the recipient's pending posts).
    pub list: Option<String>,
}

#[derive(Serialize)]
pub struct ActionResult {
    pub matched: u64,
    /// Lists on which the member was disabled (`disable` only).
    pub disabled_on: Vec<String>,
}

fn selector(t: &Target) -> Result<Selector, ApiError> {
    match (&t.recipient, &t.domain) {
        (Some(r), None) => Address::parse(r)
            .map(|a| Selector::Recipient(a.to_string()))
            .map_err(|e| ApiError::BadRequest(format!("recipient: {e}"))),
        (None, Some(d)) if !d.is_empty() && d.len() <= 255 && !d.contains('@') => {
            Ok(Selector::Domain(d.to_ascii_lowercase()))
        }
        _ => Err(ApiError::BadRequest(
            "give exactly one of recipient (an address) or domain".into(),
        )),
    }
}

async fn operate(s: &ApiState, sel: Selector, action: Action) -> Result<u64, ApiError> {
    s.scheduler
        .operate(sel, action)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))
}

pub async fn retry(State(s): St, Json(t): Json<Target>) -> Result<Json<ActionResult>, ApiError> {
    let matched = operate(&s, selector(&t)?, Action::RetryNow).await?;
    Ok(Json(ActionResult {
        matched,
        disabled_on: Vec::new(),
    }))
}

pub async fn give_up(State(s): St, Json(t): Json<Target>) -> Result<Json<ActionResult>, ApiError> {
    let matched = operate(&s, selector(&t)?, Action::GiveUp).await?;
    Ok(Json(ActionResult {
        matched,
        disabled_on: Vec::new(),
    }))
}

/// Disables the member (status `Disabled("operator: straggler")`) and gives up its queued copies.
pub async fn disable(State(s): St, Json(t): Json<Target>) -> Result<Json<ActionResult>, ApiError> {
    let sel = selector(&t)?;
    let Selector::Recipient(rcpt) = &sel else {
        return Err(ApiError::BadRequest("disable needs a recipient".into()));
    };
    let address = Address::parse(rcpt).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let lists: Vec<String> = match &t.list {
        Some(l) => vec![l.clone()],
        None => lists_of_pending(&s, rcpt),
    };
    let mut disabled_on = Vec::new();
    for list in lists {
        let list_addr =
            Address::parse(&list).map_err(|e| ApiError::BadRequest(format!("list: {e}")))?;
        let a = address.clone();
        let d = s.directory.clone();
        let done = tokio::task::spawn_blocking(move || -> Result<bool, DirectoryError> {
            let Some(l) = d.list_by_address(&list_addr)? else {
                return Ok(false);
            };
            let status = MemberStatus::Disabled("operator: straggler".into());
            d.set_member_status(l.id, &a, &status)
        })
        .await??;
        if done {
            disabled_on.push(list);
        }
    }
    let matched = operate(&s, sel, Action::GiveUp).await?;
    Ok(Json(ActionResult {
        matched,
        disabled_on,
    }))
}

/// Lists of the posts with a pending copy for this recipient.
fn lists_of_pending(s: &ApiState, rcpt: &str) -> Vec<String> {
    let report = s.telemetry.stragglers(1000);
    let mut lists: Vec<String> = report
        .recipients
        .iter()
        .filter(|g| g.key.eq_ignore_ascii_case(rcpt))
        .flat_map(|g| g.posts.iter())
        .filter_map(|p| p.parse().ok())
        .filter_map(|id| s.telemetry.progress(id))
        .map(|p| p.list)
        .collect();
    lists.sort();
    lists.dedup();
    lists
}
