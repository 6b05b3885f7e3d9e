//! Report endpoints over the statistics store (never the delivery log): the hourly table, one
//! day's picture data and one post's report. Every call first flushes the in-memory aggregates,
//! so a report includes every outcome reported before it. SQLite blocks: each runs on the
//! blocking pool.

use crate::{ApiError, ApiState};
use axum::extract::{Path, Query, State};
use axum::Json;
use herald_telemetry::stats::{DayReport, HourRow, PostReport};
use herald_telemetry::{StatsError, StatsReader};
use herald_types::PostId;
use serde::Deserialize;
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

#[derive(Deserialize)]
pub struct Range {
    /// Start, ms since the epoch (default: 24 hours ago).
    pub since_ms: Option<u64>,
    pub until_ms: Option<u64>,
}

pub async fn hourly(State(s): St, Query(r): Query<Range>) -> Result<Json<Vec<HourRow>>, ApiError> {
    let now = herald_types::unix_ms_now();
    let since = r.since_ms.unwrap_or(now.saturating_sub(86_400_000));
    let until = r.until_ms.unwrap_or(now);
    Ok(Json(
        with_reader(&s, move |rd| rd.hourly(since, until)).await?,
    ))
}

#[derive(Deserialize)]
pub struct DayQuery {
    /// `YYYY-MM-DD` (UTC); default today.
    pub date: Option<String>,
}

pub async fn day(State(s): St, Query(q): Query<DayQuery>) -> Result<Json<DayReport>, ApiError> {
    let start = match &q.date {
        Some(d) => herald_telemetry::time::parse_date_ms(d)
            .ok_or_else(|| ApiError::BadRequest(format!("date: {d:?} is not YYYY-MM-DD")))?,
        None => herald_types::unix_ms_now() / 86_400_000 * 86_400_000,
    };
    Ok(Json(with_reader(&s, move |rd| rd.day(start)).await?))
}

pub async fn post(State(s): St, Path(post): Path<String>) -> Result<Json<PostReport>, ApiError> {
    let id: PostId = post
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("not a post id: {post:?}")))?;
    with_reader(&s, move |rd| rd.post(id, 10))
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no statistics for post {post}")))
}
