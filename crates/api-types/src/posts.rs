//! Posts and the server's status: injection (`POST /api/v1/lists/<list>/posts`), progress
//! (`/api/v1/posts…`) and `/api/v1/status`.

use serde::{Deserialize, Serialize};

/// The answer to `POST /api/v1/lists/<list>/posts` (202 Accepted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Injected {
    /// The new post's id (16 hex digits).
    pub post: String,
}

/// One post's progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PostSummary {
    /// 16 hex digits.
    pub post: String,
    pub list: String,
    pub accepted_at_ms: u64,
    /// Known once fan-out has expanded the member list.
    pub recipients: Option<u64>,
    /// Recipients finished before a restart (not counted in delivered/failed).
    pub already_done: u64,
    pub delivered: u64,
    pub failed: u64,
    /// Attempts that ended in a temporary failure (a recipient may count several times).
    pub deferred_attempts: u64,
    /// Recipients without a final outcome yet.
    pub pending: Option<u64>,
    pub complete: bool,
    /// Milliseconds after acceptance at which the first copy and 50 %, 95 %, 100 % of the
    /// deliverable recipients were delivered.
    pub t_first_ms: Option<u64>,
    pub t50_ms: Option<u64>,
    pub t95_ms: Option<u64>,
    pub t100_ms: Option<u64>,
}

/// The spool's counters and gauges.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct SpoolStats {
    /// Group commits (one fdatasync each).
    pub commits: u64,
    pub records_written: u64,
    pub bytes_written: u64,
    pub fsync_last_us: u64,
    pub fsync_avg_us: u64,
    pub fsync_max_us: u64,
    /// Records per group commit: last, mean, largest.
    pub group_last_records: u64,
    pub group_avg_records: f64,
    pub group_max_records: u64,
    /// Posts accepted and not yet completed.
    pub live_posts: u64,
    pub segments: u64,
    pub segment_rolls: u64,
    pub relocated_posts: u64,
    pub segments_deleted: u64,
    pub ignored_outcomes: u64,
    pub quarantined_segments: u64,
    pub torn_tail_bytes: u64,
    /// False during a journal outage (new posts refused with 452, fan-out paused).
    pub writable: bool,
    pub outages: u64,
}

/// `GET /api/v1/status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Status {
    pub version: String,
    pub uptime_secs: u64,
    pub lists: u64,
    pub members: u64,
    /// Copies queued in the scheduler.
    pub queued: u64,
    pub connections: u64,
    /// Destinations with work.
    pub destinations: u64,
    pub spool: SpoolStats,
    /// The most recent posts (at most 20).
    pub posts: Vec<PostSummary>,
    /// Every node of the cluster sharing this store, this one included; empty from
    /// a server older than clusters.
    pub nodes: Vec<NodeView>,
    /// Set while the list store does not answer (PostgreSQL down or restarting):
    /// what an operator is told. `lists`, `members` and `nodes` are then unknown (0 and
    /// empty); the rest — queue, spool, posts — is this node's own and current, which is what
    /// tells whether mail is at risk during the outage. Null while the store answers.
    pub store_error: Option<String>,
}

/// One cluster node in `GET /api/v1/status`, as the answering node judges it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct NodeView {
    pub node_id: String,
    /// Where it answers (`host:port` of its HTTP API).
    pub address: String,
    pub version: String,
    pub schema_version: i64,
    pub started_at_ms: u64,
    /// Age of its last heartbeat on the shared store's clock.
    pub heartbeat_age_ms: u64,
    /// `alive`, `dead` (stale heartbeat: crashed or cut off) or `left` (stopped gracefully).
    pub state: String,
    /// The node that answered this request.
    pub this_node: bool,
}

/// `POST /api/v1/node/drain`: what draining this node did. The node claims no
/// more shards of shared posts; the ones it held and had not finished went back to the cluster
/// with their position.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct NodeDrained {
    pub node_id: String,
    /// Shards the node held when the drain began.
    pub held: u64,
    /// Handed back unfinished (their queued copies given up here, another node sends them).
    pub handed_back: u64,
    /// Finished here during the drain.
    pub finished: u64,
    /// Still held when the wait ran out (drain again to go on); 0 means drained.
    pub remaining: u64,
}
