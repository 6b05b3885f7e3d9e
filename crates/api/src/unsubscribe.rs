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
use herald_i18n::{Overrides, Words};
use herald_lists::{Door, Membership};
use herald_types::{Address, List};
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// The language and the list's own texts a public page of `list` is written with for `who`:
/// the member's language, else the list's. A store error falls back to the
/// list's language and the shipped texts: a page is still better than an error.
pub(crate) async fn page_words(
    s: &ApiState,
    list: &List,
    who: Option<&Address>,
) -> (String, Overrides) {
    let d = s.directory.clone();
    let (l, w) = (list.clone(), who.cloned());
    let found = tokio::task::spawn_blocking(move || {
        let lang = match &w {
            Some(a) => d.language_for(&l, a)?,
            None => l.settings.language.clone(),
        };
        Ok::<_, herald_directory::DirectoryError>((lang, d.overrides(l.id)?))
    })
    .await;
    match found {
        Ok(Ok(v)) => v,
        _ => (list.settings.language.clone(), Overrides::none()),
    }
}

/// A page in words `w`: title and paragraphs are catalogue messages, escaped here.
pub(crate) fn words_page(w: &Words<'_>, title: &str, body: &str) -> String {
    page_in(w.lang, title, body)
}

async fn checked(
    s: &ApiState,
    list: &str,
    member: &str,
    token: &str,
) -> Result<(List, Address), Response> {
    // Not knowing the list yet, the refusals are in the reference language.
    let shipped = Words::shipped(herald_i18n::DEFAULT);
    let forbidden = || {
        (
            StatusCode::FORBIDDEN,
            Html(page(
                &shipped.text("link-invalid-title", &[]),
                &escape(&shipped.text("unsub-invalid", &[])),
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
            Html(page(
                &shipped.text("page-list-gone-title", &[]),
                &escape(&shipped.text("page-list-gone", &[])),
            )),
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
            let (lang, texts) = page_words(&s, &list, Some(&member)).await;
            let w = Words {
                lang: &lang,
                overrides: &texts,
            };
            let (who, l) = (member.to_string(), list.address.to_string());
            let body = format!(
                "<p>{}</p>\
                 <form method=\"post\"><input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\">\
                 <button type=\"submit\">{}</button></form>",
                escape(&w.text("unsub-question", &[("who", &who), ("list", &l)])),
                escape(&w.text("unsub-button", &[])),
            );
            Html(words_page(&w, &w.text("unsub-title", &[]), &body)).into_response()
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
    // The member's language is read before the member is gone.
    let (lang, texts) = page_words(&s, &list, Some(&member)).await;
    let m = Membership::new(&s.directory);
    let (id, who) = (list.id, member.clone());
    let removed =
        tokio::task::spawn_blocking(move || m.unsubscribe(id, &who, Door::OneClick)).await;
    match removed {
        Ok(Ok(_)) => {
            let w = Words {
                lang: &lang,
                overrides: &texts,
            };
            let (who, l) = (member.to_string(), list.address.to_string());
            let body = format!(
                "<p>{}</p>",
                escape(&w.text("unsub-done", &[("who", &who), ("list", &l)]))
            );
            Html(words_page(&w, &w.text("unsub-done-title", &[]), &body)).into_response()
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
