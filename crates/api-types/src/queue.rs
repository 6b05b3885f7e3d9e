//! The scheduler's queue as `GET /api/v1/queue` shows it (`herald queue`).

use serde::{Deserialize, Serialize};

/// `GET /api/v1/queue?limit=N&stragglers=true`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct QueueQuery {
    /// Destination (and straggler) rows at most.
    #[serde(default = "default_queue_limit")]
    pub limit: usize,
    /// Include the recipients with the most pending copies.
    #[serde(default)]
    pub stragglers: bool,
}

fn default_queue_limit() -> usize {
    100
}

impl Default for QueueQuery {
    fn default() -> Self {
        QueueQuery {
            limit: default_queue_limit(),
            stragglers: false,
        }
    }
}

/// The queue: totals, and the destinations with the most pending copies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct QueueSnapshot {
    pub queued: u64,
    pub resolving: u64,
    pub connections: u64,
    pub slow_connections: u64,
    pub fast_lane: u64,
    pub slow_lane: u64,
    pub destinations_with_work: u64,
    pub hosts_down: u64,
    pub destinations: Vec<DestinationView>,
    /// Only with `stragglers=true`.
    pub stragglers: Vec<StragglerView>,
    pub down_hosts: Vec<HostView>,
    /// Time the scheduler took to build this snapshot (µs).
    pub build_micros: u64,
}

/// One destination (a set of MX hosts shared by its domains).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct DestinationView {
    pub destination: String,
    /// The shaping budget it draws from.
    pub budget: String,
    /// First attempts ready.
    pub ready: u64,
    /// Retries ready (slow lane).
    pub retry_ready: u64,
    /// Retries waiting for their time (slow lane).
    pub waiting: u64,
    /// Copies that may be tried now, waiting on disk for room in the destination's share of
    /// the in-memory queue (a destination that takes them more slowly than they come).
    pub waiting_for_room: u64,
    pub connections: u64,
    pub slow_connections: u64,
    /// The shaping budget's current connection limit (AIMD).
    pub connection_limit: u64,
    /// Seconds since the oldest pending copy's post was accepted.
    pub oldest_age_secs: u64,
    /// Seconds until the next probe when every host is down.
    pub down_for_secs: Option<u64>,
    pub last_error: Option<String>,
    pub delivered: u64,
    pub deferred: u64,
    pub failed: u64,
}

/// A recipient with copies in the slow lane.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct StragglerView {
    pub recipient: String,
    pub pending: u64,
    pub oldest_age_secs: u64,
}

/// A host marked down.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct HostView {
    /// The MX host name.
    pub host: String,
    pub addr: String,
    pub consecutive_failures: u32,
    pub probe_in_secs: u64,
    pub last_error: Option<String>,
}
