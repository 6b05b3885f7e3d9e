//! Stored postmaster mail over HTTP (RFC 5321 §4.5.1; the server keeps it as
//! `PostKind::Postmaster`): list it, read one message as it arrived, delete one. Like held posts
//! and kept bounces, this reads the spool directly; the server's lists stage forwards it and
//! expires it.
//!
//! Ids are the hex form the SMTP reply (`250 … queued as <id>`), the delivery log and the
//! forwarded note show, so an operator can paste any of them.
//!
//! SECURITY: admin routes (behind `auth::guard`). A message is served as `message/rfc822`
//! with `nosniff` and as an attachment, never as HTML: its content is untrusted.

use crate::extract::{Json, Path, Query};
use crate::{ApiError, ApiState};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use herald_api_types::{PostmasterFilter, PostmasterView};
use herald_spool::{PostKind, PostMeta, Spool};
use herald_types::PostId;
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// Most rows one listing returns.
const MAX_LIMIT: usize = 10_000;

/// `GET /api/v1/postmaster?limit=N`: oldest first.
#[utoipa::path(
    get,
    path = "/postmaster",
    tag = "postmaster",
    params(PostmasterFilter),
    responses((status = 200, description = "Stored postmaster mail", body = Vec<PostmasterView>), crate::schema::Problems)
)]
pub async fn list(State(s): St, Query(f): Query<PostmasterFilter>) -> Json<Vec<PostmasterView>> {
    let views = s
        .spool
        .live_posts()
        .into_iter()
        .filter(|(_, m)| m.kind == PostKind::Postmaster)
        .take(f.limit.unwrap_or(1000).min(MAX_LIMIT))
        .map(|(post, m)| view(&s.spool, post, m))
        .collect();
    Json(views)
}

fn view(spool: &Spool, post: PostId, m: PostMeta) -> PostmasterView {
    let forward = match spool.progress(post) {
        Some(p) if p.delivered > 0 => "forwarded",
        Some(p) if p.failed > 0 => "kept",
        _ => "pending",
    };
    PostmasterView {
        post: post.to_string(),
        to: m.list_address.to_string(),
        from: m.envelope_from.map(|a| a.to_string()),
        message_id: m.message_id,
        received_at_ms: m.received_at_ms,
        forward: forward.to_string(),
    }
}

pub(crate) fn stored_id(s: &ApiState, text: &str) -> Result<PostId, ApiError> {
    let id: PostId = text.parse().map_err(|_| ApiError::Invalid {
        field: "post".into(),
        reason: format!("not a post id: {text:?}"),
    })?;
    let is_postmaster = s
        .spool
        .live_posts()
        .iter()
        .any(|(p, m)| *p == id && m.kind == PostKind::Postmaster);
    if is_postmaster {
        Ok(id)
    } else {
        Err(ApiError::NotFound(format!(
            "no stored postmaster message {text}"
        )))
    }
}

/// `GET /api/v1/postmaster/<id>`: the message as it arrived (with our Received header on top).
#[utoipa::path(
    get,
    path = "/postmaster/{post}",
    tag = "postmaster",
    params(("post" = String, Path, description = "The post id: up to 16 hex digits", pattern = "^[0-9A-Fa-f]{1,16}$")),
    responses((status = 200, description = "The message as received", body = crate::schema::RawBytes, content_type = "message/rfc822"), crate::schema::Problems)
)]
pub async fn show(State(s): St, Path(post): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let id = stored_id(&s, &post)?;
    let body = s
        .spool
        .body(id)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .ok_or_else(|| ApiError::NotFound(format!("no stored postmaster message {post}")))?;
    Ok((
        [
            (header::CONTENT_TYPE, "message/rfc822".to_string()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"postmaster-{id}.eml\""),
            ),
        ],
        body,
    ))
}

/// `DELETE /api/v1/postmaster/<id>`: the operator is done with it.
#[utoipa::path(
    delete,
    path = "/postmaster/{post}",
    tag = "postmaster",
    params(("post" = String, Path, description = "The post id: up to 16 hex digits", pattern = "^[0-9A-Fa-f]{1,16}$")),
    responses((status = 204, description = "Deleted"), crate::schema::Problems)
)]
pub async fn delete(State(s): St, Path(post): Path<String>) -> Result<StatusCode, ApiError> {
    let id = stored_id(&s, &post)?;
    s.spool
        .complete(id)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    tracing::info!(post = %id, "postmaster mail deleted by the operator");
    Ok(StatusCode::NO_CONTENT)
}

/// The gauge next to the server's `herald_postmaster_messages_total` counter.
pub fn register_gauge(spool: &Spool, out: &mut herald_telemetry::exposition::Registry) {
    herald_telemetry::exposition::gauge_at(
        out,
        "herald_postmaster_stored",
        "Messages to postmaster stored for the operator (bounded by postmaster.max_stored).",
        spool.live_count(PostKind::Postmaster) as i64,
    );
}
