//! `/api/v1/accounts` (site administrators: add, change, remove accounts and their roles),
//! `/api/v1/me` (anyone signed in: who they are, their lists, their CSRF token) and
//! `/api/v1/audit` (the audit log; a list's owner may read their list's part) — the JSON side of
//! `herald account …` and `herald audit`.
//!
//! SECURITY: who may call which route is decided by the guard (`access.rs`); addresses and list
//! addresses are parsed with `Address::parse`, passwords bounded by the accounts store before
//! hashing. Passwords never appear in an answer or a log line.

use crate::auth::Caller;
use crate::extract::{Json, Path, Query};
use crate::{ApiError, ApiState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Extension;
use herald_accounts::{Account, AccountsError, AuditQuery, Role};
use herald_api_types::accounts::{
    AccountUpdate, AccountView, AuditView, MeView, NewAccount, RoleRequest, RoleView,
};
use serde::Deserialize;
use std::sync::Arc;

type St = State<Arc<ApiState>>;

impl From<AccountsError> for ApiError {
    fn from(e: AccountsError) -> ApiError {
        if e.is_not_found() {
            ApiError::NotFound(e.to_string())
        } else if matches!(e, AccountsError::AlreadyExists(_)) {
            ApiError::Conflict(e.to_string())
        } else if e.is_invalid() {
            ApiError::BadRequest(e.to_string())
        } else {
            ApiError::Internal(e.to_string())
        }
    }
}

use crate::error::parse_address as address;

fn view(a: &Account) -> AccountView {
    AccountView {
        address: a.address.clone(),
        site_admin: a.site_admin,
        has_password: a.has_password,
        created_ms: a.created_ms,
        roles: a
            .roles
            .iter()
            .map(|(list, r)| RoleView {
                list: list.clone(),
                role: r.word().to_string(),
            })
            .collect(),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AccountsError> + Send + 'static,
) -> Result<T, ApiError> {
    Ok(tokio::task::spawn_blocking(f).await??)
}

/// `GET /api/v1/me`.
#[utoipa::path(
    get,
    path = "/me",
    tag = "accounts",
    responses((status = 200, description = "Who is asking, and their roles", body = MeView), crate::schema::Problems)
)]
pub async fn me(Extension(caller): Extension<Caller>) -> Json<MeView> {
    let p = &caller.principal;
    Json(MeView {
        actor: p.actor.name().to_string(),
        site_admin: p.site_admin,
        roles: p
            .roles
            .iter()
            .map(|(list, r)| RoleView {
                list: list.clone(),
                role: r.word().to_string(),
            })
            .collect(),
        csrf: caller.session.map(|s| s.csrf),
    })
}

/// `GET /api/v1/accounts`.
#[utoipa::path(
    get,
    path = "/accounts",
    tag = "accounts",
    responses((status = 200, description = "Every account", body = Vec<AccountView>), crate::schema::Problems)
)]
pub async fn list(State(s): St) -> Result<Json<Vec<AccountView>>, ApiError> {
    let a = s.accounts.clone();
    let all = blocking(move || a.list()).await?;
    Ok(Json(all.iter().map(view).collect()))
}

/// `POST /api/v1/accounts`.
#[utoipa::path(
    post,
    path = "/accounts",
    tag = "accounts",
    request_body = NewAccount,
    responses((status = 201, description = "Created", body = AccountView), crate::schema::Problems)
)]
pub async fn add(
    State(s): St,
    Json(req): Json<NewAccount>,
) -> Result<(StatusCode, Json<AccountView>), ApiError> {
    let who = address("address", &req.address)?;
    let a = s.accounts.clone();
    let now = herald_types::unix_ms_now();
    let made = blocking(move || a.add(&who, req.site_admin, req.password.as_deref(), now)).await?;
    Ok((StatusCode::CREATED, Json(view(&made))))
}

/// `GET /api/v1/accounts/<address>`.
#[utoipa::path(
    get,
    path = "/accounts/{address}",
    tag = "accounts",
    params(("address" = String, Path, description = "The address", format = Email)),
    responses((status = 200, description = "The account", body = AccountView), crate::schema::Problems)
)]
pub async fn show(State(s): St, Path(who): Path<String>) -> Result<Json<AccountView>, ApiError> {
    let who = address("address", &who)?;
    let a = s.accounts.clone();
    let w = who.clone();
    blocking(move || a.get(&w))
        .await?
        .map(|acc| Json(view(&acc)))
        .ok_or_else(|| ApiError::NotFound(format!("no account {who}")))
}

/// `PATCH /api/v1/accounts/<address>`.
#[utoipa::path(
    patch,
    path = "/accounts/{address}",
    tag = "accounts",
    params(("address" = String, Path, description = "The address", format = Email)),
    request_body = AccountUpdate,
    responses((status = 200, description = "The account as changed", body = AccountView), crate::schema::Problems)
)]
pub async fn update(
    State(s): St,
    Path(who): Path<String>,
    Json(u): Json<AccountUpdate>,
) -> Result<Json<AccountView>, ApiError> {
    let who = address("address", &who)?;
    if u.clear_password && u.password.is_some() {
        return Err(ApiError::BadRequest(
            "password and clear_password: one or the other".into(),
        ));
    }
    let a = s.accounts.clone();
    let w = who.clone();
    let acc = blocking(move || {
        if let Some(p) = &u.password {
            a.set_password(&w, Some(p))?;
        } else if u.clear_password {
            a.set_password(&w, None)?;
        }
        if let Some(on) = u.site_admin {
            a.set_site_admin(&w, on)?;
        }
        a.get(&w)
    })
    .await?;
    acc.map(|acc| Json(view(&acc)))
        .ok_or_else(|| ApiError::NotFound(format!("no account {who}")))
}

/// `DELETE /api/v1/accounts/<address>`.
#[utoipa::path(
    delete,
    path = "/accounts/{address}",
    tag = "accounts",
    params(("address" = String, Path, description = "The address", format = Email)),
    responses((status = 204, description = "Removed"), crate::schema::Problems)
)]
pub async fn remove(State(s): St, Path(who): Path<String>) -> Result<StatusCode, ApiError> {
    let who = address("address", &who)?;
    let a = s.accounts.clone();
    let w = who.clone();
    if blocking(move || a.remove(&w)).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no account {who}")))
    }
}

/// `PUT /api/v1/accounts/<address>/roles/<list>` with `{"role": "owner"|"moderator"|"none"}`.
#[utoipa::path(
    put,
    path = "/accounts/{address}/roles/{list}",
    tag = "accounts",
    params(("address" = String, Path, description = "The address", format = Email), ("list" = String, Path, description = "The list's posting address", format = Email)),
    request_body = RoleRequest,
    responses((status = 200, description = "The account with its new role", body = AccountView), crate::schema::Problems)
)]
pub async fn set_role(
    State(s): St,
    Path((who, list)): Path<(String, String)>,
    Json(r): Json<RoleRequest>,
) -> Result<Json<AccountView>, ApiError> {
    let who = address("address", &who)?;
    let list = address("list", &list)?;
    let role = match r.role.as_str() {
        "none" => None,
        w => Some(Role::from_word(w).ok_or_else(|| {
            ApiError::BadRequest(format!("role: {w:?} is not owner, moderator or none"))
        })?),
    };
    let d = s.directory.clone();
    let l = list.clone();
    if role.is_some()
        && tokio::task::spawn_blocking(move || d.list_by_address(&l))
            .await??
            .is_none()
    {
        return Err(ApiError::NotFound(format!("no list {list}")));
    }
    let a = s.accounts.clone();
    let w = who.clone();
    let acc = blocking(move || {
        a.set_role(&w, &list, role)?;
        a.get(&w)
    })
    .await?;
    acc.map(|acc| Json(view(&acc)))
        .ok_or_else(|| ApiError::NotFound(format!("no account {who}")))
}

/// `?list=&since=&limit=` for [`audit`]; `since` in Unix milliseconds.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditFilter {
    #[param(format = Email)]
    pub(crate) list: Option<String>,
    pub(crate) since: Option<u64>,
    #[param(minimum = 1, maximum = 10000)]
    pub(crate) limit: Option<usize>,
}

/// `GET /api/v1/audit`.
#[utoipa::path(
    get,
    path = "/audit",
    tag = "accounts",
    params(AuditFilter),
    responses((status = 200, description = "Administrative actions, newest first", body = Vec<AuditView>), crate::schema::Problems)
)]
pub async fn audit(
    State(s): St,
    Query(f): Query<AuditFilter>,
) -> Result<Json<Vec<AuditView>>, ApiError> {
    let list = match &f.list {
        Some(l) => Some(herald_accounts::key(&address("list", l)?)),
        None => None,
    };
    let q = AuditQuery {
        list,
        since_ms: f.since,
        limit: f.limit.unwrap_or(200),
    };
    let a = s.accounts.clone();
    let rows = blocking(move || a.audit(&q)).await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| AuditView {
                id: r.id,
                at_ms: r.event.at_ms,
                actor: r.event.actor,
                client: r.event.client,
                action: r.event.action,
                list: r.event.list,
                target: r.event.target,
                outcome: r.event.outcome,
            })
            .collect(),
    ))
}
