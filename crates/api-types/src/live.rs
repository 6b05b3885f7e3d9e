//! Live views: `GET /api/v1/top` (everything `herald top` and the dashboard refresh every second,
//! in one request) and the stragglers with their actions (`/api/v1/stragglers…`).

use crate::{DestinationView, PostSummary};
use serde::{Deserialize, Serialize};

/// `GET /api/v1/top`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Top {
    pub now_ms: u64,
    pub uptime_secs: u64,
    /// Outcomes per second, oldest first (the last complete seconds).
    pub rates: Vec<RatePoint>,
    pub totals: Totals,
    /// Posts not yet complete, then the most recent complete ones (at most 10 in all).
    pub posts: Vec<PostSummary>,
    pub queued: u64,
    pub resolving: u64,
    pub connections: u64,
    /// `fast` (first attempts) and `slow` (retries and stragglers).
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

/// One second of outcome counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct RatePoint {
    /// Unix seconds at the start of the period.
    pub sec: u64,
    pub delivered: u64,
    pub deferred: u64,
    pub failed: u64,
}

/// Copies by final outcome since the server started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Totals {
    pub delivered: u64,
    pub deferred: u64,
    pub failed: u64,
}

/// One lane of the queue.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Lane {
    /// `fast` or `slow`.
    pub lane: String,
    pub queued: u64,
    pub ready: u64,
    pub waiting: u64,
    pub connections: u64,
}

/// A down host as `herald top` and the dashboard show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct DownHost {
    /// The MX host name.
    pub destination: String,
    pub addr: String,
    pub consecutive_failures: u32,
    /// Seconds until the next probe.
    pub down_for_secs: Option<u64>,
    pub last_error: Option<String>,
}

/// Mean SMTP transaction time of one destination class (a registrable domain).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ClassView {
    pub class: String,
    pub transactions: u64,
    pub mean_ms: f64,
}

/// The server process's resources (every field `None` off Linux).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ProcessStats {
    /// User + system CPU time since the process started.
    pub cpu_secs: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub threads: Option<u64>,
    /// Open file descriptors (sockets included).
    pub open_fds: Option<u64>,
}

/// Where time is lost inside Herald.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Internals {
    /// Waits in stage channels.
    pub stages: Vec<StageView>,
    /// Time under shared locks.
    pub locks: Vec<LockView>,
    /// The scheduler's bounded channels.
    pub channels: Vec<ChannelView>,
}

/// One stage's wait histogram.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct StageView {
    pub stage: String,
    pub count: u64,
    pub total_us: u64,
    pub mean_us: u64,
    pub max_us: u64,
}

/// One lock's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct LockView {
    pub lock: String,
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_us: u64,
    pub hold_us: u64,
    pub hold_max_us: u64,
}

/// One channel's fill level (a momentary value).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ChannelView {
    pub channel: String,
    pub depth: u64,
    pub capacity: u64,
}

/// Query of `GET /api/v1/stragglers?limit=<n>` (rows per table, 1–1000, default 20).
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema, utoipa::IntoParams,
)]
#[into_params(parameter_in = Query)]
pub struct StragglersQuery {
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// The straggler report (seeds/000's latedudes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Stragglers {
    /// Deferred copies pending.
    pub total: u64,
    /// Stragglers only counted because the book was full.
    pub untracked: u64,
    pub recipients: Vec<StragglerGroup>,
    pub destinations: Vec<StragglerGroup>,
}

/// One recipient or destination domain holding pending copies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct StragglerGroup {
    /// A recipient address or a destination domain.
    pub key: String,
    pub pending: u64,
    /// Age of the oldest pending copy (since its post was accepted).
    pub oldest_secs: u64,
    pub max_tries: u32,
    pub last_error: String,
    /// Posts with a pending copy for this key (at most 10 shown).
    pub posts: Vec<String>,
}

/// `POST /api/v1/stragglers/{retry,give-up,disable}`: exactly one of `recipient` or `domain`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StragglerTarget {
    #[schema(format = Email)]
    pub recipient: Option<String>,
    #[schema(format = Hostname)]
    pub domain: Option<String>,
    /// For `disable`: the list (default: every list of the recipient's pending posts).
    #[schema(format = Email)]
    pub list: Option<String>,
}

/// The answer to a straggler action.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ActionResult {
    /// Queued copies the action matched.
    pub matched: u64,
    /// Lists on which the member was disabled (`disable` only).
    pub disabled_on: Vec<String>,
}
