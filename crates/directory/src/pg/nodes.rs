//! The node registry on PostgreSQL: the SQL of `crate::nodes`. Every statement is one
//! autocommit statement outside the directory's write lock (a heartbeat never queues behind an
//! import); times are the server's `clock_timestamp()` (see `crate::nodes`).

use super::{col, unms, PgStore};
use crate::error::DirectoryError;
use crate::nodes::{with_state, NewNode, NodeRecord, NodeState, NodeTable, MAX_NODES};
use postgres::Row;

/// The server's clock in Unix milliseconds.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";

const COLUMNS: &str = "node_id, address, version, schema_version, started_at_ms, \
                       heartbeat_at_ms, state";

fn node_row(r: &Row) -> Result<NodeRecord, DirectoryError> {
    with_state((
        NodeRecord {
            node_id: col(r, 0)?,
            address: col(r, 1)?,
            version: col(r, 2)?,
            schema_version: col(r, 3)?,
            started_at_ms: unms(col(r, 4)?),
            heartbeat_at_ms: unms(col(r, 5)?),
            state: NodeState::Running,
        },
        col(r, 6)?,
    ))
}

impl PgStore {
    pub(crate) fn cluster_secret(&self, candidate: &[u8]) -> Result<Vec<u8>, DirectoryError> {
        self.read(|db| {
            // The first node's candidate is kept; the primary key lets one insert win when
            // several nodes start at once, and every node reads the winner's.
            db.exec(
                "store the cluster secret",
                &format!(
                    "INSERT INTO cluster_secret (one, secret, created_at_ms)
                     VALUES (TRUE, $1, {NOW_MS}) ON CONFLICT (one) DO NOTHING"
                ),
                &[&candidate],
            )?;
            let r = db.one(
                "read the cluster secret",
                "SELECT secret FROM cluster_secret WHERE one",
                &[],
            )?;
            col(&r, 0)
        })
    }

    pub(crate) fn stored_schema_version(&self) -> Result<i64, DirectoryError> {
        self.read(|db| {
            let r = db.opt(
                "read schema version",
                "SELECT version FROM directory_schema",
                &[],
            )?;
            r.map_or(Ok(0), |r| col(&r, 0))
        })
    }

    pub(crate) fn node_join(&self, n: &NewNode) -> Result<u64, DirectoryError> {
        self.read(|db| {
            let r = db.one(
                "record node",
                &format!(
                    "INSERT INTO nodes ({COLUMNS})
                     VALUES ($1, $2, $3, $4, {NOW_MS}, {NOW_MS}, 'running')
                     ON CONFLICT (node_id) DO UPDATE SET address = excluded.address,
                        version = excluded.version, schema_version = excluded.schema_version,
                        started_at_ms = excluded.started_at_ms,
                        heartbeat_at_ms = excluded.heartbeat_at_ms, state = 'running'
                     RETURNING started_at_ms"
                ),
                &[&n.node_id, &n.address, &n.version, &n.schema_version],
            )?;
            Ok(unms(col(&r, 0)?))
        })
    }

    pub(crate) fn node_heartbeat(&self, node_id: &str) -> Result<bool, DirectoryError> {
        self.read(|db| {
            let n = db.exec(
                "record heartbeat",
                &format!(
                    "UPDATE nodes SET heartbeat_at_ms = {NOW_MS}
                     WHERE node_id = $1 AND state = 'running'"
                ),
                &[&node_id],
            )?;
            Ok(n == 1)
        })
    }

    pub(crate) fn node_leave(&self, node_id: &str) -> Result<bool, DirectoryError> {
        self.read(|db| {
            let n = db.exec(
                "record node leaving",
                &format!(
                    "UPDATE nodes SET state = 'left', heartbeat_at_ms = {NOW_MS}
                     WHERE node_id = $1"
                ),
                &[&node_id],
            )?;
            Ok(n == 1)
        })
    }

    pub(crate) fn nodes(&self) -> Result<NodeTable, DirectoryError> {
        self.read(|db| {
            let now = db.one("read the store clock", &format!("SELECT {NOW_MS}"), &[])?;
            let limit = MAX_NODES as i64;
            let rows = db.all(
                "read nodes",
                &format!("SELECT {COLUMNS} FROM nodes ORDER BY node_id LIMIT $1"),
                &[&limit],
            )?;
            Ok(NodeTable {
                now_ms: unms(col(&now, 0)?),
                nodes: rows.iter().map(node_row).collect::<Result<_, _>>()?,
            })
        })
    }

    pub(crate) fn node(&self, node_id: &str) -> Result<Option<NodeRecord>, DirectoryError> {
        self.read(|db| {
            db.opt(
                "read node",
                &format!("SELECT {COLUMNS} FROM nodes WHERE node_id = $1"),
                &[&node_id],
            )?
            .as_ref()
            .map(node_row)
            .transpose()
        })
    }
}
