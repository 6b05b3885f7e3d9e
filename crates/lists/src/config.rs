//! The lists stage's settings: the `[lists]` and `[postmaster]` sections of Herald's TOML configuration (the keys
//! are unchanged; the server's `Config` embeds this struct). The dedup keys are read by the
//! composition root for the enqueue path's Message-ID store.

use serde::Deserialize;

/// List housekeeping.
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

impl ListsConfig {
    /// Checked when the server's configuration is loaded; the error names its keys.
    pub fn check(&self) -> Result<(), String> {
        if self.dedup_flush_ms == 0 || self.held_sweep_secs == 0 {
            return Err("lists.dedup_flush_ms and lists.held_sweep_secs must be > 0".into());
        }
        if !(1..=10_000).contains(&self.request_max_lines) {
            return Err("lists.request_max_lines must be between 1 and 10000".into());
        }
        Ok(())
    }
}

/// Mail to postmaster (`[postmaster]`). Herald accepts `<postmaster>` and
/// `postmaster@<domain>` for its hostname and every domain it has a list in, stores each
/// message (250 after fsync), and forwards it to `forward`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostmasterSection {
    /// Operator addresses each postmaster message is forwarded to (attached unchanged to a
    /// short note, sent from the null sender `<>`). Empty: messages are only stored, for
    /// `herald postmaster` and `/api/v1/postmaster`.
    pub forward: Vec<String>,
    /// Stored postmaster messages are deleted this many days after they arrived.
    pub retention_days: u32,
    /// Most postmaster messages stored at once; beyond it `RCPT TO:<postmaster>` gets
    /// `452 4.3.1` (the sender keeps the mail and retries) until some expire or are deleted.
    pub max_stored: usize,
}

/// Most `postmaster.forward` addresses: every postmaster message becomes one copy each.
pub const MAX_POSTMASTER_FORWARD: usize = 10;

impl Default for PostmasterSection {
    fn default() -> Self {
        PostmasterSection {
            forward: Vec::new(),
            retention_days: 14,
            max_stored: 1000,
        }
    }
}

impl PostmasterSection {
    /// The forward addresses, parsed (checked at load, so none is dropped here).
    pub fn forward_addresses(&self) -> Vec<herald_types::Address> {
        self.forward
            .iter()
            .filter_map(|a| herald_types::Address::parse(a).ok())
            .collect()
    }

    /// Checks the section against the server's `hostname`; the error names the key at fault.
    pub fn check(&self, hostname: &str) -> Result<(), String> {
        if self.forward.len() > MAX_POSTMASTER_FORWARD {
            return Err(format!(
                "postmaster.forward: at most {MAX_POSTMASTER_FORWARD} addresses"
            ));
        }
        for (i, text) in self.forward.iter().enumerate() {
            let a = herald_types::Address::parse(text).map_err(|e| {
                format!("postmaster.forward[{i}]: {text:?} is not a mail address: {e}")
            })?;
            // Loop-safe anyway (forwards are marked and never forwarded again), but a forward
            // that can only land back in Herald's own store is a mistake worth stopping.
            if a.is_postmaster() && a.domain().eq_ignore_ascii_case(hostname) {
                return Err(format!(
                    "postmaster.forward[{i}]: {text:?} is this server's own postmaster"
                ));
            }
        }
        if !(1..=3650).contains(&self.retention_days) {
            return Err("postmaster.retention_days: must be between 1 and 3650".into());
        }
        if !(1..=1_000_000).contains(&self.max_stored) {
            return Err("postmaster.max_stored: must be between 1 and 1000000".into());
        }
        Ok(())
    }
}
