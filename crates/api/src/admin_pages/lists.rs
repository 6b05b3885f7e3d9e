//! `/admin/lists` (the caller's lists; a site administrator's create form) and
//! `/admin/lists/<list>` (every setting; saving shows a refused value's error next to its
//! field), `/admin/lists/<list>/roles` (the site gives an account a role on the list).
//!
//! SECURITY: the guard decided who reaches each route (`access.rs`); forms are parsed here
//! field by field (`herald_webadmin::settings`) and validated again by the directory.

use super::{ctx, error_page, html, list_key, see, Done};
use crate::admin::{dir, find_list_pub, merge_settings};
use crate::auth::Caller;
use crate::{views, ApiError, ApiState};
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use herald_accounts::Role;
use herald_directory::DirectoryError;
use herald_types::{Address, ListSettings};
use herald_webadmin::layout::list_href;
use herald_webadmin::lists::{CreateForm, ListRow};
use herald_webadmin::settings::{field_of, SettingsForm};
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// The lists the caller may administer, with their role.
async fn rows(s: &ApiState, caller: &Caller) -> Result<Vec<ListRow>, ApiError> {
    let lists = dir(s, |d| d.lists()).await?;
    let p = &caller.principal;
    Ok(lists
        .into_iter()
        .filter_map(|l| {
            let key = herald_accounts::key(&l.address);
            let role = match (p.site_admin, p.role(&key)) {
                (true, _) => "site administrator",
                (false, Some(Role::Owner)) => "owner",
                (false, Some(Role::Moderator)) => "moderator",
                (false, None) => return None,
            };
            Some(ListRow {
                address: key,
                display_name: l.settings.display_name,
                role,
            })
        })
        .collect())
}

/// `GET /admin/lists`.
pub async fn index(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Query(done): Query<Done>,
) -> Response {
    match rows(&s, &caller).await {
        Ok(rows) => {
            let page = herald_webadmin::lists::lists_page(
                &ctx(&caller, &done),
                &rows,
                &CreateForm::default(),
            );
            html(StatusCode::OK, page)
        }
        Err(e) => error_page(&caller, e),
    }
}

#[derive(Debug, serde::Deserialize)]
pub struct CreateFields {
    #[serde(default)]
    address: String,
    #[serde(default)]
    display_name: String,
}

/// `POST /admin/lists` (site administrators).
pub async fn create(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Form(f): Form<CreateFields>,
) -> Response {
    let refused = |status: StatusCode, error: String, rows: Vec<ListRow>| {
        let form = CreateForm {
            address: f.address.clone(),
            display_name: f.display_name.clone(),
            error: Some(error),
        };
        let page =
            herald_webadmin::lists::lists_page(&ctx(&caller, &Done::default()), &rows, &form);
        html(status, page)
    };
    let rows = rows(&s, &caller).await.unwrap_or_default();
    let address = match Address::parse(f.address.trim()) {
        Ok(a) => a,
        Err(e) => {
            return refused(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("This is not a list address: {e}."),
                rows,
            )
        }
    };
    let settings = ListSettings {
        display_name: f.display_name.trim().to_string(),
        ..ListSettings::default()
    };
    let a = address.clone();
    match dir(&s, move |d| d.create_list(&a, &settings)).await {
        Ok(list) => see(format!(
            "{}?done=created",
            list_href(&list.address.to_string())
        )),
        Err(e @ (ApiError::Conflict(_) | ApiError::BadRequest(_) | ApiError::Invalid { .. })) => {
            refused(StatusCode::UNPROCESSABLE_ENTITY, e.to_string(), rows)
        }
        Err(e) => error_page(&caller, e),
    }
}

/// The settings page of `list` with `form` (stored values, or a refused submission).
async fn settings_page(
    s: &ApiState,
    caller: &Caller,
    list: &herald_types::List,
    form: &SettingsForm,
    role_error: Option<&str>,
    done: &Done,
    status: StatusCode,
) -> Response {
    let id = list.id;
    let counts = match dir(s, move |d| d.member_counts(id)).await {
        Ok(c) => c,
        Err(e) => return error_page(caller, e),
    };
    let mut view = views::directory::list_view(list, &counts);
    view.complaints = s.telemetry.metrics().complaints(&view.list.address);
    let page = herald_webadmin::lists::list_page(&ctx(caller, done), &view, form, role_error);
    html(status, page)
}

fn stored_form(list: &herald_types::List) -> SettingsForm {
    SettingsForm::from_settings(&serde_json::to_value(&list.settings).unwrap_or_default())
}

/// `GET /admin/lists/<list>`.
pub async fn show(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(list): Path<String>,
    Query(done): Query<Done>,
) -> Response {
    match find_list_pub(&s, &list).await {
        Ok(l) => {
            let form = stored_form(&l);
            settings_page(&s, &caller, &l, &form, None, &done, StatusCode::OK).await
        }
        Err(e) => error_page(&caller, e),
    }
}

/// `POST /admin/lists/<list>`: the whole settings form.
pub async fn save(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(list): Path<String>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Response {
    let l = match find_list_pub(&s, &list).await {
        Ok(l) => l,
        Err(e) => return error_page(&caller, e),
    };
    let (mut form, changes) = SettingsForm::submitted(&pairs);
    let refused = StatusCode::UNPROCESSABLE_ENTITY;
    let none = Done::default();
    if !form.errors.is_empty() {
        return settings_page(&s, &caller, &l, &form, None, &none, refused).await;
    }
    let settings = match merge_settings(&l.settings, changes) {
        Ok(st) => st,
        Err(e) => return error_page(&caller, e),
    };
    let id = l.id;
    let d = s.directory.clone();
    match tokio::task::spawn_blocking(move || d.update_list(id, &settings)).await {
        Ok(Ok(_)) => see(format!("{}?done=saved", list_href(&list_key_or(&list)))),
        Ok(Err(DirectoryError::InvalidInput { field, reason })) => {
            // The directory's own checks (control characters, lengths): next to the field.
            let at = field_of(field).unwrap_or("display_name");
            form.errors
                .insert(at.to_string(), format!("Not saved: {reason}."));
            settings_page(&s, &caller, &l, &form, None, &none, refused).await
        }
        Ok(Err(e)) => error_page(&caller, e.into()),
        Err(e) => error_page(&caller, e.into()),
    }
}

fn list_key_or(raw: &str) -> String {
    list_key(raw).unwrap_or_else(|_| raw.to_string())
}

#[derive(Debug, serde::Deserialize)]
pub struct RoleFields {
    #[serde(default)]
    account: String,
    #[serde(default)]
    role: String,
}

/// `POST /admin/lists/<list>/roles` (site administrators): the accounts API's own handler.
pub async fn role(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(list): Path<String>,
    Form(f): Form<RoleFields>,
) -> Response {
    let l = match find_list_pub(&s, &list).await {
        Ok(l) => l,
        Err(e) => return error_page(&caller, e),
    };
    let req = herald_api_types::accounts::RoleRequest { role: f.role };
    let who = f.account.trim().to_string();
    let answer = crate::accounts_api::set_role(
        State(s.clone()),
        crate::extract::Path((who, list.clone())),
        crate::extract::Json(req),
    )
    .await;
    match answer {
        Ok(_) => see(format!("{}?done=role", list_href(&list_key_or(&list)))),
        Err(ApiError::Internal(d)) => error_page(&caller, ApiError::Internal(d)),
        Err(e) => {
            let form = stored_form(&l);
            let msg = e.to_string();
            let none = Done::default();
            settings_page(
                &s,
                &caller,
                &l,
                &form,
                Some(&msg),
                &none,
                StatusCode::UNPROCESSABLE_ENTITY,
            )
            .await
        }
    }
}
