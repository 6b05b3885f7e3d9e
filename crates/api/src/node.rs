//! This node's place in the shared fan-out over HTTP: `POST
//! /api/v1/node/drain` (`herald node drain`), for maintenance: the node stops claiming shards,
//! hands back those it has not finished and answers when it holds none (or the wait ran out).
//!
//! SECURITY: an admin route (`auth::guard`); the wait is bounded ([`MAX_WAIT_SECS`]).

use crate::extract::{Json, Query};
use crate::{ApiError, ApiState};
use axum::extract::State;
use herald_api_types::NodeDrained;
use std::sync::Arc;
use std::time::Duration;

type St = State<Arc<ApiState>>;

/// Longest a drain request waits for the hand-back to finish.
pub const MAX_WAIT_SECS: u64 = 300;

/// `?wait_secs=N` for [`drain`] (default 30).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DrainWait {
    /// Seconds to wait for every shard to be handed back or finished (0 to 300).
    pub wait_secs: Option<u64>,
}

/// `POST /api/v1/node/drain?wait_secs=N`: stop claiming shards of shared posts and hand back the
/// unfinished ones; `remaining` 0 in the answer means drained.
#[utoipa::path(
    post,
    path = "/node/drain",
    tag = "status",
    params(DrainWait),
    responses((status = 200, description = "What the drain did", body = NodeDrained), crate::schema::Problems)
)]
pub async fn drain(
    State(s): St,
    Query(q): Query<DrainWait>,
) -> Result<Json<NodeDrained>, ApiError> {
    let Some(node) = s.node_drain.clone() else {
        return Err(ApiError::Conflict(
            "shared fan-out is off on this node ([cluster] shared_fanout): it holds no shards"
                .into(),
        ));
    };
    let wait = q.wait_secs.unwrap_or(30);
    if wait > MAX_WAIT_SECS {
        return Err(ApiError::Invalid {
            field: "wait_secs".into(),
            reason: format!("at most {MAX_WAIT_SECS}"),
        });
    }
    Ok(Json(node.drain(Duration::from_secs(wait)).await))
}
