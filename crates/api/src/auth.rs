//! Who may use the admin API, `/metrics`, the dashboard and the admin pages — one middleware,
//! [`guard`], in front of every route.
//!
//! Who is asking ([`Caller`]), in this order:
//! - `Authorization: Bearer <http.admin_token>` (the CLI, Prometheus): full access. Wrong
//!   tokens count against the client in the admin-token sign-in's throttle; a client over its
//!   limit gets 429 with `Retry-After`, its right token included, until the window passes.
//! - The `herald_admin` session cookie (`login.rs` sets it): a session opened with the admin
//!   token (full access, while a token is configured) or by an account (a site administrator:
//!   full access; otherwise its roles per list).
//! - Without a token configured: local clients (any loopback address by default, or those in
//!   `http.local_clients`): full access.
//!
//! What the route needs comes from one table (`access::classify`); the guard looks up a held
//! post's list when the route names a post. A caller without the right gets 403; nobody
//! signed in gets what they got before accounts existed (401, or the token sign-in page at `/`,
//! or 403 without a token configured), and the admin pages send them to `/login`.
//!
//! Every state-changing request (POST, PUT, PATCH, DELETE) reaching this far is written to the
//! audit log after it ran, with its outcome — including the refused ones.
//!
//! SECURITY:
//! - Tokens are compared as SHA-256 digests in constant time. The session cookie is
//!   `HttpOnly`, `SameSite=Strict` (no cross-site request carries it; Herald's own flows never
//!   need it to: the mailed sign-in link needs no cookie, and its button is same-site), `Path=/`
//!   and `Secure` over HTTPS or when configured.
//! - A state-changing request with a session cookie must come from our own origin (`Origin`,
//!   else `Referer`, matching the `Host` or `http.public_base_url`; neither present is
//!   refused) and carry the session's CSRF token (`X-CSRF-Token` header or a `csrf` form
//!   field, whose body is read here, bounded by [`MAX_INSPECT_BYTES`]). A trusted local client
//!   without a cookie is refused when its request says it comes from another origin (a web
//!   page in the operator's browser posting to the loopback API).
//! - The sign-in forms (public) refuse a POST whose `Origin`/`Referer` names another site
//!   (login CSRF: signing the victim's browser in as the attacker).
//! - The peer address comes from the accepted socket, never from a header.

use crate::access::{self, Requires, Target};
use crate::{ApiError, ApiState};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use bytes::Bytes;
use herald_accounts::principal::Need;
use herald_accounts::session::{token_digest, SessionOwner};
use herald_accounts::{Actor, AuditEvent, Principal};
use herald_spool::PostKind;
use herald_types::Address;
use ipnet::IpNet;
use sha2::{Digest, Sha256};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

pub const COOKIE: &str = "herald_admin";
/// The header a browser session's API calls carry their CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The form field of the same token.
pub const CSRF_FIELD: &str = "csrf";
/// Largest body the guard reads to find a form's CSRF token or a JSON target for the audit
/// log (admin forms and those JSON bodies are a few hundred bytes).
pub const MAX_INSPECT_BYTES: usize = 64 * 1024;

/// Most values of a form field named in one audit row's target (a bulk action's posts).
const MAX_FORM_TARGETS: usize = 100;

/// Equal in constant time (over the digests).
pub fn token_matches(expected: &str, given: &str) -> bool {
    digests_equal(
        &Sha256::digest(expected.as_bytes()),
        &Sha256::digest(given.as_bytes()),
    )
}

/// Two digests equal, in time independent of where they differ.
fn digests_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The clients trusted without a token when `http.admin_token` is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalClients {
    /// Empty: every loopback address.
    nets: Vec<IpNet>,
}

impl LocalClients {
    /// Parses `http.local_clients`: addresses or networks (CIDR), each within loopback
    /// (127.0.0.0/8 or ::1), so the setting narrows trust and never opens it to the network.
    pub fn parse(entries: &[String]) -> Result<LocalClients, String> {
        let mut nets = Vec::with_capacity(entries.len());
        for e in entries {
            let e = e.trim();
            let net = match e.parse::<IpNet>() {
                Ok(n) => n,
                Err(_) => e
                    .parse::<IpAddr>()
                    .map(IpNet::from)
                    .map_err(|_| format!("{e:?} is not an IP address or network"))?,
            };
            let inside_loopback = match net {
                IpNet::V4(n) => n.prefix_len() >= 8 && n.network().is_loopback(),
                IpNet::V6(n) => n.prefix_len() == 128 && n.network().is_loopback(),
            };
            if !inside_loopback {
                return Err(format!(
                    "{e:?} is not within loopback (127.0.0.0/8 or ::1): clients elsewhere \
                     need http.admin_token"
                ));
            }
            nets.push(net);
        }
        Ok(LocalClients { nets })
    }

    /// True when `peer` may use the admin routes without a token. An IPv4-mapped IPv6 peer
    /// (a dual-stack listener) is judged by its IPv4 address.
    pub fn allows(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        if self.nets.is_empty() {
            return peer.is_loopback();
        }
        self.nets.iter().any(|n| n.contains(&peer))
    }
}

/// The browser session behind a request.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The cookie's value (the session id; sign-out ends it).
    pub cookie: String,
    pub csrf: String,
}

/// Who made a request, as the guard established it; in the request's extensions for the
/// handlers that show or use it (`/admin/`, `/api/v1/me`, sign-out).
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub session: Option<SessionInfo>,
    pub client: Option<IpAddr>,
}

/// The bearer token of a request, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// The session cookie's value, if any (its form is checked by the accounts store).
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

/// The `Set-Cookie` value opening a session.
pub fn session_set_cookie(s: &ApiState, value: &str) -> String {
    let secure = if s.secure_cookies { "; Secure" } else { "" };
    format!("{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/{secure}")
}

/// The `Set-Cookie` value ending one.
pub fn session_clear_cookie(s: &ApiState) -> String {
    let secure = if s.secure_cookies { "; Secure" } else { "" };
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{secure}")
}

fn now_ms() -> u64 {
    herald_types::unix_ms_now()
}

/// The principal of an account session: its stored roles plus moderation of every list whose
/// `moderators` setting names it.
async fn account_principal(s: &ApiState, address: String) -> Result<Principal, ApiError> {
    let (accounts, dir) = (s.accounts.clone(), s.directory.clone());
    tokio::task::spawn_blocking(move || {
        let base = accounts
            .principal(&address)
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .unwrap_or_else(|| Principal::account(address, false, &[]));
        let lists = dir.lists()?;
        Ok(base.with_list_moderators(&lists))
    })
    .await?
}

/// Establishes the caller; `None` when nobody is signed in.
async fn identify(
    s: &ApiState,
    headers: &HeaderMap,
    peer: Option<IpAddr>,
) -> Result<Option<Caller>, ApiError> {
    let caller = |principal, session| Caller {
        principal,
        session,
        client: peer,
    };
    if let (Some(token), Some(given)) = (&s.admin_token, bearer(headers)) {
        // A wrong bearer token is refused, not retried as a cookie or as a local client.
        if token_matches(token, given) {
            return Ok(Some(caller(Principal::full(Actor::Token), None)));
        }
        if let Some(client) = peer {
            bearer_failed(s, client);
        }
        return Ok(None);
    }
    if let Some(cookie) = session_cookie(headers) {
        let (accounts, c) = (s.accounts.clone(), cookie.to_string());
        let found = tokio::task::spawn_blocking(move || accounts.session(&c, now_ms()))
            .await?
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        if let Some(sess) = found {
            let info = SessionInfo {
                cookie: cookie.to_string(),
                csrf: sess.csrf,
            };
            match sess.owner {
                // A token session lasts while the token it was opened with is configured.
                SessionOwner::Token(digest) => {
                    let current = s.admin_token.as_deref().map(token_digest);
                    if current.is_some_and(|c| digests_equal(&c, &digest)) {
                        return Ok(Some(caller(Principal::full(Actor::Token), Some(info))));
                    }
                }
                SessionOwner::Account(address) => {
                    let p = account_principal(s, address).await?;
                    return Ok(Some(caller(p, Some(info))));
                }
            }
        }
    }
    if s.admin_token.is_none() && peer.is_some_and(|p| s.local_clients.allows(p)) {
        return Ok(Some(caller(Principal::full(Actor::Local), None)));
    }
    Ok(None)
}

/// A wrong `Authorization: Bearer` token from `client`: counted by the admin-token sign-in's
/// own throttle (the accounts store's failed-sign-in window per client), so guessing the token
/// through the API is as slow as guessing it on the sign-in page.
fn bearer_failed(s: &ApiState, client: IpAddr) {
    let now = now_ms();
    s.accounts.token_login_failed(client, now);
    match s.accounts.token_login_allowed(client, now) {
        Ok(()) => tracing::warn!(%client, "wrong admin token refused"),
        Err(secs) => tracing::warn!(%client, retry_after_secs = secs,
            "wrong admin token refused; client throttled"),
    }
}

/// The answer to a bearer token from a client the admin-token throttle holds back (whether
/// the token is right or not: a guesser learns nothing while throttled), or `None`.
fn bearer_throttled(s: &ApiState, headers: &HeaderMap, peer: Option<IpAddr>) -> Option<Response> {
    s.admin_token.as_ref()?;
    bearer(headers)?;
    let client = peer?;
    let secs = s.accounts.token_login_allowed(client, now_ms()).err()?;
    // Each refusal is one cheap answer; the WARN was written when the client reached the
    // limit (`bearer_failed`), so a guesser cannot flood the log at WARN.
    tracing::debug!(%client, retry_after_secs = secs, "admin token from a throttled client refused");
    let mut r = refuse(
        StatusCode::TOO_MANY_REQUESTS,
        "too many wrong admin tokens from this client: try again later",
    );
    if let Ok(v) = secs.to_string().parse() {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    Some(r)
}

/// `host[:port]` of a URL or an `Origin` value, lower case; `None` for `null` or garbage.
fn authority(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let a = &rest[..end];
    (!a.is_empty() && !a.contains('@')).then(|| a.to_ascii_lowercase())
}

/// Whether the request says it comes from our own origin. `Ok(None)`: it does not say.
fn same_origin(headers: &HeaderMap, public_base_url: &str) -> Option<bool> {
    let said = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))?;
    let Some(from) = said.to_str().ok().and_then(authority) else {
        return Some(false);
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_ascii_lowercase);
    Some(
        host.as_deref() == Some(from.as_str())
            || authority(public_base_url).as_deref() == Some(from.as_str()),
    )
}

/// The list of a live held post, canonical.
fn held_list(s: &ApiState, post: u64) -> Option<String> {
    s.spool
        .live_posts()
        .into_iter()
        .find(|(id, m)| id.0 == post && m.kind == PostKind::Held)
        .map(|(_, m)| herald_accounts::key(&m.list_address))
}

fn content_type_is(headers: &HeaderMap, what: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with(what))
}

fn small_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n <= MAX_INSPECT_BYTES)
}

/// The middleware in front of every route.
pub async fn guard(State(s): State<Arc<ApiState>>, req: Request, next: Next) -> Response {
    let route = access::classify(req.method(), req.uri().path(), req.uri().query());
    if route.requires == Requires::Public {
        // Sign-in forms posted from another site would sign the browser in as someone else
        // (login CSRF): a form that says it comes from elsewhere is refused.
        let signing_in = req.uri().path().starts_with("/login");
        if signing_in
            && access::changes(req.method())
            && same_origin(req.headers(), &s.public_base_url) == Some(false)
        {
            return refuse(
                StatusCode::FORBIDDEN,
                "a sign-in from another site is refused",
            );
        }
        return next.run(req).await;
    }
    let path = req.uri().path().to_string();
    let write = access::changes(req.method());
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(p)| p.ip().to_canonical());
    if let Some(throttled) = bearer_throttled(&s, req.headers(), peer) {
        return throttled;
    }
    let caller = match identify(&s, req.headers(), peer).await {
        Ok(Some(c)) => c,
        Ok(None) => return unauthenticated(&s, &path),
        Err(e) => return e.into_response(),
    };
    let (req, body) = match inspect_body(req, write, &caller, &route).await {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let list = match &route.requires {
        Requires::HeldPost(id) => held_list(&s, *id),
        _ => route.list.clone(),
    };
    let target = match write {
        true => audit_target(&s, &route, &body).await,
        false => None,
    };
    let audit = |outcome: String| {
        let s = s.clone();
        let ev = AuditEvent {
            at_ms: now_ms(),
            actor: caller.principal.actor.name().to_string(),
            client: caller.client.map(|c| c.to_string()),
            action: route.action.unwrap_or("other").to_string(),
            list: list.clone(),
            target: target.clone(),
            outcome,
        };
        async move { record(&s, ev).await }
    };
    if write {
        if let Err(why) =
            check_origin_and_csrf(&s, &caller, req.headers(), req.uri().query(), &body)
        {
            if route.action.is_some() {
                audit("denied".into()).await;
            }
            return refuse(StatusCode::FORBIDDEN, why);
        }
    }
    let need = match &route.requires {
        Requires::Now(n) => n.clone(),
        Requires::HeldPost(_) => list.clone().map(Need::Moderator).unwrap_or(Need::Site),
        Requires::Public => Need::Signed,
    };
    if !caller.principal.may(&need) {
        if write && route.action.is_some() {
            audit("denied".into()).await;
        }
        return forbidden(&path);
    }
    let mut req = req;
    req.extensions_mut().insert(caller.clone());
    let resp = next.run(req).await;
    if write && route.action.is_some() {
        audit(outcome(resp.status())).await;
    }
    resp
}

/// The audit outcome of an answered request.
fn outcome(st: StatusCode) -> String {
    if st.is_success() || st.is_redirection() {
        "ok".to_string()
    } else if st == StatusCode::FORBIDDEN {
        "denied".to_string()
    } else {
        format!("error {}", st.as_u16())
    }
}

/// Reads the body (bounded) when the CSRF token may be in a form, or the audit target in a
/// JSON body, and puts it back for the handler; `Err` answers a body too large for that.
async fn inspect_body(
    req: Request,
    write: bool,
    caller: &Caller,
    route: &access::Route,
) -> Result<(Request, Bytes), Response> {
    let form_csrf = write
        && caller.session.is_some()
        && !req.headers().contains_key(CSRF_HEADER)
        && content_type_is(req.headers(), "application/x-www-form-urlencoded");
    let json_target = write
        && matches!(route.target, Target::Body(_))
        && content_type_is(req.headers(), "application/json")
        && small_body(req.headers());
    if !(form_csrf || json_target) {
        return Ok((req, Bytes::new()));
    }
    let (parts, b) = req.into_parts();
    match axum::body::to_bytes(b, MAX_INSPECT_BYTES).await {
        Ok(bytes) => Ok((Request::from_parts(parts, Body::from(bytes.clone())), bytes)),
        Err(_) => Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the form is larger than an admin form can be",
        )),
    }
}

/// Same origin and the session's CSRF token, for a state-changing request.
fn check_origin_and_csrf(
    s: &ApiState,
    caller: &Caller,
    headers: &HeaderMap,
    query: Option<&str>,
    body: &Bytes,
) -> Result<(), &'static str> {
    let origin = same_origin(headers, &s.public_base_url);
    let Some(session) = &caller.session else {
        // Bearer token (a browser cannot add it cross-site) or a local client: refuse only
        // what says it comes from elsewhere.
        return match origin {
            Some(false) => Err("a request from another origin is refused"),
            _ => Ok(()),
        };
    };
    if origin != Some(true) {
        return Err(
            "a request with a session cookie must come from this server's own pages (Origin)",
        );
    }
    let given = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| {
            form_urlencoded::parse(body)
                .find(|(k, _)| k == CSRF_FIELD)
                .map(|(_, v)| v.into_owned())
        })
        .or_else(|| {
            // A file upload form (the CSV import) cannot carry the token in a body the guard
            // reads (it may be megabytes), nor, without script, in a header: its action URL
            // carries it. Only for multipart bodies, so other forms keep it out of URLs.
            content_type_is(headers, "multipart/form-data")
                .then(|| form_urlencoded::parse(query.unwrap_or("").as_bytes()))
                .and_then(|mut q| q.find(|(k, _)| k == CSRF_FIELD))
                .map(|(_, v)| v.into_owned())
        });
    match given {
        Some(t) if herald_accounts::session::csrf_matches(&session.cookie, &t) => Ok(()),
        _ => Err("the CSRF token is missing or wrong: reload the page and try again"),
    }
}

/// The audit row's target, canonical when it is an address; an erased person's as its hash.
async fn audit_target(s: &ApiState, route: &access::Route, body: &Bytes) -> Option<String> {
    let raw = match &route.target {
        Target::None => return None,
        Target::Path(p) => p.clone(),
        Target::Body(field) => serde_json::from_slice::<serde_json::Value>(body)
            .ok()?
            .get(*field)?
            .as_str()?
            .to_string(),
        Target::Form(field) => {
            // Every value of the field (the held posts' bulk form sends several), bounded.
            let all: Vec<String> = form_urlencoded::parse(body)
                .filter(|(k, _)| k == field)
                .map(|(_, v)| v.into_owned())
                .take(MAX_FORM_TARGETS)
                .collect();
            if all.is_empty() {
                return None;
            }
            all.join(",")
        }
    };
    let Ok(address) = Address::parse(raw.trim()) else {
        return Some(raw);
    };
    if route.action == Some("person.erase") {
        let accounts = s.accounts.clone();
        return tokio::task::spawn_blocking(move || accounts.erased_name(&address).ok())
            .await
            .ok()
            .flatten();
    }
    Some(herald_accounts::key(&address))
}

/// Writes an audit event; a failure is logged (the action itself already happened).
pub async fn record(s: &ApiState, ev: AuditEvent) {
    let accounts = s.accounts.clone();
    let action = ev.action.clone();
    match tokio::task::spawn_blocking(move || accounts.record(&ev)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(%action, error = %e, "audit event not recorded"),
        Err(e) => tracing::error!(%action, error = %e, "audit event not recorded"),
    }
}

fn is_page(path: &str) -> bool {
    path == "/" || path == "/logout" || path == "/admin" || path.starts_with("/admin/")
}

/// Nobody signed in.
fn unauthenticated(s: &ApiState, path: &str) -> Response {
    if path != "/" && is_page(path) {
        return Redirect::to("/login").into_response();
    }
    match (&s.admin_token, path) {
        (Some(_), "/") => (StatusCode::OK, login_page(false)).into_response(),
        (Some(_), _) => refuse(
            StatusCode::UNAUTHORIZED,
            "an admin token is required (Authorization: Bearer …)",
        ),
        (None, _) => refuse(
            StatusCode::FORBIDDEN,
            "no http.admin_token is configured: the admin API answers local (loopback) clients only",
        ),
    }
}

/// Signed in, without the right.
fn forbidden(path: &str) -> Response {
    if path == "/" {
        // The dashboard is the site's; an owner or moderator has their own page.
        return Redirect::to("/admin/").into_response();
    }
    if is_page(path) {
        return (
            StatusCode::FORBIDDEN,
            Html(crate::unsubscribe::page(
                "Not yours",
                "<p>Your account may not see this page. <a href=\"/admin/\">Your lists</a></p>",
            )),
        )
            .into_response();
    }
    refuse(
        StatusCode::FORBIDDEN,
        "your account has no right to this (site administrator, list owner or moderator needed)",
    )
}

pub(crate) fn refuse(status: StatusCode, msg: &str) -> Response {
    crate::error::problem(status, msg.to_string(), None)
}

/// The admin-token sign-in page (the dashboard's, at `/`).
pub(crate) fn login_page(failed: bool) -> Html<String> {
    let note = if failed {
        "<p class=\"err\">That token is not right.</p>"
    } else {
        ""
    };
    Html(include_str!("dashboard/login.html").replace("{{note}}", note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_cookies() {
        assert!(token_matches("0123456789abcdef", "0123456789abcdef"));
        assert!(!token_matches("0123456789abcdef", "0123456789abcdeF"));
        assert!(!token_matches("0123456789abcdef", ""));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=b; herald_admin=tok; c=d".parse().expect("header"),
        );
        assert_eq!(session_cookie(&h), Some("tok"));
        h.insert(header::AUTHORIZATION, "Bearer xyz".parse().expect("header"));
        assert_eq!(bearer(&h), Some("xyz"));
        let huge = format!("herald_admin={}", "A".repeat(10 * 1024));
        h.insert(header::COOKIE, huge.parse().expect("header"));
        assert_eq!(session_cookie(&h).map(str::len), Some(10 * 1024));
    }

    #[test]
    fn origins_are_compared_by_authority() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:8025".parse().expect("h"));
        assert_eq!(same_origin(&h, ""), None, "nothing said");
        h.insert(header::ORIGIN, "http://127.0.0.1:8025".parse().expect("h"));
        assert_eq!(same_origin(&h, ""), Some(true));
        h.insert(
            header::ORIGIN,
            "https://lists.example.org".parse().expect("h"),
        );
        assert_eq!(same_origin(&h, ""), Some(false));
        assert_eq!(
            same_origin(&h, "https://lists.example.org/"),
            Some(true),
            "behind a proxy"
        );
        for evil in [
            "null",
            "http://127.0.0.1:8025.evil.test",
            "http://evil@127.0.0.1:8025",
            "javascript:x",
            "",
        ] {
            h.insert(header::ORIGIN, evil.parse().expect("h"));
            assert_eq!(same_origin(&h, ""), Some(false), "{evil}");
        }
        let mut r = HeaderMap::new();
        r.insert(header::HOST, "127.0.0.1:8025".parse().expect("h"));
        r.insert(
            header::REFERER,
            "http://127.0.0.1:8025/admin/?x".parse().expect("h"),
        );
        assert_eq!(same_origin(&r, ""), Some(true), "Referer when no Origin");
    }

    #[test]
    fn local_clients_default_to_loopback_and_narrow_when_set() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let any = LocalClients::default();
        assert!(
            any.allows(ip("127.0.0.1")) && any.allows(ip("127.9.9.9")) && any.allows(ip("::1"))
        );
        assert!(!any.allows(ip("10.0.0.1")) && !any.allows(ip("::ffff:10.0.0.1")));
        assert!(any.allows(ip("::ffff:127.0.0.1")));
        let one = LocalClients::parse(&["127.0.0.1".into()]).expect("parse");
        assert!(one.allows(ip("127.0.0.1")));
        assert!(!one.allows(ip("127.0.0.2")) && !one.allows(ip("::1")));
        for hostile in [
            "0.0.0.0/0",
            "::/0",
            "192.168.0.0/16",
            "127.0.0.1/7",
            "::1/64",
            "1.2.3.4",
        ] {
            assert!(LocalClients::parse(&[hostile.into()]).is_err(), "{hostile}");
        }
    }
}
