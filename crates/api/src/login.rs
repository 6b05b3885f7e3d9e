//! Signing in and out, and the page that proves it worked:
//!
//! - `GET /login`: the forms — address and password; or address only, to be mailed a
//!   one-time link. `POST /login` signs in with a password, or with the admin token (the
//!   dashboard's form at `/`, which posts `token`).
//! - `POST /login/link`: mails the link (`/login/<token>`, valid `accounts.login_link_secs`).
//!   `GET /login/<token>` shows a button and changes nothing (mail scanners follow links);
//!   its `POST` signs in, once.
//! - `POST /logout` (behind the guard: a session and its CSRF token).
//! - `GET /admin/`: who you are and the lists you may administer, with links.
//!
//! Every sign-in opens a new session (a fresh id: no fixation) and ends the one the browser
//! had. Pages are plain server-rendered HTML (labels, headings, no script).
//!
//! SECURITY: public routes except `/logout` and `/admin/`. Each sign-in form checks its own
//! credential through the accounts store, which throttles failures per account and per
//! client (429 with `Retry-After`) and answers unknown and known addresses alike; the link
//! form answers the same page whether or not a mail went out. Everything shown is escaped.

use crate::auth::{self, Caller};
use crate::unsubscribe::escape;
use crate::{ApiError, ApiState};
use axum::extract::{ConnectInfo, Form, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Extension;
use herald_accounts::link::LinkRequest;
use herald_accounts::session::{token_digest, SessionOwner};
use herald_accounts::{AuditEvent, LoginOutcome, Role};
use herald_types::Address;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

type St = State<Arc<ApiState>>;

const CSP: &str = "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

fn now_ms() -> u64 {
    herald_types::unix_ms_now()
}

/// A page: title, body; no script, the dashboard's style sheet.
fn shell(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Herald · {t}</title><link rel=\"stylesheet\" href=\"/assets/style.css\"></head>\
         <body><main><h1>{t}</h1>{body}</main></body></html>",
        t = escape(title)
    );
    (
        status,
        [
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Html(html),
    )
        .into_response()
}

fn login_forms(status: StatusCode, note: Option<&str>) -> Response {
    let note = note.map_or(String::new(), |n| {
        format!("<p role=\"alert\"><strong>{}</strong></p>", escape(n))
    });
    shell(
        status,
        "Sign in",
        &format!(
            "{note}<form method=\"post\" action=\"/login\">\
             <h2>With your password</h2>\
             <p><label for=\"address\">E-mail address</label><br>\
             <input id=\"address\" name=\"address\" type=\"email\" required autocomplete=\"username\" size=\"40\"></p>\
             <p><label for=\"password\">Password</label><br>\
             <input id=\"password\" name=\"password\" type=\"password\" required autocomplete=\"current-password\" size=\"40\"></p>\
             <p><button type=\"submit\">Sign in</button></p></form>\
             <form method=\"post\" action=\"/login/link\">\
             <h2>With a link by mail</h2>\
             <p><label for=\"link-address\">E-mail address</label><br>\
             <input id=\"link-address\" name=\"address\" type=\"email\" required autocomplete=\"email\" size=\"40\"></p>\
             <p><button type=\"submit\">Mail me a sign-in link</button></p></form>\
             <p><a href=\"/\">Sign in with the admin token</a></p>"
        ),
    )
}

/// `GET /login`.
pub async fn show() -> Response {
    login_forms(StatusCode::OK, None)
}

#[derive(Deserialize)]
pub struct LoginForm {
    /// The admin token (the dashboard's form).
    token: Option<String>,
    address: Option<String>,
    password: Option<String>,
}

/// `POST /login`: the admin token or an address and password.
pub async fn login(
    State(s): St,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    let client = peer.ip().to_canonical();
    let old = auth::session_cookie(&headers).map(str::to_string);
    let result = match (f.token, f.address, f.password) {
        (Some(token), _, _) => token_login(&s, client, token.trim(), old).await,
        (None, Some(address), Some(password)) => {
            password_login(&s, client, &address, &password, old).await
        }
        _ => Ok(login_forms(
            StatusCode::BAD_REQUEST,
            Some("Give an address and a password."),
        )),
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, herald_accounts::AccountsError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await?
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// Opens a session (ending `old`) and answers the redirect that sets its cookie.
async fn open_session(
    s: &ApiState,
    owner: SessionOwner,
    client: IpAddr,
    old: Option<String>,
    to: &str,
) -> Result<Response, ApiError> {
    let accounts = s.accounts.clone();
    let new = blocking(move || {
        if let Some(old) = old {
            accounts.end_session(&old)?;
        }
        accounts.start_session(&owner, Some(client), now_ms())
    })
    .await?;
    Ok((
        [(header::SET_COOKIE, auth::session_set_cookie(s, &new.cookie))],
        Redirect::to(to),
    )
        .into_response())
}

fn throttled(secs: u64) -> Response {
    let mut r = login_forms(
        StatusCode::TOO_MANY_REQUESTS,
        Some(&format!(
            "Too many attempts. Please wait {} minute(s) and try again.",
            secs.div_ceil(60)
        )),
    );
    if let Ok(v) = secs.to_string().parse() {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

async fn audit_login(s: &ApiState, actor: String, client: IpAddr, action: &str, outcome: &str) {
    let ev = AuditEvent {
        at_ms: now_ms(),
        actor,
        client: Some(client.to_string()),
        action: action.to_string(),
        list: None,
        target: None,
        outcome: outcome.to_string(),
    };
    auth::record(s, ev).await;
}

async fn token_login(
    s: &ApiState,
    client: IpAddr,
    given: &str,
    old: Option<String>,
) -> Result<Response, ApiError> {
    let Some(token) = &s.admin_token else {
        return Ok(Redirect::to("/").into_response());
    };
    if let Err(secs) = s.accounts.token_login_allowed(client, now_ms()) {
        audit_login(s, "token".into(), client, "login.token", "throttled").await;
        let mut r = (StatusCode::TOO_MANY_REQUESTS, auth::login_page(true)).into_response();
        if let Ok(v) = secs.to_string().parse() {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return Ok(r);
    }
    if !auth::token_matches(token, given) {
        s.accounts.token_login_failed(client, now_ms());
        audit_login(s, "token".into(), client, "login.token", "failed").await;
        return Ok((StatusCode::UNAUTHORIZED, auth::login_page(true)).into_response());
    }
    audit_login(s, "token".into(), client, "login.token", "ok").await;
    open_session(
        s,
        SessionOwner::Token(token_digest(token)),
        client,
        old,
        "/",
    )
    .await
}

async fn password_login(
    s: &ApiState,
    client: IpAddr,
    address: &str,
    password: &str,
    old: Option<String>,
) -> Result<Response, ApiError> {
    let (accounts, a, p) = (
        s.accounts.clone(),
        address.to_string(),
        password.to_string(),
    );
    let outcome = blocking(move || accounts.login(&a, &p, client, now_ms())).await?;
    let actor = Address::parse(address.trim())
        .map(|a| herald_accounts::key(&a))
        .unwrap_or_else(|_| "(not an address)".into());
    match outcome {
        LoginOutcome::Ok(who) => {
            audit_login(s, who.clone(), client, "login.password", "ok").await;
            open_session(s, SessionOwner::Account(who), client, old, "/admin/").await
        }
        LoginOutcome::Refused => {
            audit_login(s, actor, client, "login.password", "failed").await;
            Ok(login_forms(
                StatusCode::UNAUTHORIZED,
                Some("That address or password is not right."),
            ))
        }
        LoginOutcome::Throttled { retry_after_secs } => {
            audit_login(s, actor, client, "login.password", "throttled").await;
            Ok(throttled(retry_after_secs))
        }
    }
}

#[derive(Deserialize)]
pub struct LinkForm {
    address: String,
}

/// True when some list's `moderators` setting names `who` (they may sign in by link without
/// an account).
async fn moderates_somewhere(s: &ApiState, who: &Address) -> Result<bool, ApiError> {
    let dir = s.directory.clone();
    let lists = tokio::task::spawn_blocking(move || dir.lists()).await??;
    Ok(lists.iter().any(|l| l.is_moderator(who)))
}

/// `POST /login/link`.
pub async fn send_link(
    State(s): St,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Form(f): Form<LinkForm>,
) -> Response {
    let client = peer.ip().to_canonical();
    let Ok(address) = Address::parse(f.address.trim()) else {
        return login_forms(
            StatusCode::BAD_REQUEST,
            Some("This is not an e-mail address we can write to."),
        );
    };
    match mail_link(&s, &address, client).await {
        Ok(Some(secs)) => throttled(secs),
        Ok(None) => shell(
            StatusCode::OK,
            "Check your mailbox",
            &format!(
                "<p>If {} may sign in here, a message with a sign-in link is on its way. \
                 The link works once, within {} minutes.</p>",
                escape(&address.to_string()),
                s.accounts.config().login_link_secs.div_ceil(60)
            ),
        ),
        Err(e) => e.into_response(),
    }
}

/// Mails a link when due; `Some(seconds)` when throttled.
async fn mail_link(
    s: &ApiState,
    address: &Address,
    client: IpAddr,
) -> Result<Option<u64>, ApiError> {
    let eligible = moderates_somewhere(s, address).await?;
    let (accounts, a) = (s.accounts.clone(), address.clone());
    let asked = blocking(move || accounts.request_link(&a, eligible, client, now_ms())).await?;
    let actor = herald_accounts::key(address);
    let token = match asked {
        LinkRequest::Send(token) => token,
        LinkRequest::Nobody => {
            audit_login(s, actor, client, "login.link_request", "no account").await;
            return Ok(None);
        }
        LinkRequest::Throttled { retry_after_secs } => {
            audit_login(s, actor, client, "login.link_request", "throttled").await;
            return Ok(Some(retry_after_secs));
        }
    };
    let url = format!("{}/login/{token}", s.public_base_url);
    let minutes = s.accounts.config().login_link_secs.div_ceil(60);
    let body =
        herald_accounts::mail::sign_in_link(&s.hostname, address, &url, minutes, now_ms() / 1000);
    let from = Address::parse(&format!("postmaster@{}", s.hostname))
        .map_err(|e| ApiError::Internal(format!("hostname: {e}")))?;
    match s
        .injector
        .send_mail(from, address.clone(), body.into())
        .await
    {
        Ok(_) => audit_login(s, actor, client, "login.link_request", "sent").await,
        Err(e) => {
            tracing::error!(to = %address, error = %e, "sign-in link not queued");
            audit_login(s, actor, client, "login.link_request", "error").await;
        }
    }
    Ok(None)
}

fn bad_link() -> Response {
    shell(
        StatusCode::FORBIDDEN,
        "Link not valid",
        "<p>This sign-in link is not valid: it was used already, or it has expired. \
         <a href=\"/login\">Ask for a new one.</a></p>",
    )
}

/// `GET /login/<token>`: a button; nothing changes (link scanners GET links).
pub async fn link_page(State(s): St, Path(token): Path<String>) -> Response {
    let accounts = s.accounts.clone();
    let t = token.clone();
    match blocking(move || accounts.link_is_live(&t, now_ms())).await {
        Ok(true) => shell(
            StatusCode::OK,
            "Sign in",
            "<form method=\"post\"><p><button type=\"submit\">Sign in to Herald</button></p></form>",
        ),
        Ok(false) => bad_link(),
        Err(e) => e.into_response(),
    }
}

/// `POST /login/<token>`: signs in, once.
pub async fn link_login(
    State(s): St,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Response {
    let client = peer.ip().to_canonical();
    let accounts = s.accounts.clone();
    let who = match blocking(move || accounts.redeem_link(&token, now_ms())).await {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let Some(who) = who else {
        audit_login(&s, "(link)".into(), client, "login.link", "failed").await;
        return bad_link();
    };
    audit_login(&s, who.clone(), client, "login.link", "ok").await;
    let old = auth::session_cookie(&headers).map(str::to_string);
    open_session(&s, SessionOwner::Account(who), client, old, "/admin/")
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `POST /logout` (the guard checked the session's CSRF token).
pub async fn logout(State(s): St, Extension(caller): Extension<Caller>) -> Response {
    if let Some(session) = caller.session {
        let accounts = s.accounts.clone();
        if let Err(e) = blocking(move || accounts.end_session(&session.cookie)).await {
            return e.into_response();
        }
    }
    (
        [(header::SET_COOKIE, auth::session_clear_cookie(&s))],
        Redirect::to("/login"),
    )
        .into_response()
}

/// `GET /admin/`: who you are, and your lists.
pub async fn admin_page(State(s): St, Extension(caller): Extension<Caller>) -> Response {
    let p = &caller.principal;
    let lists = if p.site_admin {
        let dir = s.directory.clone();
        match tokio::task::spawn_blocking(move || dir.lists()).await {
            Ok(Ok(all)) => all
                .iter()
                .map(|l| (herald_accounts::key(&l.address), "site administrator"))
                .collect(),
            Ok(Err(e)) => return ApiError::from(e).into_response(),
            Err(e) => return ApiError::from(e).into_response(),
        }
    } else {
        p.roles
            .iter()
            .map(|(l, r)| {
                let word = match r {
                    Role::Owner => "owner",
                    Role::Moderator => "moderator",
                };
                (l.clone(), word)
            })
            .collect::<Vec<_>>()
    };
    let mut rows = String::new();
    for (list, role) in &lists {
        let l = escape(list);
        let enc = percent_encoding::utf8_percent_encode(list, percent_encoding::NON_ALPHANUMERIC);
        // The web administration pages.
        let settings = if *role == "moderator" {
            String::new()
        } else {
            format!(" · <a href=\"/admin/lists/{enc}\">settings</a> · <a href=\"/admin/lists/{enc}/members\">members</a>")
        };
        rows.push_str(&format!(
            "<li><strong>{l}</strong> ({role}): <a href=\"/admin/lists/{enc}/held\">held posts</a>{settings}</li>"
        ));
    }
    let lists_html = if rows.is_empty() {
        "<p>You administer no list here.</p>".to_string()
    } else {
        format!("<ul>{rows}</ul>")
    };
    let site = if p.site_admin {
        "<p>You are a site administrator: <a href=\"/\">the dashboard</a>.</p>"
    } else {
        ""
    };
    let logout = match &caller.session {
        Some(sess) => format!(
            "<form method=\"post\" action=\"/logout\">\
             <input type=\"hidden\" name=\"{}\" value=\"{}\">\
             <button type=\"submit\">Sign out</button></form>",
            auth::CSRF_FIELD,
            escape(&sess.csrf)
        ),
        None => String::new(),
    };
    shell(
        StatusCode::OK,
        "Your lists",
        &format!(
            "<p>Signed in as <strong>{}</strong>.</p>{site}<h2>Lists</h2>{lists_html}{logout}",
            escape(p.actor.name())
        ),
    )
}
