//! `/api/v1/bans` and `/api/v1/suppressions`: list, add and lift bans and
//! suppression-list entries, global or per list. Admin-only (the router's guard: these are not
//! public paths).
//!
//! SECURITY: patterns, addresses and reasons are checked by the directory (bounded, no control
//! characters, regexes size-limited); a list named in a request must exist.

use crate::extract::{Json, Query};
use crate::views;
use crate::{ApiError, ApiState};
use axum::extract::State;
use axum::http::StatusCode;
use herald_api_types::{
    BanRequest, BanView, ScopeQuery, SuppressAnswer, SuppressRequest, SuppressionView,
    UnsuppressRequest,
};
use herald_directory::{Directory, DirectoryError, SuppressionSource};
use herald_lists::Membership;
use herald_types::{Address, List, ListId};
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// Most suppression entries one answer lists unless `limit` says otherwise.
const DEFAULT_LISTING: usize = 1000;

async fn dir<T, F>(s: &ApiState, f: F) -> Result<T, ApiError>
where
    F: FnOnce(&Directory) -> Result<T, DirectoryError> + Send + 'static,
    T: Send + 'static,
{
    let d = s.directory.clone();
    Ok(tokio::task::spawn_blocking(move || f(&d)).await??)
}

/// The scope a request names: `None` (global) or the list, which must exist.
async fn scope(s: &ApiState, list: Option<&str>) -> Result<Option<List>, ApiError> {
    match list {
        None => Ok(None),
        Some(l) => Ok(Some(crate::admin::find_list_pub(s, l).await?)),
    }
}

fn id(list: &Option<List>) -> Option<ListId> {
    list.as_ref().map(|l| l.id)
}

fn parse_address(text: &str) -> Result<Address, ApiError> {
    crate::error::parse_address("address", text)
}

#[utoipa::path(
    get,
    path = "/bans",
    tag = "bans",
    params(ScopeQuery),
    responses((status = 200, description = "Ban patterns", body = Vec<BanView>), crate::schema::Problems)
)]
pub async fn bans(
    State(s): St,
    Query(q): Query<ScopeQuery>,
) -> Result<Json<Vec<BanView>>, ApiError> {
    let list = scope(&s, q.list.as_deref()).await?;
    let scope_id = id(&list);
    let bans = dir(&s, move |d| d.bans(scope_id)).await?;
    Ok(Json(
        bans.iter()
            .map(|b| views::directory::ban(b, list.as_ref()))
            .collect(),
    ))
}

#[utoipa::path(
    post,
    path = "/bans",
    tag = "bans",
    request_body = BanRequest,
    responses((status = 201, description = "Added", body = BanView), crate::schema::Problems)
)]
pub async fn add_ban(
    State(s): St,
    Json(r): Json<BanRequest>,
) -> Result<(StatusCode, Json<BanView>), ApiError> {
    let list = scope(&s, r.list.as_deref()).await?;
    let scope_id = id(&list);
    let ban = dir(&s, move |d| d.add_ban(scope_id, &r.pattern)).await?;
    tracing::info!(list = ?list.as_ref().map(|l| l.address.to_string()), pattern = %ban.pattern, "ban added");
    Ok((
        StatusCode::CREATED,
        Json(views::directory::ban(&ban, list.as_ref())),
    ))
}

#[utoipa::path(
    delete,
    path = "/bans",
    tag = "bans",
    request_body = BanRequest,
    responses((status = 204, description = "Removed"), crate::schema::Problems)
)]
pub async fn remove_ban(State(s): St, Json(r): Json<BanRequest>) -> Result<StatusCode, ApiError> {
    let list = scope(&s, r.list.as_deref()).await?;
    let scope_id = id(&list);
    let pattern = r.pattern.clone();
    match dir(&s, move |d| d.remove_ban(scope_id, &pattern)).await? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::NotFound(format!("no such ban: {}", r.pattern))),
    }
}

#[utoipa::path(
    get,
    path = "/suppressions",
    tag = "bans",
    params(ScopeQuery),
    responses((status = 200, description = "Suppressed addresses", body = Vec<SuppressionView>), crate::schema::Problems)
)]
pub async fn suppressions(
    State(s): St,
    Query(q): Query<ScopeQuery>,
) -> Result<Json<Vec<SuppressionView>>, ApiError> {
    let list = scope(&s, q.list.as_deref()).await?;
    let (scope_id, limit) = (id(&list), q.limit.unwrap_or(DEFAULT_LISTING));
    let entries = dir(&s, move |d| d.suppressions(scope_id, limit)).await?;
    Ok(Json(
        entries
            .iter()
            .map(|e| views::directory::suppression(e, list.as_ref()))
            .collect(),
    ))
}

#[utoipa::path(
    post,
    path = "/suppressions",
    tag = "bans",
    request_body = SuppressRequest,
    responses((status = 201, description = "Suppressed", body = SuppressAnswer), (status = 200, description = "Already suppressed", body = SuppressAnswer), crate::schema::Problems)
)]
pub async fn suppress(
    State(s): St,
    Json(r): Json<SuppressRequest>,
) -> Result<(StatusCode, Json<SuppressAnswer>), ApiError> {
    let list = scope(&s, r.list.as_deref()).await?;
    let address = parse_address(&r.address)?;
    let source = match r.source.as_deref() {
        None | Some("operator") => SuppressionSource::Operator,
        Some("erasure") => SuppressionSource::Erasure,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "source: {other:?}: expected operator or erasure"
            )))
        }
    };
    let scope_id = id(&list);
    let m = Membership::new(&s.directory);
    let done = tokio::task::spawn_blocking(move || {
        m.suppress_address(scope_id, &address, &r.reason, source)
    })
    .await??;
    tracing::info!(address = %done.entry.address, disabled = done.disabled, "address suppressed");
    let status = if done.new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(SuppressAnswer {
            entry: views::directory::suppression(&done.entry, list.as_ref()),
            new: done.new,
            disabled: done.disabled,
        }),
    ))
}

#[utoipa::path(
    delete,
    path = "/suppressions",
    tag = "bans",
    request_body = UnsuppressRequest,
    responses((status = 204, description = "Removed"), crate::schema::Problems)
)]
pub async fn unsuppress(
    State(s): St,
    Json(r): Json<UnsuppressRequest>,
) -> Result<StatusCode, ApiError> {
    let list = scope(&s, r.list.as_deref()).await?;
    let address = parse_address(&r.address)?;
    let scope_id = id(&list);
    match dir(&s, move |d| d.unsuppress(scope_id, &address)).await? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::NotFound(format!(
            "{} is not suppressed",
            r.address
        ))),
    }
}
