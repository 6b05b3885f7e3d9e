//! The cluster's node status (`herald-cluster`) as `/api/v1/status` shows it.

use herald_api_types::NodeView;
use herald_cluster::NodeStatus;

pub(crate) fn node(n: &NodeStatus) -> NodeView {
    NodeView {
        node_id: n.node_id.clone(),
        address: n.address.clone(),
        version: n.version.clone(),
        schema_version: n.schema_version,
        started_at_ms: n.started_at_ms,
        heartbeat_age_ms: n.heartbeat_age_ms,
        state: n.liveness.as_str().to_string(),
        this_node: n.this_node,
    }
}
