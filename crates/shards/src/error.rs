//! The shared fan-out's one error type: the store or the spool failed, or a stored row does
//! not check out (then the shard is set aside, see `node.rs`).

use herald_directory::DirectoryError;
use herald_spool::SpoolError;

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The shared store failed while doing `what`.
    #[error("shared fan-out: cannot {what}: {source}")]
    Store {
        what: &'static str,
        #[source]
        source: DirectoryError,
    },
    /// The local spool refused a shard's post (a disk outage): the shard is handed back.
    #[error("shared fan-out: cannot spool a shard here: {0}")]
    Spool(#[from] SpoolError),
    /// A stored row is damaged: the shard is set aside with this reason.
    #[error("shard {shard}: {reason}")]
    Bad { shard: String, reason: String },
    /// A blocking store call's task failed.
    #[error("shared fan-out: a store task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// `map_err` adapter: `.map_err(store("claim a shard"))`.
pub(crate) fn store(what: &'static str) -> impl FnOnce(DirectoryError) -> ShardError {
    move |source| ShardError::Store { what, source }
}
