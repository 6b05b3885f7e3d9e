//! `[cluster]`: who this node is and how often it says it is alive.
//!
//! Every key has a default, so a single node needs no `[cluster]` section at all: its id is the
//! machine's host name and its address the HTTP listener's.

use serde::Deserialize;
use std::time::Duration;

/// Longest heartbeat interval accepted: beyond it a dead node would look alive for too long.
pub const MAX_HEARTBEAT_INTERVAL_SECS: u64 = 300;
/// Most missed intervals before a node counts as dead.
pub const MAX_DEAD_AFTER_INTERVALS: u32 = 100;
/// Largest shard: beyond it one node's lease covers too much of a post to hand over quickly.
pub const MAX_SHARD_MEMBERS: u32 = 1_000_000;
/// Longest lease: a dead node's shards wait at most this long.
pub const MAX_LEASE_SECS: u64 = 3600;
/// Most shards a node fans out at once (each is a post in its scheduler).
pub const MAX_SHARDS_PER_NODE: usize = 1024;

/// The `[cluster]` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's id in the `nodes` table; unique in the cluster. None: the machine's host
    /// name (`/proc/sys/kernel/hostname`), else the configured `hostname`.
    pub node_id: Option<String>,
    /// Where other nodes and operators reach this node (`host:port`, shown by `herald
    /// status`). None: the HTTP listener's address.
    pub address: Option<String>,
    /// Seconds between heartbeats.
    pub heartbeat_interval_secs: u64,
    /// A node whose last heartbeat is older than this many intervals is reported dead.
    pub dead_after_intervals: u32,
    /// Share each list post's fan-out between the nodes (`herald-shards`):
    /// the post is stored once in the shared store, cut into shards that every node claims.
    /// Needs a PostgreSQL `[store] url`. Off: each node fans out what it accepted.
    pub shared_fanout: bool,
    /// Members per shard (by member id, within the post's snapshot).
    pub shard_members: u32,
    /// A shard's lease: a node that has not reported or renewed for this long loses the
    /// shard to another node, which resumes from the last reported position.
    pub lease_secs: u64,
    /// How often a node reports its shards' finished members (one batched statement) and
    /// renews its leases; also how often it looks for shards to claim.
    pub shard_report_ms: u64,
    /// Shards one node fans out at once.
    pub max_shards_per_node: usize,
    /// Share what nodes learn of the outside world (`herald-knowledge`):
    /// providers' rates (each node takes its share), the nodes sending to each provider, hosts
    /// found down. Only with a PostgreSQL `[store] url`; a SQLite node has nobody to tell.
    pub shared_knowledge: bool,
    /// How often a node exchanges its knowledge with the store (one transaction).
    pub knowledge_interval_ms: u64,
}

/// Shortest and longest knowledge exchange interval.
pub const KNOWLEDGE_INTERVAL_MS: std::ops::RangeInclusive<u64> = 100..=60_000;

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: None,
            address: None,
            heartbeat_interval_secs: 5,
            dead_after_intervals: 3,
            shared_fanout: false,
            shard_members: 1000,
            lease_secs: 30,
            shard_report_ms: 1000,
            max_shards_per_node: 8,
            shared_knowledge: true,
            knowledge_interval_ms: 1000,
        }
    }
}

impl ClusterConfig {
    /// Whether this node shares what it learns (Message-IDs seen, hosts found down) with
    /// the others: only on a PostgreSQL store (a SQLite node has nobody to tell) with
    /// `shared_knowledge` on.
    pub fn shares_knowledge(&self, directory: &herald_directory::Directory) -> bool {
        directory.store_kind() == herald_directory::StoreKind::Postgres && self.shared_knowledge
    }

    /// Checks the section once at start; errors name their key.
    pub fn check(&self) -> Result<(), String> {
        if self.heartbeat_interval_secs == 0
            || self.heartbeat_interval_secs > MAX_HEARTBEAT_INTERVAL_SECS
        {
            return Err(format!(
                "cluster.heartbeat_interval_secs: must be 1 to {MAX_HEARTBEAT_INTERVAL_SECS}"
            ));
        }
        if self.dead_after_intervals < 2 || self.dead_after_intervals > MAX_DEAD_AFTER_INTERVALS {
            // One interval would call a node dead for a heartbeat that is a little late.
            return Err(format!(
                "cluster.dead_after_intervals: must be 2 to {MAX_DEAD_AFTER_INTERVALS}"
            ));
        }
        if self.shard_members == 0 || self.shard_members > MAX_SHARD_MEMBERS {
            return Err(format!(
                "cluster.shard_members: must be 1 to {MAX_SHARD_MEMBERS}"
            ));
        }
        if self.lease_secs < 2 || self.lease_secs > MAX_LEASE_SECS {
            return Err(format!("cluster.lease_secs: must be 2 to {MAX_LEASE_SECS}"));
        }
        // A lease must survive a few missed reports, or a busy node loses its shards.
        if self.shard_report_ms < 50
            || self.shard_report_ms.saturating_mul(2) > self.lease_secs * 1000
        {
            return Err(
                "cluster.shard_report_ms: must be at least 50 and at most half of lease_secs"
                    .into(),
            );
        }
        if self.max_shards_per_node == 0 || self.max_shards_per_node > MAX_SHARDS_PER_NODE {
            return Err(format!(
                "cluster.max_shards_per_node: must be 1 to {MAX_SHARDS_PER_NODE}"
            ));
        }
        if !KNOWLEDGE_INTERVAL_MS.contains(&self.knowledge_interval_ms) {
            return Err(format!(
                "cluster.knowledge_interval_ms: must be {} to {}",
                KNOWLEDGE_INTERVAL_MS.start(),
                KNOWLEDGE_INTERVAL_MS.end()
            ));
        }
        let address = self.address.as_deref().unwrap_or("x");
        if let Some(id) = &self.node_id {
            herald_directory::check_node(id, address)
                .map_err(|e| format!("cluster.node_id: {e}"))?;
        }
        herald_directory::check_node("x", address).map_err(|e| format!("cluster.address: {e}"))
    }

    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_secs(self.heartbeat_interval_secs)
    }

    /// Heartbeat age beyond which a node is dead.
    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_secs)
    }

    pub fn shard_report_interval(&self) -> Duration {
        Duration::from_millis(self.shard_report_ms)
    }

    pub fn knowledge_interval(&self) -> Duration {
        Duration::from_millis(self.knowledge_interval_ms)
    }

    pub fn dead_after(&self) -> Duration {
        self.heartbeat_interval() * self.dead_after_intervals
    }

    /// The node id to use: the configured one, else the machine's host name, else `fallback`
    /// (the configured `hostname`). A host name that is not a valid id (e.g. with characters
    /// outside `[A-Za-z0-9._-]`) falls through to the next choice.
    pub fn resolve_node_id(&self, fallback: &str) -> String {
        if let Some(id) = &self.node_id {
            return id.clone();
        }
        // Read from /proc rather than through a crate: Herald runs on Linux only (it already
        // reads /proc for privileges), and this is one line of text.
        let machine = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let id = [machine.trim(), fallback]
            .into_iter()
            .find(|id| herald_directory::check_node(id, "x").is_ok())
            .unwrap_or("herald")
            .to_string();
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = ClusterConfig::default();
        c.check().expect("valid");
        assert_eq!(c.dead_after(), Duration::from_secs(15));
        let id = c.resolve_node_id("herald.localhost");
        assert!(herald_directory::check_node(&id, "x").is_ok(), "{id}");
    }

    /// Hostile or nonsensical values are refused by key.
    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            (
                ClusterConfig {
                    heartbeat_interval_secs: 0,
                    ..Default::default()
                },
                "cluster.heartbeat_interval_secs",
            ),
            (
                ClusterConfig {
                    heartbeat_interval_secs: 100_000,
                    ..Default::default()
                },
                "cluster.heartbeat_interval_secs",
            ),
            (
                ClusterConfig {
                    shard_members: 0,
                    ..Default::default()
                },
                "cluster.shard_members",
            ),
            (
                ClusterConfig {
                    lease_secs: 1,
                    ..Default::default()
                },
                "cluster.lease_secs",
            ),
            (
                ClusterConfig {
                    lease_secs: 2,
                    shard_report_ms: 1500,
                    ..Default::default()
                },
                "cluster.shard_report_ms",
            ),
            (
                ClusterConfig {
                    max_shards_per_node: 0,
                    ..Default::default()
                },
                "cluster.max_shards_per_node",
            ),
            (
                ClusterConfig {
                    knowledge_interval_ms: 0,
                    ..Default::default()
                },
                "cluster.knowledge_interval_ms",
            ),
            (
                ClusterConfig {
                    knowledge_interval_ms: u64::MAX,
                    ..Default::default()
                },
                "cluster.knowledge_interval_ms",
            ),
            (
                ClusterConfig {
                    dead_after_intervals: 1,
                    ..Default::default()
                },
                "cluster.dead_after_intervals",
            ),
            (
                ClusterConfig {
                    node_id: Some("a\nb".into()),
                    ..Default::default()
                },
                "cluster.node_id",
            ),
            (
                ClusterConfig {
                    node_id: Some(String::new()),
                    ..Default::default()
                },
                "cluster.node_id",
            ),
            (
                ClusterConfig {
                    address: Some("127.0.0.2:80 x".into()),
                    ..Default::default()
                },
                "cluster.address",
            ),
        ];
        for (c, key) in cases {
            let e = c.check().expect_err(key);
            assert!(e.starts_with(key), "{e}");
        }
        let c = ClusterConfig {
            node_id: Some("node-1".into()),
            ..Default::default()
        };
        assert_eq!(c.resolve_node_id("x"), "node-1");
        let bad_fallback = ClusterConfig::default().resolve_node_id("bad name");
        assert!(!bad_fallback.contains(' '));
    }
}
