//! Report endpoints over the statistics store (never the delivery log): the hourly table, one
//! day's picture data and one post's report. Every call first flushes the in-memory aggregates,
//! so a report includes every outcome reported before it. SQLite blocks: each runs on the
//! blocking pool.

use crate::extract::{Json, Path, Query};
use crate::views;
use crate::{ApiError, ApiState};
use axum::extract::State;
use herald_api_types::{DayQuery, DayReport, HourRow, PostReport, ReportRange as Range};
use herald_telemetry::{StatsError, StatsReader};
use herald_types::PostId;
use std::sync::Arc;

type St = State<Arc<ApiState>>;

impl From<StatsError> for ApiError {
    fn from(e: StatsError) -> ApiError {
        match e {
            StatsError::Disabled => ApiError::Conflict(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

async fn with_reader<T, F>(s: &ApiState, f: F) -> Result<T, ApiError>
where
    F: FnOnce(&StatsReader) -> Result<T, StatsError> + Send + 'static,
    T: Send + 'static,
{
    let t = s.telemetry.clone();
    Ok(tokio::task::spawn_blocking(move || f(&t.stats_reader()?)).await??)
}

#[utoipa::path(
    get,
    path = "/reports/hourly",
    tag = "reports",
    params(Range),
    responses((status = 200, description = "One row per hour", body = Vec<HourRow>), crate::schema::Problems)
)]
pub async fn hourly(State(s): St, Query(r): Query<Range>) -> Result<Json<Vec<HourRow>>, ApiError> {
    let now = herald_types::unix_ms_now();
    let since = r.since_ms.unwrap_or(now.saturating_sub(86_400_000));
    let until = r.until_ms.unwrap_or(now);
    Ok(Json(
        with_reader(&s, move |rd| rd.hourly(since, until))
            .await?
            .iter()
            .map(views::telemetry::hour)
            .collect(),
    ))
}

#[utoipa::path(
    get,
    path = "/reports/day",
    tag = "reports",
    params(DayQuery),
    responses((status = 200, description = "One day's picture data", body = DayReport), crate::schema::Problems)
)]
pub async fn day(State(s): St, Query(q): Query<DayQuery>) -> Result<Json<DayReport>, ApiError> {
    let start = match &q.date {
        Some(d) => herald_telemetry::time::parse_date_ms(d)
            .ok_or_else(|| ApiError::BadRequest(format!("date: {d:?} is not YYYY-MM-DD")))?,
        None => herald_types::unix_ms_now() / 86_400_000 * 86_400_000,
    };
    let day = with_reader(&s, move |rd| rd.day(start)).await?;
    Ok(Json(views::telemetry::day(&day)))
}

#[utoipa::path(
    get,
    path = "/reports/post/{post}",
    tag = "reports",
    params(("post" = String, Path, description = "The post id: up to 16 hex digits", pattern = "^[0-9A-Fa-f]{1,16}$")),
    responses((status = 200, description = "One post's report", body = PostReport), crate::schema::Problems)
)]
pub async fn post(State(s): St, Path(post): Path<String>) -> Result<Json<PostReport>, ApiError> {
    let id: PostId = post.parse().map_err(|_| ApiError::Invalid {
        field: "post".into(),
        reason: format!("not a post id: {post:?}"),
    })?;
    with_reader(&s, move |rd| rd.post(id, 10))
        .await?
        .map(|r| Json(views::telemetry::post_report(&r)))
        .ok_or_else(|| ApiError::NotFound(format!("no statistics for post {post}")))
}
