//! `/admin/lists/<list>/held`: the list's held posts (the JSON route's own listing, plus each
//! post's subject), one post read as text (`…/held/<post>`), and approve, reject (with the
//! moderator's reason in the sender's notice) or discard, for one post or those ticked
//! (`POST …/held/approve|reject|discard`, field `post` repeated) — through the same `ListOps`
//! the JSON routes and mail commands use.
//!
//! SECURITY: the guard let a moderator of the list in the path through; a post named in the
//! form that is not held on that list is not acted on (a moderator of one list cannot reach
//! another's posts by naming them). Post ids are parsed as numbers; the reason is bounded.

use super::{ctx, error_page, html, list_key, owns, see, Done};
use crate::auth::Caller;
use crate::{ApiError, ApiState};
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use herald_api_types::{HeldView, ListFilter};
use herald_types::PostId;
use herald_webadmin::held::{HeldLine, MAX_REASON_CHARS};
use herald_webadmin::layout::list_href;
use herald_webadmin::message::{subject_of, MessageView};
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// Most held posts one page lists.
const MAX_SHOWN: usize = 500;

/// The list's held posts, from the JSON route's own listing.
async fn held_of(s: &Arc<ApiState>, key: &str) -> Vec<HeldView> {
    let filter = ListFilter {
        list: Some(key.to_string()),
        kind: None,
        limit: Some(MAX_SHOWN),
    };
    crate::lists_ops::held(State(s.clone()), crate::extract::Query(filter))
        .await
        .0
}

/// `GET /admin/lists/<list>/held`.
pub async fn page(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(list): Path<String>,
    Query(done): Query<Done>,
) -> Response {
    let key = match list_key(&list) {
        Ok(k) => k,
        Err(e) => return error_page(&caller, e),
    };
    let mut rows = Vec::new();
    for view in held_of(&s, &key).await {
        let subject = match s.spool.body(PostId(view.post)).await {
            Ok(Some(body)) => subject_of(&body),
            _ => String::new(),
        };
        rows.push(HeldLine { view, subject });
    }
    let page =
        herald_webadmin::held::held_page(&ctx(&caller, &done), &key, owns(&caller, &key), &rows);
    html(StatusCode::OK, page)
}

/// `GET /admin/lists/<list>/held/<post>`.
pub async fn show(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path((list, post)): Path<(String, String)>,
) -> Response {
    let key = match list_key(&list) {
        Ok(k) => k,
        Err(e) => return error_page(&caller, e),
    };
    let not_found = || ApiError::NotFound(format!("no held post {post} on {key}"));
    let Ok(id) = post.parse::<u64>() else {
        return error_page(&caller, not_found());
    };
    let Some(view) = held_of(&s, &key).await.into_iter().find(|h| h.post == id) else {
        return error_page(&caller, not_found());
    };
    let body = match s.spool.body(PostId(id)).await {
        Ok(Some(b)) => b,
        Ok(None) => return error_page(&caller, not_found()),
        Err(e) => return error_page(&caller, ApiError::Internal(e.to_string())),
    };
    // Parsing a large post is CPU work: off the async threads.
    let m = match tokio::task::spawn_blocking(move || MessageView::parse(&body)).await {
        Ok(m) => m,
        Err(e) => return error_page(&caller, e.into()),
    };
    let page = herald_webadmin::held::held_message(
        &ctx(&caller, &Done::default()),
        &key,
        owns(&caller, &key),
        &view,
        &m,
    );
    html(StatusCode::OK, page)
}

/// `POST /admin/lists/<list>/held/<approve|reject|discard>`.
pub async fn act(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path((list, verb)): Path<(String, String)>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Response {
    let key = match list_key(&list) {
        Ok(k) => k,
        Err(e) => return error_page(&caller, e),
    };
    let done = match verb.as_str() {
        "approve" => "approved",
        "reject" => "rejected",
        "discard" => "discarded",
        _ => return error_page(&caller, ApiError::NotFound(format!("no action {verb:?}"))),
    };
    let reason: Option<String> = pairs
        .iter()
        .find(|(k, _)| k == "reason")
        .map(|(_, v)| v.chars().take(MAX_REASON_CHARS).collect());
    let held: Vec<u64> = held_of(&s, &key).await.iter().map(|h| h.post).collect();
    let chosen: Vec<u64> = pairs
        .iter()
        .filter(|(k, _)| k == "post")
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .filter(|p| held.contains(p))
        .collect();
    if chosen.is_empty() {
        return see(format!("{}/held?done=none", list_href(&key)));
    }
    for post in chosen {
        let post = PostId(post);
        let r = match verb.as_str() {
            "approve" => s.lists.approve(post).await.map(|_| ()),
            "reject" => s.lists.reject_with(post, reason.clone()).await,
            _ => s.lists.discard(post).await,
        };
        if let Err(e) = r {
            return error_page(&caller, e);
        }
    }
    see(format!("{}/held?done={done}", list_href(&key)))
}
