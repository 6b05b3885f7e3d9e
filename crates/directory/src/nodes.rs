//! The cluster's node registry in the shared store: one row per node that
//! joined, with its address, version, schema version, start and last heartbeat, and whether it
//! is running or left. The `herald-cluster` crate drives it (join, heartbeat task, leave) and
//! decides what "alive" means; this file only stores rows.
//!
//! Times are read from the *store's* clock (SQLite's `julianday('now')`, PostgreSQL's
//! `clock_timestamp()`), never from the node's: nodes on several machines compare heartbeats
//! against one clock, so a node whose clock is off by a minute is not reported dead or alive by
//! mistake. [`NodeTable::now_ms`] is that clock at the time of the read.
//!
//! Heartbeats are one `UPDATE` in autocommit on PostgreSQL, outside the directory's write lock
//! (`pg::WRITE_LOCK`): a node's heartbeat never waits behind a member import, nor holds one up.
//!
//! SECURITY: node ids and addresses come from the operator's configuration of *other* nodes too,
//! so they are checked on the way in ([`check_node`]: bounded, no control characters) and are
//! bound parameters in SQL. The number of rows read is bounded ([`MAX_NODES`]).

use crate::error::{storage, DirectoryError};
use crate::Directory;
use rusqlite::{params, OptionalExtension};

/// Most node rows `nodes()` returns: a cluster of Herald nodes is a handful of machines; the
/// bound only keeps a bug (a node id per restart) from making `herald status` unbounded.
pub const MAX_NODES: usize = 1000;
/// Longest node id (a host name's label set fits).
pub const MAX_NODE_ID_CHARS: usize = 64;
/// Longest advertised address (`host:port`).
pub const MAX_NODE_ADDRESS_CHARS: usize = 255;

/// What a node row says about the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Joined and not known to have left; whether it is *alive* depends on its heartbeat age.
    Running,
    /// Stopped gracefully.
    Left,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Running => "running",
            NodeState::Left => "left",
        }
    }

    fn parse(s: &str) -> Result<NodeState, DirectoryError> {
        match s {
            "running" => Ok(NodeState::Running),
            "left" => Ok(NodeState::Left),
            other => Err(DirectoryError::Corrupt {
                what: "nodes.state",
                reason: format!("unknown state {other:?}"),
            }),
        }
    }
}

/// A node joining: who it is and what it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNode {
    pub node_id: String,
    /// Where the node answers (its HTTP API, `host:port`).
    pub address: String,
    /// The Herald version it runs.
    pub version: String,
    /// The directory schema version its binary speaks.
    pub schema_version: i64,
}

/// One stored node row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    pub node_id: String,
    pub address: String,
    pub version: String,
    pub schema_version: i64,
    /// When it (last) joined, store clock, Unix ms.
    pub started_at_ms: u64,
    /// Its last heartbeat (or its leaving), store clock, Unix ms.
    pub heartbeat_at_ms: u64,
    pub state: NodeState,
}

/// Every node row and the store's clock when they were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTable {
    pub now_ms: u64,
    pub nodes: Vec<NodeRecord>,
}

/// Refuses a node id or address that is empty, too long or carries control characters or
/// spaces (they end up in status lines and metric labels).
pub fn check_node(node_id: &str, address: &str) -> Result<(), DirectoryError> {
    let bad = |field, reason: String| Err(DirectoryError::InvalidInput { field, reason });
    if node_id.is_empty() || node_id.chars().count() > MAX_NODE_ID_CHARS {
        return bad(
            "node_id",
            format!("must be 1 to {MAX_NODE_ID_CHARS} characters"),
        );
    }
    if !node_id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return bad(
            "node_id",
            "may hold only ASCII letters, digits, '.', '-' and '_'".into(),
        );
    }
    if address.is_empty()
        || address.chars().count() > MAX_NODE_ADDRESS_CHARS
        || !address.chars().all(|c| c.is_ascii_graphic())
    {
        return bad(
            "address",
            format!("must be 1 to {MAX_NODE_ADDRESS_CHARS} printable ASCII characters"),
        );
    }
    Ok(())
}

/// The store's clock in Unix milliseconds, as SQLite computes it.
const SQLITE_NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

fn node_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(NodeRecord, String)> {
    Ok((
        NodeRecord {
            node_id: r.get(0)?,
            address: r.get(1)?,
            version: r.get(2)?,
            schema_version: r.get(3)?,
            started_at_ms: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
            heartbeat_at_ms: u64::try_from(r.get::<_, i64>(5)?).unwrap_or(0),
            state: NodeState::Running,
        },
        r.get(6)?,
    ))
}

/// A row's state column decoded (shared with the PostgreSQL side).
pub(crate) fn with_state(
    (mut rec, state): (NodeRecord, String),
) -> Result<NodeRecord, DirectoryError> {
    rec.state = NodeState::parse(&state)?;
    Ok(rec)
}

impl Directory {
    /// The cluster's one link secret, kept in the shared store (PostgreSQL only): the
    /// stored one, or `candidate` when none is stored yet (the first node's becomes the
    /// cluster's). Every node mints and checks links with it, so a link from one node works on
    /// all. SECURITY: whoever can read the store can mint links; the store already holds every
    /// member, so it is guarded as the secret is.
    pub fn cluster_secret(&self, candidate: &[u8]) -> Result<Vec<u8>, DirectoryError> {
        match self.backend() {
            crate::Backend::Postgres(pg) => pg.cluster_secret(candidate),
            crate::Backend::Sqlite(_) => Err(DirectoryError::InvalidInput {
                field: "store",
                reason: "a cluster secret needs a PostgreSQL store ([store] url)".into(),
            }),
        }
    }

    /// The directory schema version stored in the database now (what a node compares its
    /// binary's [`crate::SCHEMA_VERSION`] with: another node may have migrated it since).
    pub fn stored_schema_version(&self) -> Result<i64, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.stored_schema_version());
        store
            .reader()?
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(storage("read schema version"))
    }

    /// Records `node` as running, started and heartbeating now (a node that was there before —
    /// a restart — is updated in place). Returns the store's clock.
    pub fn node_join(&self, node: &NewNode) -> Result<u64, DirectoryError> {
        check_node(&node.node_id, &node.address)?;
        let store = sqlite_or!(self, pg => pg.node_join(node));
        store.write(|tx| {
            let now: i64 = tx
                .query_row(&format!("SELECT {SQLITE_NOW_MS}"), [], |r| r.get(0))
                .map_err(storage("read the store clock"))?;
            tx.execute(
                "INSERT INTO nodes (node_id, address, version, schema_version, started_at_ms,
                                    heartbeat_at_ms, state)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, 'running')
                 ON CONFLICT (node_id) DO UPDATE SET address = excluded.address,
                    version = excluded.version, schema_version = excluded.schema_version,
                    started_at_ms = excluded.started_at_ms,
                    heartbeat_at_ms = excluded.heartbeat_at_ms, state = 'running'",
                params![
                    node.node_id,
                    node.address,
                    node.version,
                    node.schema_version,
                    now
                ],
            )
            .map_err(storage("record node"))?;
            Ok(u64::try_from(now).unwrap_or(0))
        })
    }

    /// A heartbeat of a running node: false when its row is gone or marked left (the caller
    /// joins again).
    pub fn node_heartbeat(&self, node_id: &str) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.node_heartbeat(node_id));
        store.write(|tx| {
            let n = tx
                .execute(
                    &format!(
                        "UPDATE nodes SET heartbeat_at_ms = {SQLITE_NOW_MS}
                         WHERE node_id = ?1 AND state = 'running'"
                    ),
                    params![node_id],
                )
                .map_err(storage("record heartbeat"))?;
            Ok(n == 1)
        })
    }

    /// Marks the node as left (a graceful stop). False when it had no row.
    pub fn node_leave(&self, node_id: &str) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.node_leave(node_id));
        store.write(|tx| {
            let n = tx
                .execute(
                    &format!(
                        "UPDATE nodes SET state = 'left', heartbeat_at_ms = {SQLITE_NOW_MS}
                         WHERE node_id = ?1"
                    ),
                    params![node_id],
                )
                .map_err(storage("record node leaving"))?;
            Ok(n == 1)
        })
    }

    /// Every node row (at most [`MAX_NODES`], by node id) and the store's clock.
    pub fn nodes(&self) -> Result<NodeTable, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.nodes());
        let conn = store.reader()?;
        let now: i64 = conn
            .query_row(&format!("SELECT {SQLITE_NOW_MS}"), [], |r| r.get(0))
            .map_err(storage("read the store clock"))?;
        let mut stmt = conn
            .prepare_cached(
                "SELECT node_id, address, version, schema_version, started_at_ms,
                        heartbeat_at_ms, state
                 FROM nodes ORDER BY node_id LIMIT ?1",
            )
            .map_err(storage("read nodes"))?;
        let rows = stmt
            .query_map(params![MAX_NODES as i64], node_row)
            .map_err(storage("read nodes"))?;
        let mut nodes = Vec::new();
        for r in rows {
            nodes.push(with_state(r.map_err(storage("read node row"))?)?);
        }
        Ok(NodeTable {
            now_ms: u64::try_from(now).unwrap_or(0),
            nodes,
        })
    }

    /// One node's row.
    pub fn node(&self, node_id: &str) -> Result<Option<NodeRecord>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.node(node_id));
        let conn = store.reader()?;
        let row = conn
            .query_row(
                "SELECT node_id, address, version, schema_version, started_at_ms,
                        heartbeat_at_ms, state
                 FROM nodes WHERE node_id = ?1",
                params![node_id],
                node_row,
            )
            .optional()
            .map_err(storage("read node"))?;
        row.map(with_state).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::on_both;

    fn node(id: &str, addr: &str) -> NewNode {
        NewNode {
            node_id: id.into(),
            address: addr.into(),
            version: "0.1.0".into(),
            schema_version: crate::SCHEMA_VERSION,
        }
    }

    /// Join, heartbeat, leave and rejoin on both stores; times come from the store's clock
    /// and only move forward.
    #[test]
    fn nodes_join_beat_leave_and_rejoin() {
        on_both(|d| {
            assert_eq!(
                d.stored_schema_version().expect("version"),
                crate::SCHEMA_VERSION
            );
            assert!(d.nodes().expect("nodes").nodes.is_empty());
            let joined = d.node_join(&node("a", "127.0.0.2:8025")).expect("join");
            d.node_join(&node("b", "127.0.0.3:8025")).expect("join b");
            let t = d.nodes().expect("nodes");
            assert_eq!(t.nodes.len(), 2);
            assert!(t.now_ms >= joined, "store clock went back");
            let a = &t.nodes[0];
            assert_eq!(
                (a.node_id.as_str(), a.address.as_str(), a.state),
                ("a", "127.0.0.2:8025", NodeState::Running)
            );
            assert_eq!(a.started_at_ms, a.heartbeat_at_ms);
            std::thread::sleep(std::time::Duration::from_millis(5));
            assert!(d.node_heartbeat("a").expect("beat"));
            let a2 = d.node("a").expect("read").expect("row");
            assert!(a2.heartbeat_at_ms > a.heartbeat_at_ms, "heartbeat moved");
            assert!(!d.node_heartbeat("nobody").expect("beat"), "no row");
            assert!(d.node_leave("a").expect("leave"));
            assert_eq!(
                d.node("a").expect("read").expect("row").state,
                NodeState::Left
            );
            assert!(
                !d.node_heartbeat("a").expect("beat"),
                "left nodes do not beat"
            );
            d.node_join(&node("a", "127.0.0.4:8025")).expect("rejoin");
            let a3 = d.node("a").expect("read").expect("row");
            assert_eq!(
                (a3.state, a3.address.as_str()),
                (NodeState::Running, "127.0.0.4:8025")
            );
        });
    }

    /// Hostile ids and addresses are refused before any SQL, by field.
    #[test]
    fn hostile_node_ids_and_addresses_are_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = Directory::open(&tmp.path().join("d.db")).expect("open");
        for (id, addr, field) in [
            ("", "127.0.0.2:1", "node_id"),
            ("a b", "127.0.0.2:1", "node_id"),
            ("a\r\nb", "127.0.0.2:1", "node_id"),
            ("é", "127.0.0.2:1", "node_id"),
            (&"x".repeat(65), "127.0.0.2:1", "node_id"),
            ("a", "", "address"),
            ("a", "127.0.0.2:1\n", "address"),
            ("a", &"1".repeat(256), "address"),
        ] {
            match d.node_join(&node(id, addr)) {
                Err(DirectoryError::InvalidInput { field: f, .. }) => {
                    assert_eq!(f, field, "{id:?}")
                }
                other => panic!("{id:?}/{addr:?} accepted: {other:?}"),
            }
        }
        assert!(d.nodes().expect("nodes").nodes.is_empty(), "nothing stored");
    }
}
