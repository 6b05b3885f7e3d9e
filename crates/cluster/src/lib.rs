//! herald-cluster: the nodes of a Herald cluster. Every `herald serve`
//! joins: it writes a row to the `nodes` table of the shared store (the directory; PostgreSQL
//! when several nodes share it, SQLite where a single node sees itself through the same code),
//! heartbeats it every `[cluster] heartbeat_interval_secs`, and marks it `left` when it stops
//! gracefully. A node is *alive* while its last heartbeat is at most `dead_after_intervals`
//! intervals old on the store's clock; a `kill -9`'d node stays `running` in its row and shows
//! as *dead* once its heartbeat is stale.
//!
//! Place in the flow: a side stage. The server joins in `open_stores` (after the directory is
//! open and migrated: [`Cluster::join`] refuses a binary whose schema version differs from the
//! store's, and a node id already alive at another address), runs [`heartbeat::run`] as a task
//! and calls [`Cluster::leave`] in its drain. The API reads [`Cluster::status`] for
//! `/api/v1/status` (so `herald status` and the dashboard list every node) and
//! [`metrics::register`] for `/metrics`.
//!
//! Any node accepts posts (SMTP, LMTP, API): a post is spooled and fanned out by the node that
//! accepted it; sharing one post's fan-out between nodes is `herald-shards`' job.
//!
//! The store calls are blocking (the directory's API): async callers use `spawn_blocking`.

pub mod config;
pub mod error;
pub mod heartbeat;
pub mod metrics;
mod offers;
mod registry;

pub use config::ClusterConfig;
pub use error::ClusterError;
pub use heartbeat::start;
pub use registry::{Cluster, Identity, NodeLiveness, NodeStatus};
