//! The lists stage's settings: the `[lists]` section of Herald's TOML configuration (the keys
//! are unchanged; the server's `Config` embeds this struct). The dedup keys are read by the
//! composition root for the enqueue path's Message-ID store.

use serde::Deserialize;

/// List housekeeping (issue 5).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListsConfig {
    /// A post whose Message-ID the list accepted less than this long ago is acknowledged but
    /// not fanned out again; cross-posts within it reach a member once.
    pub dedup_window_secs: u64,
    /// The dedup store is written and fsync'd this often: a crash forgets at most this much.
    pub dedup_flush_ms: u64,
    /// Most Message-IDs remembered.
    pub dedup_max_entries: usize,
    /// Subscribe/unsubscribe confirmation links and reply tokens expire after this long.
    pub confirm_ttl_secs: u64,
    /// Lines of a `-request` mail read for commands; the rest is ignored.
    pub request_max_lines: usize,
    /// How often held posts are checked for expiry.
    pub held_sweep_secs: u64,
}

impl Default for ListsConfig {
    fn default() -> Self {
        ListsConfig {
            dedup_window_secs: 3 * 24 * 3600,
            dedup_flush_ms: 1000,
            dedup_max_entries: 1_000_000,
            confirm_ttl_secs: 3 * 24 * 3600,
            request_max_lines: 50,
            held_sweep_secs: 3600,
        }
    }
}
