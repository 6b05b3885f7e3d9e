//! The scheduler's settings (`[scheduler]` in the TOML config): limits, schedules and shaping
//! rules (matched in `actor::shaping`), each with its default next to it, checked once at start ([`SchedulerConfig::validate`]).
//! A leaf: every stage of the crate reads it, it reads none of them.

use herald_smtp_client::ClientConfig;
use serde::Deserialize;

/// Scheduler limits and schedules. Every field has a default; unknown keys are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Outbound SMTP connections open at once, over all destinations.
    pub max_connections: usize,
    /// Connections open at once to one destination (MX host set).
    pub max_connections_per_destination: usize,
    /// Copies handed to a connection at a time (they are pipelined together).
    pub max_copies_per_batch: usize,
    /// Spliced bytes per batch: big posts get smaller batches (bounded memory per worker).
    /// Each worker keeps its batch's splice buffers while its connection lives, so this times
    /// `max_connections` bounds that memory: 64 KiB x 1000 = 64 MB. 512 KiB made a 1,000-domain
    /// fan-out peak at ~460 MB with no gain in copies/s (BENCHMARKS.md).
    pub batch_bytes: usize,
    /// Bytes of spliced copies in memory at once, over every connection: a
    /// worker takes its batch's bytes before it splices and gives them back once the batch is
    /// sent, waiting (first come, first served) while they are not free. A copy larger than
    /// this still goes, alone. At least `batch_bytes`, at most 4 GiB - 1 (`workers/budget.rs`).
    pub max_copy_bytes: usize,
    /// After this many copies a connection is closed and a fresh one opened.
    pub max_messages_per_connection: usize,
    /// How long an idle connection waits for more copies before it quits (it quits at once
    /// when the global budget is spent and another destination has ready copies).
    pub idle_connection_ms: u64,
    /// Retry schedule for deferred copies: first delay, cap, jitter (0–1).
    pub retry_initial_secs: u64,
    pub retry_max_secs: u64,
    pub retry_jitter: f64,
    /// A destination whose connections fail is not tried again for this long (doubling).
    pub destination_backoff_secs: u64,
    pub destination_backoff_max_secs: u64,
    /// Copies queued in memory at most; expansion waits beyond it.
    pub max_queued_copies: usize,
    /// Members read from the directory per page.
    pub expansion_page: usize,
    /// DNS lookups in flight at once.
    pub resolve_concurrency: usize,
    /// A domain that does not exist is remembered this long.
    pub dns_negative_cache_secs: u64,
    /// A routed domain is resolved again this often (its MX hosts, its MTA-STS policy and its
    /// DANE TLSA answers, which also make the route expire no later than the policy or the
    /// answers do), so changes reach the queue.
    pub route_refresh_secs: u64,
    /// Scheduler housekeeping interval (retry promotion, idle connections).
    pub tick_ms: u64,
    /// Copies of one post queued at most: a huge post leaves room for the others (fairness).
    /// The floor of the post's window, which grows with the post's recipient domains (below).
    pub max_queued_copies_per_post: usize,
    /// The post's window grows to this many copies per distinct recipient domain, up to ¾ of
    /// `max_queued_copies` (`expansion/window.rs`): 64 is four batches per
    /// destination. 0 keeps the window fixed at `max_queued_copies_per_post`.
    pub queued_copies_per_domain: usize,
    /// Connections of the slow lane (retries) at most, within `max_connections`: stragglers never
    /// take the connections first attempts need.
    pub slow_lane_max_connections: usize,
    /// Slow-lane timeouts (RFC 5321 §4.5.3.2: 5 min for the greeting and commands, 10 min for
    /// the end of DATA). Connect is not in the RFC; a minute is generous.
    pub slow_connect_timeout_secs: u64,
    pub slow_banner_timeout_secs: u64,
    pub slow_command_timeout_secs: u64,
    pub slow_data_timeout_secs: u64,
    /// A host (MX name and address) is marked down after this many consecutive failed
    /// connections; it stays down `destination_backoff_secs` (doubling on each failed probe up to
    /// `destination_backoff_max_secs`), then one probe connection tests it.
    pub host_down_after_failures: u32,
    /// Hosts tracked by host health at most.
    pub host_health_max_hosts: usize,
    /// Host health is written to `<data_dir>/host-health.json` this often (and at shutdown).
    pub host_health_persist_secs: u64,
    /// A greylisted copy is retried after the interval the server names, or the interval
    /// learned for its destination (the wait of the first greylisted copy that got through), or
    /// else first after `greylist_first_retry_secs`, doubling on each further greylisting up to
    /// this long.
    pub greylist_retry_secs: u64,
    /// The first retry of a greylisted copy when neither the server nor experience says the
    /// interval (60 s: the common greylisting delay; a longer one costs one more retry).
    pub greylist_first_retry_secs: u64,
    /// A throttled copy is retried after this long (its destination's budget is cut meanwhile).
    pub throttle_retry_secs: u64,
    /// Throttling signals within this long of a cut count once (parallel connections all see
    /// the same 421).
    pub throttle_cooldown_ms: u64,
    /// Shaping rules by MX host suffix; see herald.example.toml for the provider presets.
    pub shaping: Vec<ShapingRule>,
    /// Connections a destination whose hosts are tarpits (replies trickling, recognised by the
    /// first pass: `[delivery] tarpit_after_secs`) gets in the slow lane, within its budget:
    /// each carries a pipelined session at the tarpit's byte rate, so a few in parallel divide
    /// the time; more would only meet the host's own session limit.
    pub tarpit_connections: usize,
    /// A host recognised as a tarpit is served by the slow lane this long; then the first pass
    /// tries it again (it may have stopped).
    pub tarpit_remember_secs: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_connections: 1000,
            max_connections_per_destination: 20,
            max_copies_per_batch: 16,
            batch_bytes: 64 * 1024,
            // 48 MiB: a 1 MB post to 8,000 members over 50 domains peaked at 134 MB of Herald's
            // memory (389 MB unbounded) at 340 copies/s against 375 (docs/benchmarks/scale.md,
            // the global byte budget); 32 MiB peaked at 109 MB at 311 copies/s, 64 MiB at 169 MB.
            max_copy_bytes: 48 << 20,
            max_messages_per_connection: 1000,
            idle_connection_ms: 2000,
            retry_initial_secs: 60,
            retry_max_secs: 3600,
            retry_jitter: 0.2,
            destination_backoff_secs: 30,
            destination_backoff_max_secs: 1800,
            max_queued_copies: 200_000,
            expansion_page: 2000,
            resolve_concurrency: 64,
            dns_negative_cache_secs: 600,
            route_refresh_secs: 3600,
            tick_ms: 200,
            max_queued_copies_per_post: 50_000,
            // 1,000,000 members over 2,000 domains: 7,317 copies/s with the window fixed at
            // 50,000 (~25 copies per destination), 13,760 with 150,000 (BENCHMARKS.md).
            queued_copies_per_domain: 64,
            slow_lane_max_connections: 100,
            slow_connect_timeout_secs: 60,
            slow_banner_timeout_secs: 300,
            slow_command_timeout_secs: 300,
            slow_data_timeout_secs: 600,
            host_down_after_failures: 2,
            host_health_max_hosts: 100_000,
            host_health_persist_secs: 30,
            greylist_retry_secs: 300,
            greylist_first_retry_secs: 60,
            throttle_retry_secs: 30,
            throttle_cooldown_ms: 1000,
            shaping: Vec::new(),
            tarpit_connections: 4,
            tarpit_remember_secs: 3600,
        }
    }
}

/// A scheduler setting that cannot work; names its key.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: scheduler.{key} {reason}")]
pub struct ConfigError {
    pub key: &'static str,
    pub reason: String,
}

impl SchedulerConfig {
    /// The checks the server makes when its configuration is loaded, before [`Self::validate`]
    /// (their messages predate it and are kept word for word).
    pub fn check(&self) -> Result<(), String> {
        if self.max_connections == 0 || self.max_connections_per_destination == 0 {
            return Err(
                "scheduler.max_connections and max_connections_per_destination must be > 0".into(),
            );
        }
        if self.max_copies_per_batch == 0 {
            return Err("scheduler.max_copies_per_batch must be > 0".into());
        }
        if !(0.0..=1.0).contains(&self.retry_jitter) {
            return Err("scheduler.retry_jitter must be between 0 and 1".into());
        }
        Ok(())
    }

    /// Refuses settings that would stall delivery. Called once at start.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key, reason: &str| {
            Err(ConfigError {
                key,
                reason: reason.to_string(),
            })
        };
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1");
        }
        if self.slow_lane_max_connections >= self.max_connections {
            return bad(
                "slow_lane_max_connections",
                "must be below max_connections (first attempts need a share)",
            );
        }
        if self.max_queued_copies_per_post == 0
            || self.max_queued_copies_per_post > self.max_queued_copies
        {
            return bad(
                "max_queued_copies_per_post",
                "must be between 1 and max_queued_copies",
            );
        }
        if self.max_copy_bytes < self.batch_bytes.max(1)
            || self.max_copy_bytes > crate::workers::budget::MAX_BUDGET
        {
            // Below batch_bytes a batch of several copies could be larger than the whole budget;
            // only a single copy may be (it then goes alone).
            return bad(
                "max_copy_bytes",
                "must be at least batch_bytes and below 4 GiB",
            );
        }
        if self.host_down_after_failures == 0 {
            return bad("host_down_after_failures", "must be at least 1");
        }
        if self.route_refresh_secs == 0 {
            return bad("route_refresh_secs", "must be at least 1");
        }
        if self.tarpit_connections == 0 {
            return bad("tarpit_connections", "must be at least 1");
        }
        if self.greylist_first_retry_secs == 0 {
            return bad("greylist_first_retry_secs", "must be at least 1");
        }
        for (i, r) in self.shaping.iter().enumerate() {
            if r.mx_suffixes.iter().all(|s| s.trim_matches('.').is_empty()) {
                return Err(ConfigError {
                    key: "shaping",
                    reason: format!("rule {i} ({}) has no mx_suffixes", r.name),
                });
            }
        }
        Ok(())
    }

    /// The client settings of a slow-lane connection: `fast` with the slow-lane timeouts, and
    /// patient with replies that trickle (a tarpit's are read to their end, within those
    /// timeouts and `reply_idle_timeout_secs` between bytes).
    pub fn slow_client(&self, fast: &ClientConfig) -> ClientConfig {
        let s = std::time::Duration::from_secs;
        ClientConfig {
            connect_timeout: s(self.slow_connect_timeout_secs).max(fast.connect_timeout),
            banner_timeout: s(self.slow_banner_timeout_secs).max(fast.banner_timeout),
            command_timeout: s(self.slow_command_timeout_secs).max(fast.command_timeout),
            data_timeout: s(self.slow_data_timeout_secs).max(fast.data_timeout),
            tarpit_after: std::time::Duration::ZERO,
            ..fast.clone()
        }
    }
}

/// A shaping rule (`[[scheduler.shaping]]`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShapingRule {
    /// Budget name, shown in logs and `herald queue`.
    pub name: String,
    /// MX host name suffixes ("google.com" matches "aspmx.l.google.com"). A destination matches
    /// when its first (most preferred) MX host matches.
    pub mx_suffixes: Vec<String>,
    /// Connections at once over every destination of this rule.
    pub max_connections: Option<usize>,
    /// Copies per connection before it is closed and a new one opened.
    pub max_messages_per_connection: Option<usize>,
    /// Copies per minute over every destination of this rule.
    pub max_messages_per_minute: Option<u32>,
}

impl ShapingRule {
    /// True when `mx` (a host name) ends with one of the rule's suffixes at a label boundary.
    pub fn matches(&self, mx: &str) -> bool {
        let mx = mx.trim_end_matches('.').to_ascii_lowercase();
        self.mx_suffixes.iter().any(|s| {
            let s = s
                .trim_start_matches('.')
                .trim_end_matches('.')
                .to_ascii_lowercase();
            !s.is_empty() && (mx == s || mx.ends_with(&format!(".{s}")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_budget_must_hold_a_batch_and_fit_a_semaphore() {
        let ok = SchedulerConfig::default();
        assert!(ok.validate().is_ok());
        for bad in [
            0,
            1,
            ok.batch_bytes - 1,
            usize::MAX,
            (u32::MAX as usize) + 1,
        ] {
            let cfg = SchedulerConfig {
                max_copy_bytes: bad,
                ..SchedulerConfig::default()
            };
            let e = cfg.validate().expect_err("refused");
            assert_eq!(e.key, "max_copy_bytes", "{bad}");
        }
        let exact = SchedulerConfig {
            max_copy_bytes: ok.batch_bytes,
            ..SchedulerConfig::default()
        };
        assert!(exact.validate().is_ok());
    }

    #[test]
    fn a_copy_budget_from_toml_is_read_and_checked() {
        let cfg: SchedulerConfig = toml::from_str("max_copy_bytes = 1048576").expect("parses");
        assert_eq!(cfg.max_copy_bytes, 1 << 20);
        assert!(toml::from_str::<SchedulerConfig>("max_copy_bytes = -1").is_err());
        assert!(toml::from_str::<SchedulerConfig>("max_copy_bytes = \"64MB\"").is_err());
        let small: SchedulerConfig =
            toml::from_str("max_copy_bytes = 1000\nbatch_bytes = 4096").expect("parses");
        assert!(small.validate().is_err());
    }
}
