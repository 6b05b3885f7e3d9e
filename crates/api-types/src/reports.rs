//! Reports over the statistics store (`/api/v1/reports/…`): the hourly table (mailstat), one
//! day's picture (batchstat) and one post's report.

use serde::{Deserialize, Serialize};

/// Query of `GET /api/v1/reports/hourly`.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema, utoipa::IntoParams,
)]
#[into_params(parameter_in = Query)]
pub struct ReportRange {
    /// Start, ms since the epoch (default: 24 hours ago).
    pub since_ms: Option<u64>,
    /// End (default: now).
    pub until_ms: Option<u64>,
}

/// Query of `GET /api/v1/reports/day`.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema, utoipa::IntoParams,
)]
#[into_params(parameter_in = Query)]
pub struct DayQuery {
    /// `YYYY-MM-DD` (UTC); default today.
    #[param(format = Date)]
    pub date: Option<String>,
}

/// One hour of the mailstat table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct MinutePoint {
    pub minute_ms: u64,
    pub delivered: u64,
    pub failed: u64,
    pub deferred: u64,
}

/// A post's arrival, marked below the day picture's axis.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PostArrival {
    pub post: String,
    pub list: String,
    pub accepted_at_ms: u64,
    pub recipients: Option<u64>,
}

/// The batchstat picture's data: one UTC day.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ReasonRow {
    pub reason: String,
    pub copies: u64,
}

/// One destination domain of a post.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct DestinationRow {
    pub domain: String,
    pub copies: u64,
    pub mean_ms: f64,
    pub max_ms: u64,
    /// When the last attempt to this domain ended, ms after the post's acceptance.
    pub last_after_ms: u64,
}

/// Outcomes in the second starting `second` s after acceptance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct CurvePoint {
    pub second: u64,
    pub delivered: u64,
    pub failed: u64,
}

/// One post's report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
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
    /// delivered.
    pub t50_secs: Option<u64>,
    pub t95_secs: Option<u64>,
    pub t100_secs: Option<u64>,
    pub curve: Vec<CurvePoint>,
    pub failures: Vec<ReasonRow>,
    pub deferrals: Vec<ReasonRow>,
    pub slowest: Vec<DestinationRow>,
}
