//! The views that were JSON only, as pages: a list's bounces (its owners; re-enable and reset
//! go through the members' action route), and for the site the stragglers (retry, give up,
//! disable), stored postmaster mail (read as text, delete) and the audit log (a list's, for its
//! owners). Each calls the JSON route's own handler function for its data and actions.
//!
//! SECURITY: reached only through the guard (`access.rs`); straggler targets are parsed by
//! the JSON handler (`live::selector`), post ids by `postmaster::stored_id`.

use super::{ctx, error_page, html, list_key, see, Done};
use crate::accounts_api::AuditFilter;
use crate::auth::Caller;
use crate::{ApiError, ApiState};
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use herald_api_types::{ListFilter, PostmasterFilter, StragglerTarget, StragglersQuery};
use herald_webadmin::message::MessageView;
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// `GET /admin/lists/<list>/bounces`: the latest 200 events.
pub async fn bounces(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(list): Path<String>,
    Query(done): Query<Done>,
) -> Response {
    let key = match list_key(&list) {
        Ok(k) => k,
        Err(e) => return error_page(&caller, e),
    };
    let filter = ListFilter {
        list: Some(key.clone()),
        kind: None,
        limit: Some(200),
    };
    match crate::lists_ops::bounces(State(s.clone()), crate::extract::Query(filter)).await {
        Ok(crate::extract::Json(events)) => {
            let page = herald_webadmin::reports::bounces_page(&ctx(&caller, &done), &key, &events);
            html(StatusCode::OK, page)
        }
        Err(e) => error_page(&caller, e),
    }
}

/// `GET /admin/stragglers`.
pub async fn stragglers(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Query(done): Query<Done>,
) -> Response {
    let q = StragglersQuery { limit: Some(100) };
    let crate::extract::Json(report) =
        crate::live::stragglers(State(s.clone()), crate::extract::Query(q)).await;
    let page = herald_webadmin::reports::stragglers_page(&ctx(&caller, &done), &report);
    html(StatusCode::OK, page)
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct StragglerFields {
    recipient: Option<String>,
    domain: Option<String>,
}

/// `POST /admin/stragglers/<retry|give-up|disable>`.
pub async fn straggler_action(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(verb): Path<String>,
    Form(f): Form<StragglerFields>,
) -> Response {
    let t = StragglerTarget {
        recipient: f.recipient.filter(|r| !r.is_empty()),
        domain: f.domain.filter(|d| !d.is_empty()),
        list: None,
    };
    let st = State(s.clone());
    let (r, done) = match verb.as_str() {
        "retry" => (
            crate::live::retry(st, crate::extract::Json(t)).await,
            "retried",
        ),
        "give-up" => (
            crate::live::give_up(st, crate::extract::Json(t)).await,
            "gave-up",
        ),
        "disable" => (
            crate::live::disable(st, crate::extract::Json(t)).await,
            "disabled",
        ),
        _ => return error_page(&caller, ApiError::NotFound(format!("no action {verb:?}"))),
    };
    match r {
        Ok(_) => see(format!("/admin/stragglers?done={done}")),
        Err(e) => error_page(&caller, e),
    }
}

/// `GET /admin/postmaster`.
pub async fn postmaster(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Query(done): Query<Done>,
) -> Response {
    let f = PostmasterFilter { limit: Some(500) };
    let crate::extract::Json(rows) =
        crate::postmaster::list(State(s.clone()), crate::extract::Query(f)).await;
    let page = herald_webadmin::reports::postmaster_page(&ctx(&caller, &done), &rows);
    html(StatusCode::OK, page)
}

/// `GET /admin/postmaster/<post>`: the message as text.
pub async fn postmaster_message(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(post): Path<String>,
) -> Response {
    let id = match crate::postmaster::stored_id(&s, &post) {
        Ok(id) => id,
        Err(e) => return error_page(&caller, e),
    };
    let body = match s.spool.body(id).await {
        Ok(Some(b)) => b,
        Ok(None) => return error_page(&caller, ApiError::NotFound(format!("no message {post}"))),
        Err(e) => return error_page(&caller, ApiError::Internal(e.to_string())),
    };
    let m = match tokio::task::spawn_blocking(move || MessageView::parse(&body)).await {
        Ok(m) => m,
        Err(e) => return error_page(&caller, e.into()),
    };
    let page =
        herald_webadmin::reports::postmaster_message(&ctx(&caller, &Done::default()), &post, &m);
    html(StatusCode::OK, page)
}

/// `POST /admin/postmaster/<post>/delete`.
pub async fn postmaster_delete(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(post): Path<String>,
) -> Response {
    match crate::postmaster::delete(State(s.clone()), crate::extract::Path(post)).await {
        Ok(_) => see("/admin/postmaster?done=deleted".to_string()),
        Err(e) => error_page(&caller, e),
    }
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct AuditQuery {
    list: Option<String>,
    done: Option<String>,
}

/// `GET /admin/audit` (`?list=` for a list's owners).
pub async fn audit(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Query(q): Query<AuditQuery>,
) -> Response {
    let list = match q.list.as_deref().map(list_key).transpose() {
        Ok(l) => l,
        Err(e) => return error_page(&caller, e),
    };
    let f = AuditFilter {
        list: list.clone(),
        since: None,
        limit: Some(500),
    };
    match crate::accounts_api::audit(State(s.clone()), crate::extract::Query(f)).await {
        Ok(crate::extract::Json(rows)) => {
            let done = Done { done: q.done };
            let page =
                herald_webadmin::reports::audit_page(&ctx(&caller, &done), list.as_deref(), &rows);
            html(StatusCode::OK, page)
        }
        Err(e) => error_page(&caller, e),
    }
}
