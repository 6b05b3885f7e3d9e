//! The web administration pages: the HTTP glue between the routes under
//! `/admin/…` and the page functions of `herald-webadmin`. Handlers read and change through the
//! same functions the JSON routes use (`admin`, `lists_ops`, `live`, `postmaster`,
//! `accounts_api`, the directory) — never an HTTP call to this server — and answer HTML.
//!
//! - `lists`: `/admin/lists` (yours; create), `/admin/lists/<list>` (settings), `…/roles`.
//! - `members`: `…/members` (search, keyset pages, add, per-member actions), `…/import`
//!   (multipart upload, a background job with progress), `…/export` (CSV, streamed).
//! - `held`: `…/held`, `…/held/<post>` (read; approve, reject, discard — also in bulk).
//! - `site`: `…/bounces`, `/admin/stragglers`, `/admin/postmaster`, `/admin/audit`.
//! - `texts`: `…/texts` (every message with its fields), `…/texts/<message>/<language>` (the
//!   list's own wording: save, back to the shipped text).
//!
//! Who may reach what is decided before any of this runs, by `auth::guard` from the one route
//! table (`access.rs`): owners their lists, moderators their lists' held posts, the site
//! everything. A handler only checks that what a form names belongs to the list in the path
//! (a held post of another list is not found here).
//!
//! Every change is a POST carrying the session's CSRF token (the guard checks it and writes the
//! audit row), answered by a redirect to a page (POST-redirect-GET) with a `done` code the
//! page turns into a fixed sentence; a refused form is shown again with its errors.
//!
//! SECURITY: paths, queries and forms are untrusted: addresses go through `Address::parse`,
//! numbers through `parse`, bodies are bounded (forms by the guard's inspection limit, the CSV
//! upload by `webadmin::members::MAX_IMPORT_BYTES`). Pages are sent with a CSP that forbids
//! every script, `no-store`, `Referrer-Policy: same-origin` and `nosniff`.

mod held;
mod jobs;
mod lists;
mod members;
mod site;
mod texts;

pub use jobs::ImportJobs;

use crate::auth::Caller;
use crate::{ApiError, ApiState};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use herald_accounts::principal::Need;
use herald_webadmin::Ctx;
use std::sync::Arc;

/// No script at all; styles and forms from this server only.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// The routes of the pages.
pub fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/admin/lists", get(lists::index).post(lists::create))
        .route("/admin/lists/{list}", get(lists::show).post(lists::save))
        .route("/admin/lists/{list}/roles", post(lists::role))
        .route(
            "/admin/lists/{list}/members",
            get(members::page).post(members::add),
        )
        .route(
            "/admin/lists/{list}/members/{member}/{verb}",
            post(members::act),
        )
        .route("/admin/lists/{list}/import", post(members::import))
        .route("/admin/lists/{list}/import/{job}", get(members::progress))
        .route("/admin/lists/{list}/export", get(members::export))
        .route("/admin/lists/{list}/held", get(held::page))
        .route(
            "/admin/lists/{list}/held/{post}",
            get(held::show).post(held::act),
        )
        .route("/admin/lists/{list}/bounces", get(site::bounces))
        .route("/admin/stragglers", get(site::stragglers))
        .route("/admin/stragglers/{verb}", post(site::straggler_action))
        .route("/admin/postmaster", get(site::postmaster))
        .route("/admin/postmaster/{post}", get(site::postmaster_message))
        .route(
            "/admin/postmaster/{post}/delete",
            post(site::postmaster_delete),
        )
        .route("/admin/audit", get(site::audit))
        .route("/admin/lists/{list}/texts", get(texts::index))
        .route(
            "/admin/lists/{list}/texts/{message}/{language}",
            get(texts::show).post(texts::save),
        )
        .route(
            "/admin/lists/{list}/texts/{message}/{language}/remove",
            post(texts::remove),
        )
}

/// `?done=<code>` after a POST-redirect-GET.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Done {
    done: Option<String>,
}

/// The frame's view of the caller.
fn ctx(caller: &Caller, done: &Done) -> Ctx {
    Ctx {
        who: caller.principal.actor.name().to_string(),
        csrf: caller.session.as_ref().map(|s| s.csrf.clone()),
        site_admin: caller.principal.site_admin,
        notice: done
            .done
            .as_deref()
            .and_then(herald_webadmin::layout::notice),
    }
}

/// Whether the caller owns `list` (canonical): decides the navigation shown, not access.
fn owns(caller: &Caller, list: &str) -> bool {
    caller.principal.may(&Need::Owner(list.to_string()))
}

/// A rendered page with its headers.
fn html(status: StatusCode, page: String) -> Response {
    (
        status,
        [
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "same-origin"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        Html(page),
    )
        .into_response()
}

/// 303 to a page after a POST.
fn see(url: String) -> Response {
    Redirect::to(&url).into_response()
}

/// An error as a page: the API error's status and its message (internal errors generic).
fn error_page(caller: &Caller, e: ApiError) -> Response {
    if let ApiError::Internal(detail) = &e {
        tracing::error!(%detail, "admin page failed");
    }
    let page = herald_webadmin::layout::error_page(&ctx(caller, &Done::default()), &e.to_string());
    html(e.status(), page)
}

/// The canonical text of a list address from a path, or the 400 to answer.
fn list_key(raw: &str) -> Result<String, ApiError> {
    herald_types::Address::parse(raw)
        .map(|a| herald_accounts::key(&a))
        .map_err(|e| ApiError::BadRequest(format!("list: {raw:?}: {e}")))
}
