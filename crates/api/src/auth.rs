//! Who may use the admin API, `/metrics` and the dashboard.
//!
//! - With `http.admin_token` set: a request must carry `Authorization: Bearer <token>` (the CLI,
//!   Prometheus) or the dashboard's `herald_admin` cookie, set by `POST /login`. A browser
//!   without it gets the login page at `/`; API calls get 401.
//! - Without a token: only local clients are served (the server logs this at start): any
//!   loopback address by default, or the loopback addresses in `http.local_clients`.
//!
//! Public in every case: `/healthz`, the one-click unsubscribe endpoints and the double opt-in
//! confirmation pages (`/confirm/<token>`: their HMAC token is the authorization, and the
//! person clicking is a list member, not an administrator), the login form and the static
//! assets (no data in them).
//!
//! SECURITY: tokens are compared as SHA-256 digests with a constant-time equality, so neither
//! the content nor the length of the token leaks through timing. The cookie is `HttpOnly` and
//! `SameSite=Strict` (no cross-site requests carry it: CSRF on the POST actions is refused by
//! the browser). The peer address comes from the accepted socket, never from a header.

use crate::ApiState;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use ipnet::IpNet;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

pub const COOKIE: &str = "herald_admin";

/// Equal in constant time (over the digests).
pub fn token_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (
        Sha256::digest(expected.as_bytes()),
        Sha256::digest(given.as_bytes()),
    );
    a.iter()
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

fn is_public(method: &Method, path: &str) -> bool {
    path == "/healthz"
        || path.starts_with("/unsubscribe/")
        || path.starts_with("/confirm/")
        // The public subscribe page (double opt-in: it only ever sends a confirmation).
        || path.starts_with("/subscribe/")
        // A member's own subscriptions: the form mails a link; the pages need its token.
        || path == "/manage"
        || path.starts_with("/manage/")
        || path.starts_with("/assets/")
        || (path == "/login" && method == Method::POST)
        // The web archive: its pages serve public archives only (herald_archive::web).
        || (path.starts_with("/archive/") && method == Method::GET)
}

/// The token a request presents: bearer header first, then the dashboard cookie.
fn presented(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        if let Some(t) = v.strip_prefix("Bearer ") {
            return Some(t.trim());
        }
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

/// The middleware in front of every route.
pub async fn guard(State(s): State<Arc<ApiState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if is_public(req.method(), &path) {
        return next.run(req).await;
    }
    let allowed = match &s.admin_token {
        Some(token) => presented(req.headers()).is_some_and(|t| token_matches(token, t)),
        None => req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .is_some_and(|ConnectInfo(peer)| s.local_clients.allows(peer.ip())),
    };
    if allowed {
        return next.run(req).await;
    }
    match (&s.admin_token, path.as_str()) {
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

fn refuse(status: StatusCode, msg: &str) -> Response {
    let body = herald_api_types::ErrorBody {
        error: msg.to_string(),
    };
    (status, axum::Json(body)).into_response()
}

fn login_page(failed: bool) -> Html<String> {
    let note = if failed {
        "<p class=\"err\">That token is not right.</p>"
    } else {
        ""
    };
    Html(include_str!("dashboard/login.html").replace("{{note}}", note))
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
}

/// `POST /login`: sets the dashboard cookie when the token is right.
pub async fn login(State(s): State<Arc<ApiState>>, Form(f): Form<LoginForm>) -> Response {
    let Some(token) = &s.admin_token else {
        return Redirect::to("/").into_response();
    };
    if !token_matches(token, f.token.trim()) {
        return (StatusCode::UNAUTHORIZED, login_page(true)).into_response();
    }
    let cookie = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
        f.token.trim()
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
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
        assert_eq!(presented(&h), Some("tok"));
        h.insert(header::AUTHORIZATION, "Bearer xyz".parse().expect("header"));
        assert_eq!(presented(&h), Some("xyz"));
        assert!(is_public(&Method::GET, "/unsubscribe/a/b/c"));
        assert!(is_public(&Method::GET, "/confirm/tok"));
        assert!(is_public(&Method::POST, "/confirm/tok"));
        assert!(!is_public(&Method::GET, "/confirmx"));
        assert!(!is_public(&Method::GET, "/api/status"));
        assert!(!is_public(&Method::GET, "/login"));
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
