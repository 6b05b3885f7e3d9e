//! Who reads an archive page: the member's archive key (`?key=` on the first visit, then a
//! cookie scoped to the list's archive) and the browser's language. The extractor and the
//! middleware that turns a key that opened a page into that cookie live together, because
//! both read the same key the same way.
//!
//! SECURITY: the key and the cookie are untrusted; a key longer than [`MAX_KEY_BYTES`] is
//! ignored, and a key only opens anything once its signature and the directory say so
//! ([`super::WebArchive`]). The cookie is HttpOnly, SameSite=Lax, and scoped to one list.

use axum::http::{header, StatusCode};
use axum::response::Response;

/// Who is reading: the archive key they present — `?key=` (the link on a member's
/// subscriptions page) or, after that first visit, the `herald_archive_key` cookie scoped to
/// the list's archive — and the shipped language their browser prefers (`Accept-Language`).
#[derive(Debug, Clone, Default)]
pub struct Reader {
    pub(super) key: Option<String>,
    pub(super) accept: Option<&'static str>,
}

/// The cookie holding a member's archive key.
const KEY_COOKIE: &str = "herald_archive_key";

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Reader {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let accept = parts
            .headers
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok())
            .and_then(herald_i18n::negotiate);
        Ok(Reader {
            key: query_key(parts).or_else(|| cookie_key(parts)),
            accept,
        })
    }
}

/// Longest key accepted (a signed token is ~120 bytes; anything far longer is junk).
const MAX_KEY_BYTES: usize = 512;

fn query_key(parts: &axum::http::request::Parts) -> Option<String> {
    parts
        .uri
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("key="))
        .filter(|k| !k.is_empty() && k.len() <= MAX_KEY_BYTES)
        .map(str::to_string)
}

fn cookie_key(parts: &axum::http::request::Parts) -> Option<String> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(KEY_COOKIE)?.strip_prefix('='))
        .filter(|k| !k.is_empty() && k.len() <= MAX_KEY_BYTES)
        .map(str::to_string)
}

/// After a page opened with `?key=` answered 200, the key goes into a cookie for that list's
/// archive only (`Path=/archive/<list>/`, HttpOnly, SameSite=Lax: sent on the reader's own
/// clicks within the archive, never readable by a script), so the next pages need no key in
/// their links.
pub(super) async fn keep_key(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let key = {
        let (parts, body) = req.into_parts();
        let key = query_key(&parts);
        let list = parts
            .uri
            .path()
            .strip_prefix("/archive/")
            .and_then(|rest| rest.split('/').next())
            .filter(|l| !l.is_empty())
            .map(str::to_string);
        (
            key.zip(list),
            axum::extract::Request::from_parts(parts, body),
        )
    };
    let (found, req) = key;
    let mut res = next.run(req).await;
    if let (Some((key, list)), StatusCode::OK) = (found, res.status()) {
        // The key is base64url and a dot (checked by the signature before a 200), the list
        // segment is as the browser sent it: neither can break out of the cookie.
        let cookie = format!(
            "{KEY_COOKIE}={key}; Path=/archive/{list}/; Max-Age={}; HttpOnly; SameSite=Lax",
            MEMBER_KEY_DAYS * 86_400
        );
        if let Ok(v) = axum::http::HeaderValue::from_str(&cookie) {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    res
}

/// How long a member's archive key (and its cookie) is valid.
pub const MEMBER_KEY_DAYS: u64 = 30;
