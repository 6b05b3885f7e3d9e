//! The queue as the actor shows it: what `herald queue`, the status API and `/api/v1/top` read
//! (answers to [`super::Ctrl::Snapshot`]). Plain data, built by `actor::snapshot`.

use serde::Serialize;

/// One destination as `herald queue` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DestinationView {
    pub destination: String,
    pub budget: String,
    /// First attempts ready.
    pub ready: usize,
    /// Retries ready (slow lane).
    pub retry_ready: usize,
    /// Retries waiting for their time (slow lane).
    pub waiting: usize,
    /// Copies that may be tried now, waiting on disk for room in the destination's share of
    /// the in-memory queue.
    pub waiting_for_room: usize,
    pub connections: usize,
    pub slow_connections: usize,
    /// The shaping budget's current connection limit (AIMD).
    pub connection_limit: usize,
    /// Seconds since the oldest pending copy's post was accepted.
    pub oldest_age_secs: u64,
    /// Seconds until the next probe when every host is down.
    pub down_for_secs: Option<u64>,
    pub last_error: Option<String>,
    pub delivered: u64,
    pub deferred: u64,
    pub failed: u64,
}

/// A recipient with copies in the slow lane, for `herald queue --stragglers`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StragglerView {
    pub recipient: String,
    pub pending: u64,
    pub oldest_age_secs: u64,
}

/// A down host.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostView {
    pub host: String,
    pub addr: String,
    pub consecutive_failures: u32,
    pub probe_in_secs: u64,
    pub last_error: Option<String>,
}

/// The queue: totals, and the destinations with the most pending copies (oldest first among
/// equals), at most the requested number; with `stragglers`, the recipients likewise.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct QueueSnapshot {
    pub queued: usize,
    pub resolving: usize,
    pub connections: usize,
    pub slow_connections: usize,
    pub fast_lane: usize,
    pub slow_lane: usize,
    pub destinations_with_work: usize,
    pub hosts_down: usize,
    pub destinations: Vec<DestinationView>,
    pub stragglers: Vec<StragglerView>,
    pub down_hosts: Vec<HostView>,
    /// Time the scheduler took to build this snapshot (µs).
    pub build_micros: u64,
}

/// What a snapshot should include.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// Rows of destinations (and stragglers) at most.
    pub limit: usize,
    pub stragglers: bool,
}

impl Default for SnapshotRequest {
    fn default() -> Self {
        SnapshotRequest {
            limit: 100,
            stragglers: false,
        }
    }
}
