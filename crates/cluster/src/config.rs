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
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: None,
            address: None,
            heartbeat_interval_secs: 5,
            dead_after_intervals: 3,
        }
    }
}

impl ClusterConfig {
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
