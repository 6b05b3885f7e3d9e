//! This node's membership: joining (with the checks that may refuse it), heartbeats, leaving,
//! and every node's status as this node judges it.
//!
//! Liveness is computed, never stored: a `running` row whose heartbeat is at most `dead_after`
//! old on the store's clock is alive, older is dead (a crash or `kill -9` leaves the row
//! `running`), and `left` is a graceful stop. So a dead node needs nobody to declare it dead.

use crate::config::ClusterConfig;
use crate::error::{store, ClusterError};
use herald_directory::{Directory, NewNode, NodeRecord, NodeState, SCHEMA_VERSION};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Who this node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub node_id: String,
    /// `host:port` where it answers (its HTTP API).
    pub address: String,
    /// The Herald version it runs.
    pub version: String,
}

/// What a node's row and heartbeat age say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeLiveness {
    /// Running, with a fresh heartbeat.
    Alive,
    /// Running in its row, but its heartbeat is stale: crashed, killed or cut off.
    Dead,
    /// Stopped gracefully.
    Left,
}

impl NodeLiveness {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeLiveness::Alive => "alive",
            NodeLiveness::Dead => "dead",
            NodeLiveness::Left => "left",
        }
    }

    /// Pure rule: `dead_after` is the heartbeat age beyond which a running node is dead.
    pub fn of(state: NodeState, heartbeat_age: Duration, dead_after: Duration) -> NodeLiveness {
        match state {
            NodeState::Left => NodeLiveness::Left,
            NodeState::Running if heartbeat_age <= dead_after => NodeLiveness::Alive,
            NodeState::Running => NodeLiveness::Dead,
        }
    }
}

/// One node as `herald status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub node_id: String,
    pub address: String,
    pub version: String,
    pub schema_version: i64,
    pub started_at_ms: u64,
    /// Age of its last heartbeat on the store's clock.
    pub heartbeat_age_ms: u64,
    pub liveness: NodeLiveness,
    /// The node that answered.
    pub this_node: bool,
}

/// This node's membership. Shared (`Arc`) by the heartbeat task, the API and the drain.
pub struct Cluster {
    directory: Directory,
    me: Identity,
    interval: Duration,
    dead_after: Duration,
    /// Heartbeats written since start.
    beats: AtomicU64,
    /// Heartbeats that failed (the store was unreachable); the next one tries again.
    failed_beats: AtomicU64,
    /// The store's schema version as last read (another node may migrate it).
    store_schema: AtomicI64,
    /// Why the last heartbeat failed, `None` after one succeeded (readiness: the store is
    /// unreachable). A std Mutex: set once per heartbeat, read per probe, never across `.await`.
    last_failure: std::sync::Mutex<Option<String>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Joins the cluster: refuses when the store's schema version is not this binary's (a
    /// newer or older Herald wrote it) or when `me.node_id` is alive at another address;
    /// otherwise records the node as running. Blocking.
    pub fn join(
        directory: Directory,
        cfg: &ClusterConfig,
        me: Identity,
    ) -> Result<Cluster, ClusterError> {
        let store_schema = directory
            .stored_schema_version()
            .map_err(store("read the store's schema version"))?;
        check_schema(&me.node_id, store_schema)?;
        let dead_after = cfg.dead_after();
        let table = directory.nodes().map_err(store("read the node table"))?;
        if let Some(old) = table.nodes.iter().find(|n| n.node_id == me.node_id) {
            let age = Duration::from_millis(table.now_ms.saturating_sub(old.heartbeat_at_ms));
            let alive = NodeLiveness::of(old.state, age, dead_after) == NodeLiveness::Alive;
            // The same address is this node restarting (after a crash, its row is still
            // fresh): it takes its row over. Another address on a shared store is a second
            // process claiming the id, which would make both invisible. A SQLite store is
            // never shared: a row there at another address is a copy (a restored backup),
            // not a live node, and is taken over.
            let shared = directory.store_kind() == herald_directory::StoreKind::Postgres;
            if alive && shared && old.address != me.address {
                return Err(ClusterError::DuplicateNode {
                    node: me.node_id,
                    address: old.address.clone(),
                    age_ms: age.as_millis() as u64,
                });
            }
        }
        directory
            .node_join(&new_node(&me))
            .map_err(store("record this node"))?;
        tracing::info!(node = %me.node_id, address = %me.address, nodes = table.nodes.len() + 1, "joined the cluster");
        Ok(Cluster {
            directory,
            me,
            interval: cfg.heartbeat_interval(),
            dead_after,
            beats: AtomicU64::new(0),
            failed_beats: AtomicU64::new(0),
            store_schema: AtomicI64::new(store_schema),
            last_failure: std::sync::Mutex::new(None),
        })
    }

    pub fn node_id(&self) -> &str {
        &self.me.node_id
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// One heartbeat (blocking). A row that disappeared or was marked left (an operator's
    /// doing) is written again. The store's schema version is read too: when another node has
    /// migrated it, this node says so loudly on every beat (it keeps serving: stopping a node
    /// is the operator's call) and `/metrics` shows it.
    pub fn beat(&self) -> Result<(), ClusterError> {
        let out = self.beat_once();
        let mut last = self
            .last_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &out {
            Ok(()) => {
                self.beats.fetch_add(1, Ordering::Relaxed);
                *last = None;
            }
            Err(e) => {
                self.failed_beats.fetch_add(1, Ordering::Relaxed);
                *last = Some(e.to_string());
            }
        };
        out
    }

    /// Why the store did not take this node's last heartbeat, `None` when it did (or none
    /// was due yet): the store is unreachable or cannot be written.
    pub fn store_failure(&self) -> Option<String> {
        self.last_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn beat_once(&self) -> Result<(), ClusterError> {
        let found = self
            .directory
            .node_heartbeat(&self.me.node_id)
            .map_err(store("record a heartbeat"))?;
        if !found {
            tracing::warn!(node = %self.me.node_id, "this node's row was gone or marked left; joining again");
            self.directory
                .node_join(&new_node(&self.me))
                .map_err(store("record this node"))?;
        }
        let schema = self
            .directory
            .stored_schema_version()
            .map_err(store("read the store's schema version"))?;
        self.store_schema.store(schema, Ordering::Relaxed);
        if schema != SCHEMA_VERSION {
            let e = ClusterError::SchemaMismatch {
                node: self.me.node_id.clone(),
                binary: SCHEMA_VERSION,
                store: schema,
            };
            tracing::error!(error = %e, "another node changed the shared store's schema");
        }
        Ok(())
    }

    /// Marks this node as left (a graceful stop). Blocking.
    pub fn leave(&self) -> Result<(), ClusterError> {
        self.directory
            .node_leave(&self.me.node_id)
            .map_err(store("record this node leaving"))?;
        tracing::info!(node = %self.me.node_id, "left the cluster");
        Ok(())
    }

    /// Every node as this node judges it (blocking): alive, dead or left, with heartbeat age.
    pub fn status(&self) -> Result<Vec<NodeStatus>, ClusterError> {
        let table = self
            .directory
            .nodes()
            .map_err(store("read the node table"))?;
        Ok(table
            .nodes
            .into_iter()
            .map(|n| self.judge(n, table.now_ms))
            .collect())
    }

    /// As [`Cluster::status`], with the store read on the blocking pool (for async callers).
    /// The outer error: that task failed.
    pub async fn status_async(
        &self,
    ) -> Result<Result<Vec<NodeStatus>, ClusterError>, tokio::task::JoinError> {
        let d = self.directory.clone();
        Ok(tokio::task::spawn_blocking(move || d.nodes())
            .await?
            .map_err(store("read the node table"))
            .map(|table| {
                table
                    .nodes
                    .into_iter()
                    .map(|n| self.judge(n, table.now_ms))
                    .collect()
            }))
    }

    fn judge(&self, n: NodeRecord, now_ms: u64) -> NodeStatus {
        let age_ms = now_ms.saturating_sub(n.heartbeat_at_ms);
        NodeStatus {
            liveness: NodeLiveness::of(n.state, Duration::from_millis(age_ms), self.dead_after),
            this_node: n.node_id == self.me.node_id,
            node_id: n.node_id,
            address: n.address,
            version: n.version,
            schema_version: n.schema_version,
            started_at_ms: n.started_at_ms,
            heartbeat_age_ms: age_ms,
        }
    }

    /// Heartbeats written and failed since start, and the store's schema version as last read.
    pub fn counters(&self) -> (u64, u64, i64) {
        (
            self.beats.load(Ordering::Relaxed),
            self.failed_beats.load(Ordering::Relaxed),
            self.store_schema.load(Ordering::Relaxed),
        )
    }
}

fn check_schema(node: &str, store: i64) -> Result<(), ClusterError> {
    if store != SCHEMA_VERSION {
        return Err(ClusterError::SchemaMismatch {
            node: node.to_string(),
            binary: SCHEMA_VERSION,
            store,
        });
    }
    Ok(())
}

fn new_node(me: &Identity) -> NewNode {
    NewNode {
        node_id: me.node_id.clone(),
        address: me.address.clone(),
        version: me.version.clone(),
        schema_version: SCHEMA_VERSION,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me(id: &str, addr: &str) -> Identity {
        Identity {
            node_id: id.into(),
            address: addr.into(),
            version: "0.1.0".into(),
        }
    }

    fn fast() -> ClusterConfig {
        ClusterConfig {
            heartbeat_interval_secs: 1,
            dead_after_intervals: 2,
            ..Default::default()
        }
    }

    #[test]
    fn liveness_rule() {
        let s = Duration::from_secs;
        assert_eq!(
            NodeLiveness::of(NodeState::Running, s(3), s(3)),
            NodeLiveness::Alive
        );
        assert_eq!(
            NodeLiveness::of(NodeState::Running, s(4), s(3)),
            NodeLiveness::Dead
        );
        assert_eq!(
            NodeLiveness::of(NodeState::Left, s(0), s(3)),
            NodeLiveness::Left
        );
    }

    /// Two nodes on one PostgreSQL database see each other; one stops beating and goes dead
    /// after its window, the other leaves gracefully; the same id at another address is
    /// refused while alive, and a restart at the same address takes its row over.
    #[test]
    fn nodes_on_a_shared_store_see_each_other_live_die_and_leave() {
        let url = herald_pg_harness::PgServer::shared()
            .fresh_database()
            .expect("database");
        let d = Directory::open_postgres(&url, 2).expect("open");
        let a = Cluster::join(d.clone(), &fast(), me("a", "127.0.0.2:8025")).expect("a");
        let b = Cluster::join(d.clone(), &fast(), me("b", "127.0.0.3:8025")).expect("b");
        let s = a.status().expect("status");
        assert_eq!(s.len(), 2);
        assert!(s.iter().all(|n| n.liveness == NodeLiveness::Alive), "{s:?}");
        assert!(s[0].this_node && !s[1].this_node);

        match Cluster::join(d.clone(), &fast(), me("b", "127.0.0.9:8025")) {
            Err(ClusterError::DuplicateNode { node, address, .. }) => {
                assert_eq!((node.as_str(), address.as_str()), ("b", "127.0.0.3:8025"))
            }
            other => panic!("duplicate id joined: {other:?}"),
        }
        Cluster::join(d.clone(), &fast(), me("b", "127.0.0.3:8025")).expect("restart");

        // b stops beating (as after kill -9); a keeps beating past b's dead window.
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(500));
            a.beat().expect("beat");
        }
        let s = a.status().expect("status");
        assert_eq!(s[0].liveness, NodeLiveness::Alive, "{s:?}");
        assert_eq!(s[1].liveness, NodeLiveness::Dead, "{s:?}");
        assert!(s[1].heartbeat_age_ms > 2000, "{s:?}");
        // A dead node's id may be taken from elsewhere (the machine was replaced).
        Cluster::join(d.clone(), &fast(), me("b", "127.0.0.9:8025")).expect("replace");
        b.leave().expect("leave");
        let s = a.status().expect("status");
        assert_eq!(s[1].liveness, NodeLiveness::Left);
        assert_eq!(a.counters().0, 5);
    }

    /// On SQLite (never shared) a fresh row at another address is a copy — a backup
    /// restored on another machine — and is taken over, not refused.
    #[test]
    fn a_sqlite_copy_of_a_live_row_is_taken_over() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = Directory::open(&tmp.path().join("d.db")).expect("open");
        Cluster::join(d.clone(), &fast(), me("a", "127.0.0.2:1")).expect("first");
        let again = Cluster::join(d.clone(), &fast(), me("a", "127.0.0.3:1")).expect("restored");
        let s = again.status().expect("status");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].address, "127.0.0.3:1");
    }

    /// A store at another schema version than the binary's is refused by name, with both
    /// numbers, and nothing is written.
    #[test]
    fn a_store_at_another_schema_version_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("d.db");
        let d = Directory::open(&path).expect("open");
        for found in [SCHEMA_VERSION + 1, SCHEMA_VERSION - 1] {
            // What a newer node would leave behind (a directory opened earlier keeps running).
            rusqlite_set_version(&path, found);
            let e = Cluster::join(d.clone(), &fast(), me("a", "127.0.0.2:1")).expect_err("join");
            let text = e.to_string();
            assert!(
                matches!(e, ClusterError::SchemaMismatch { store, .. } if store == found),
                "{text}"
            );
            assert!(text.contains(&format!("schema {SCHEMA_VERSION}")), "{text}");
            assert!(text.contains(&format!("schema {found}")), "{text}");
        }
        rusqlite_set_version(&path, SCHEMA_VERSION);
        assert!(
            d.nodes().expect("nodes").nodes.is_empty(),
            "nothing written"
        );
    }

    fn rusqlite_set_version(path: &std::path::Path, v: i64) {
        let conn = rusqlite::Connection::open(path).expect("open");
        conn.pragma_update(None, "user_version", v).expect("set");
    }
}
