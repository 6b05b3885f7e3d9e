//! What the shared fan-out offers the HTTP API (`herald_stage::offers`): the node's drain
//! (`herald node drain`) and its `/metrics` series, in the API's terms.

use crate::node::Shards;
use herald_api_types::NodeDrained;
use herald_stage::offers::{self, Offered};
use herald_telemetry::exposition::Registry;
use std::time::Duration;

impl offers::NodeDrain for Shards {
    fn drain(&self, wait: Duration) -> Offered<'_, NodeDrained> {
        Box::pin(async move {
            let r = Shards::drain(self, wait).await;
            NodeDrained {
                node_id: self.node_id().to_string(),
                held: r.held,
                handed_back: r.handed_back,
                finished: r.finished,
                remaining: r.remaining,
            }
        })
    }
}

impl offers::Metrics for Shards {
    fn register_metrics<'a>(&'a self, out: &'a mut Registry) -> Offered<'a, ()> {
        Box::pin(async move {
            // The cluster's counts are a blocking read of the shared store: off the async
            // threads, and left out when the store cannot be read.
            let d = self.directory.clone();
            let counts = match tokio::task::spawn_blocking(move || d.shard_counts()).await {
                Ok(Ok(c)) => Some(c),
                _ => None,
            };
            crate::metrics::register(self, counts.as_ref(), out);
        })
    }
}
