//! The cluster's one error type: why a node may not join, or a store call that failed.

use herald_directory::DirectoryError;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The binary and the shared store speak different directory schemas: joining could
    /// corrupt the data other nodes use.
    #[error(
        "node {node} refuses to join the cluster: this binary speaks directory schema \
         {binary}, the shared store is at schema {store}; run the same Herald version on every \
         node (upgrade this node, or restore the store)"
    )]
    SchemaMismatch {
        node: String,
        binary: i64,
        store: i64,
    },
    /// Another process already runs as this node id (alive at another address).
    #[error(
        "node {node} refuses to join the cluster: a node with this id is alive at {address} \
         (heartbeat {age_ms} ms ago); give each node its own [cluster] node_id"
    )]
    DuplicateNode {
        node: String,
        address: String,
        age_ms: u64,
    },
    /// The store failed while doing `what`.
    #[error("cluster: cannot {what}: {source}")]
    Store {
        what: &'static str,
        #[source]
        source: DirectoryError,
    },
}

/// `map_err` adapter: `.map_err(store("record heartbeat"))`.
pub(crate) fn store(what: &'static str) -> impl FnOnce(DirectoryError) -> ClusterError {
    move |source| ClusterError::Store { what, source }
}
