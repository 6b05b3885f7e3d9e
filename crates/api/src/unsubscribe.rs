//! RFC 8058 one-click unsubscribe. Every copy carries
//! `List-Unsubscribe: <https://…/unsubscribe/<list>/<member>/<token>>` and
//! `List-Unsubscribe-Post: List-Unsubscribe=One-Click`; a mailbox provider POSTs
//! `List-Unsubscribe=One-Click` to that URL and the member is removed at once.
//!
//! A GET (a person clicking the link, or a link scanner) only shows a confirmation page whose
//! button POSTs; it never unsubscribes by itself.
//!
//! SECURITY: the token is an HMAC of list and member under the server secret, checked in constant
//! time. A wrong token gets the same 403 whether or not the member exists, so the endpoint does
//! not reveal membership. Addresses echoed into HTML are escaped.

use crate::{ApiError, ApiState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use herald_types::{Address, List};
use std::sync::Arc;

type St = State<Arc<ApiState>>;

async fn checked(
    s: &ApiState,
    list: &str,
    member: &str,
    token: &str,
) -> Result<(List, Address), Response> {
    let forbidden = || {
        (
            StatusCode::FORBIDDEN,
            Html(page(
                "Link not valid",
                "This unsubscribe link is not valid.",
            )),
        )
            .into_response()
    };
    let (Ok(list_addr), Ok(member_addr)) = (Address::parse(list), Address::parse(member)) else {
        return Err(forbidden());
    };
    if !herald_types::token::verify_unsubscribe_token(&s.secret, &list_addr, &member_addr, token) {
        return Err(forbidden());
    }
    let d = s.directory.clone();
    let found = tokio::task::spawn_blocking(move || d.list_by_address(&list_addr)).await;
    match found {
        Ok(Ok(Some(list))) => Ok((list, member_addr)),
        Ok(Ok(None)) => Err((
            StatusCode::NOT_FOUND,
            Html(page("List not found", "This list no longer exists.")),
        )
            .into_response()),
        Ok(Err(e)) => Err(ApiError::from(e).into_response()),
        Err(e) => Err(ApiError::from(e).into_response()),
    }
}

/// GET: a page with a button; nothing changes.
pub async fn confirm_page(
    State(s): St,
    Path((list, member, token)): Path<(String, String, String)>,
) -> Response {
    match checked(&s, &list, &member, &token).await {
        Err(r) => r,
        Ok((list, member)) => {
            let body = format!(
                "<p>Unsubscribe <b>{}</b> from <b>{}</b>?</p>\
                 <form method=\"post\"><input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\">\
                 <button type=\"submit\">Unsubscribe</button></form>",
                escape(&member.to_string()),
                escape(&list.address.to_string())
            );
            Html(page("Unsubscribe", &body)).into_response()
        }
    }
}

/// POST: unsubscribes at once (the body is `List-Unsubscribe=One-Click` per RFC 8058; the
/// signed URL is the authority, so the body is not required to match exactly).
pub async fn unsubscribe(
    State(s): St,
    Path((list, member, token)): Path<(String, String, String)>,
) -> Response {
    let (list, member) = match checked(&s, &list, &member, &token).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let d = s.directory.clone();
    let (id, who) = (list.id, member.clone());
    let removed = tokio::task::spawn_blocking(move || d.remove_member(id, &who)).await;
    match removed {
        Ok(Ok(_)) => {
            tracing::info!(list = %list.address, %member, "member unsubscribed (one-click)");
            let body = format!(
                "<p><b>{}</b> will no longer receive mail from <b>{}</b>.</p>",
                escape(&member.to_string()),
                escape(&list.address.to_string())
            );
            Html(page("Unsubscribed", &body)).into_response()
        }
        Ok(Err(e)) => ApiError::from(e).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

pub(crate) fn page(title: &str, body: &str) -> String {
    page_in(herald_i18n::DEFAULT, title, body)
}

/// [`page`] in language `lang` (a shipped code, so it is safe in the attribute): screen
/// readers and browsers' translation offers read the `lang` attribute.
pub(crate) fn page_in(lang: &str, title: &str, body: &str) -> String {
    let lang = if herald_i18n::is_shipped(lang) {
        lang
    } else {
        herald_i18n::DEFAULT
    };
    format!(
        "<!doctype html><html lang=\"{lang}\"><head><meta charset=\"utf-8\"><title>{t}</title></head>\
         <body><h1>{t}</h1>{body}</body></html>",
        t = escape(title)
    )
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}
