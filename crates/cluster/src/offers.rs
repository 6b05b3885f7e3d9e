//! What this node's cluster membership offers the HTTP API (`herald_stage::offers`): every
//! node as this node judges it (`/api/v1/status`) and the cluster's `/metrics` series, in the
//! API's terms.

use crate::metrics;
use crate::{Cluster, ClusterError, NodeStatus};
use herald_api_types::NodeView;
use herald_stage::offers::{self, OfferError, Offered};
use herald_telemetry::exposition::Registry;

impl Cluster {
    /// [`Cluster::status`] off the async threads, its failure sorted for the API (the store
    /// unreachable is a store error, answered as every directory error is).
    async fn status_offered(&self) -> Result<Vec<NodeStatus>, OfferError> {
        self.status_async()
            .await
            .map_err(|e| OfferError::Internal(format!("cluster status task: {e}")))?
            .map_err(|e| match e {
                ClusterError::Store { source, .. } => OfferError::Store(source),
                e => OfferError::Internal(e.to_string()),
            })
    }
}

fn view(n: &NodeStatus) -> NodeView {
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

impl offers::ClusterView for Cluster {
    fn nodes(&self) -> Offered<'_, Result<Vec<NodeView>, OfferError>> {
        Box::pin(async move { Ok(self.status_offered().await?.iter().map(view).collect()) })
    }
}

impl offers::Metrics for Cluster {
    fn register_metrics<'a>(&'a self, out: &'a mut Registry) -> Offered<'a, ()> {
        Box::pin(async move {
            // Nodes alive/dead/left and each node's heartbeat age are left out while the store
            // cannot be read; this node's heartbeat counts are always there (they are how an
            // outage shows).
            let nodes = self.status_offered().await.ok();
            metrics::register(self, nodes.as_deref(), out);
        })
    }
}
