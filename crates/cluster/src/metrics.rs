//! The cluster's `/metrics` series, read at scrape time into the scrape's registry: how many
//! nodes are alive, dead and left, each node's heartbeat age (one label per node: the node
//! table is bounded by `herald_directory::MAX_NODES`), and this node's own heartbeat counts.

use crate::{Cluster, NodeLiveness, NodeStatus};
use herald_telemetry::exposition::{counter_at, gauge_at, gauge_rows, Registry};

/// Registers the series from `nodes` (as `Cluster::status` returned them; None when the store
/// could not be read: the node table's series are left out rather than shown as zero) and
/// `cluster`'s counters, which are registered always — a store outage is when the failed
/// heartbeats must show.
pub fn register(cluster: &Cluster, nodes: Option<&[NodeStatus]>, out: &mut Registry) {
    if let Some(nodes) = nodes {
        let count = |l: NodeLiveness| nodes.iter().filter(|n| n.liveness == l).count() as i64;
        gauge_rows(
            out,
            "herald_cluster_nodes",
            "Nodes in the shared store's node table, by state: alive (fresh heartbeat), dead (stale heartbeat), left (stopped gracefully).",
            [NodeLiveness::Alive, NodeLiveness::Dead, NodeLiveness::Left]
                .map(|l| ([("state", l.as_str().to_string())], count(l))),
        );
        gauge_rows(
            out,
            "herald_cluster_heartbeat_age_milliseconds",
            "Age of each node's last heartbeat on the store's clock.",
            nodes.iter().map(|n| {
                (
                    [("node", n.node_id.clone())],
                    i64::try_from(n.heartbeat_age_ms).unwrap_or(i64::MAX),
                )
            }),
        );
    }
    let (beats, failed, store_schema) = cluster.counters();
    counter_at(
        out,
        "herald_cluster_heartbeats_total",
        "Heartbeats this node wrote to the shared store.",
        beats,
    );
    counter_at(
        out,
        "herald_cluster_heartbeat_failures_total",
        "Heartbeats this node could not write (store unreachable).",
        failed,
    );
    gauge_at(
        out,
        "herald_cluster_schema_compatible",
        "1 while the shared store's schema version is this binary's; 0 once another node migrated it.",
        i64::from(store_schema == herald_directory::SCHEMA_VERSION),
    );
}
