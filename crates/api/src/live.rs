//! Live views: `/api/v1/top` (everything `herald top` and the dashboard refresh every second, in
//! one request) and the stragglers with their actions.
//!
//! The queue is shown by lane (`fast`: first attempts; `slow`: retries and stragglers), and the
//! down hosts come from the scheduler's host health (MX name and address).

use crate::extract::{Json, Query};
use crate::views;
use crate::{ApiError, ApiState};
use axum::extract::State;
use herald_api_types::{
    ActionResult, Internals, Lane, StragglerTarget as Target, Stragglers, StragglersQuery, Top,
    Totals,
};
use herald_directory::DirectoryError;
use herald_lists::{Door, Membership};
use herald_scheduler::{Action, Selector};
use herald_types::Address;
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// Seconds of per-second rates in a top snapshot.
const RATE_SECS: usize = 300;
/// Destinations shown in a top snapshot.
const TOP_DESTINATIONS: usize = 15;

#[utoipa::path(
    get,
    path = "/top",
    tag = "live",
    responses((status = 200, description = "What herald top shows", body = Top), crate::schema::Problems)
)]
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
            lane: "fast".into(),
            queued: views::count(q.fast_lane),
            ready: views::count(q.destinations.iter().map(|d| d.ready).sum()),
            waiting: 0,
            connections: views::count(q.connections.saturating_sub(q.slow_connections)),
        },
        Lane {
            lane: "slow".into(),
            queued: views::count(q.slow_lane),
            ready: views::count(q.destinations.iter().map(|d| d.retry_ready).sum()),
            waiting: views::count(q.destinations.iter().map(|d| d.waiting).sum()),
            connections: views::count(q.slow_connections),
        },
    ];
    let down = q
        .down_hosts
        .iter()
        .take(TOP_DESTINATIONS)
        .map(views::scheduler::down_host)
        .collect();
    let destinations = q
        .destinations
        .iter()
        .filter(|d| d.ready + d.retry_ready + d.waiting + d.waiting_for_room > 0)
        .take(TOP_DESTINATIONS)
        .map(views::scheduler::destination)
        .collect();
    Ok(Json(Top {
        now_ms: now,
        uptime_secs: s.started.elapsed().as_secs(),
        rates: m
            .rates
            .recent(now, RATE_SECS)
            .iter()
            .map(views::telemetry::rate)
            .collect(),
        totals: Totals {
            delivered: m.copies_delivered.get(),
            deferred: m.copies_deferred.get(),
            failed: m.copies_failed.get(),
        },
        posts: views::telemetry::posts(&posts),
        queued: views::count(q.queued),
        resolving: views::count(q.resolving),
        connections: views::count(q.connections),
        lanes,
        destinations,
        down,
        slowest: m
            .classes
            .slowest()
            .iter()
            .map(views::telemetry::class)
            .collect(),
        process: views::telemetry::process(&herald_telemetry::process::read_self()),
        internals: Internals {
            stages: (s.telemetry.contention().stages().iter())
                .map(views::telemetry::stage)
                .collect(),
            locks: (s.telemetry.contention().locks().iter())
                .map(views::telemetry::lock)
                .collect(),
            channels: (s.scheduler.channels().iter())
                .map(views::scheduler::channel)
                .collect(),
        },
    }))
}

#[utoipa::path(
    get,
    path = "/stragglers",
    tag = "live",
    params(StragglersQuery),
    responses((status = 200, description = "The straggler report", body = Stragglers), crate::schema::Problems)
)]
pub async fn stragglers(State(s): St, Query(l): Query<StragglersQuery>) -> Json<Stragglers> {
    let report = s.telemetry.stragglers(l.limit.unwrap_or(20).clamp(1, 1000));
    Json(views::telemetry::stragglers(&report))
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

#[utoipa::path(
    post,
    path = "/stragglers/retry",
    tag = "live",
    request_body = Target,
    responses((status = 200, description = "Copies retried now", body = ActionResult), crate::schema::Problems)
)]
pub async fn retry(State(s): St, Json(t): Json<Target>) -> Result<Json<ActionResult>, ApiError> {
    let matched = operate(&s, selector(&t)?, Action::RetryNow).await?;
    Ok(Json(ActionResult {
        matched,
        disabled_on: Vec::new(),
    }))
}

#[utoipa::path(
    post,
    path = "/stragglers/give-up",
    tag = "live",
    request_body = Target,
    responses((status = 200, description = "Copies given up", body = ActionResult), crate::schema::Problems)
)]
pub async fn give_up(State(s): St, Json(t): Json<Target>) -> Result<Json<ActionResult>, ApiError> {
    let matched = operate(&s, selector(&t)?, Action::GiveUp).await?;
    Ok(Json(ActionResult {
        matched,
        disabled_on: Vec::new(),
    }))
}

/// Disables the member (status `Disabled("operator: straggler")`) and gives up its queued copies.
#[utoipa::path(
    post,
    path = "/stragglers/disable",
    tag = "live",
    request_body = Target,
    responses((status = 200, description = "The member disabled on its lists", body = ActionResult), crate::schema::Problems)
)]
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
        let list_addr = crate::error::parse_address("list", &list)?;
        let a = address.clone();
        let d = s.directory.clone();
        let done = tokio::task::spawn_blocking(move || -> Result<bool, DirectoryError> {
            let Some(l) = d.list_by_address(&list_addr)? else {
                return Ok(false);
            };
            let m = Membership::new(&d);
            Ok(m.disable(l.id, &a, "operator: straggler", Door::Operator)?)
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
