//! The public subscribe page: `GET /subscribe/<list>` serves a plain HTML form
//! (no JavaScript, labelled fields); `POST` asks for the double opt-in confirmation, which is
//! all it can ever do — the subscription happens only when the mailed link is confirmed.
//!
//! Protection against bot floods, without a CAPTCHA:
//! - a honeypot field (`website`, hidden from people by CSS and `aria-hidden`, left empty by
//!   them, filled by form-filling bots);
//! - a signed time-token (`herald_types::token::form_token`): the form must have been fetched
//!   from this server at least [`MIN_FORM_SECS`] before it is sent and at most
//!   [`MAX_FORM_SECS`] before, and each served form is sent once: its token carries a random
//!   nonce and is spent by the first submission (in the directory, so on every node of a
//!   cluster); a replay, with any address, gets the form again and mails nothing;
//! - the `[notice_limits]` every confirmation passes: per recipient address (a forged
//!   subscription cannot mail-bomb a victim), per client (the browser's address), per list and
//!   for the whole server.
//!
//! Whatever happens to a well-formed request, the answer is the same page: a bot learns nothing,
//! and nobody can probe who is a member, banned or suppressed. Only a closed list says so.
//!
//! SECURITY: public (see `auth::is_public`). Everything shown is escaped; the peer address comes
//! from the socket, never from a header.

use crate::unsubscribe::{escape, page_in};
use crate::{ApiError, ApiState};
use axum::extract::{ConnectInfo, Form, Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use herald_directory::LinkKind;
use herald_i18n::{Overrides, Words};
use herald_types::{Address, SubscriptionPolicy};
use std::net::SocketAddr;
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// A form sent sooner than this after it was served is a bot's.
pub const MIN_FORM_SECS: u64 = 2;
/// A form older than this is served again (its token has expired).
pub const MAX_FORM_SECS: u64 = 2 * 3600;

/// What the form sends (the subscriptions page's link form too).
#[derive(Debug, serde::Deserialize)]
pub struct SubscribeForm {
    #[serde(default)]
    pub email: String,
    /// The honeypot.
    #[serde(default)]
    pub website: String,
    /// The time-token.
    #[serde(default)]
    pub t: String,
}

fn now_secs() -> u64 {
    herald_types::unix_ms_now() / 1000
}

/// A fresh time token for a form of `list`, with a random nonce of its own: each served form
/// is spent alone, never another visitor's fetched in the same second.
pub(crate) fn fresh_form_token(s: &ApiState, list: &Address) -> String {
    herald_types::token::form_token(&s.secret, list, now_secs(), rand::random())
}

/// What a submitted form's time token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FormToken {
    /// Not ours, or older than [`MAX_FORM_SECS`]: the form is served again.
    Expired,
    /// Sent before: one form, one submission.
    Replayed,
    /// Spent now by this submission; the form was served this many seconds ago.
    Fresh { age_secs: u64 },
}

/// Verifies the time token `t` of a form for `list` and spends it. The spent key lives in the
/// directory (shared by a cluster's nodes) until the token would have expired anyway.
pub(crate) async fn spend_form_token(
    s: &ApiState,
    list: &Address,
    t: &str,
) -> Result<FormToken, ApiError> {
    let Some(grant) = herald_types::token::verify_form_token(&s.secret, list, t) else {
        return Ok(FormToken::Expired);
    };
    let age_secs = now_secs().saturating_sub(grant.issued_unix_secs);
    if age_secs > MAX_FORM_SECS {
        return Ok(FormToken::Expired);
    }
    let expires_ms = grant
        .issued_unix_secs
        .saturating_add(MAX_FORM_SECS)
        .saturating_mul(1000);
    let d = s.directory.clone();
    let spent = tokio::task::spawn_blocking(move || {
        d.spend_link(LinkKind::Form, &grant.spend_key, expires_ms)
    })
    .await??;
    Ok(match spent {
        true => FormToken::Fresh { age_secs },
        false => FormToken::Replayed,
    })
}

/// A catalogue text, escaped for HTML.
fn t(w: &Words<'_>, id: &str, args: &[(&str, &str)]) -> String {
    escape(&w.text(id, args))
}

/// The list at `list` and its language, if it exists and takes subscriptions: `Err` is the
/// page to answer.
async fn open_list(s: &ApiState, list: &str) -> Result<(Address, String, Overrides), Response> {
    let en = Words::shipped(herald_i18n::DEFAULT);
    let not_found = || {
        (
            StatusCode::NOT_FOUND,
            Html(page_in(
                en.lang,
                &en.text("page-no-list-title", &[]),
                &format!("<p>{}</p>", t(&en, "page-no-list", &[])),
            )),
        )
            .into_response()
    };
    let address = Address::parse(list).map_err(|_| not_found())?;
    let dir = s.directory.clone();
    let a = address.clone();
    let found = tokio::task::spawn_blocking(move || dir.list_by_address(&a))
        .await
        .map_err(|e| ApiError::from(e).into_response())?
        .map_err(|e| ApiError::from(e).into_response())?;
    match found {
        None => Err(not_found()),
        Some(l) => {
            // The visitor is not known yet: the list's language, with the list's texts.
            let (lang, texts) = crate::unsubscribe::page_words(s, &l, None).await;
            if l.settings.subscription == SubscriptionPolicy::Closed {
                let w = Words {
                    lang: &lang,
                    overrides: &texts,
                };
                let list = l.address.to_string();
                return Err((
                    StatusCode::FORBIDDEN,
                    Html(page_in(
                        &lang,
                        &w.text("page-closed-title", &[]),
                        &format!("<p>{}</p>", t(&w, "page-closed", &[("list", &list)])),
                    )),
                )
                    .into_response());
            }
            Ok((l.address, lang, texts))
        }
    }
}

/// The form, with `error` shown next to the address field and `email` filled in again.
fn form(s: &ApiState, list: &Address, w: &Words<'_>, email: &str, error: Option<&str>) -> String {
    let token = fresh_form_token(s, list);
    let list_text = escape(&list.to_string());
    let error = error.map_or(String::new(), |e| {
        format!(
            "<p id=\"email-error\" role=\"alert\"><strong>{}</strong></p>",
            escape(e)
        )
    });
    let described = if error.is_empty() {
        ""
    } else {
        " aria-describedby=\"email-error\""
    };
    page_in(
        w.lang,
        &w.text("subscribe-title", &[("list", &list.to_string())]),
        &format!(
            "<form method=\"post\" action=\"/subscribe/{list_text}\">\
             <p><label for=\"email\">{label}</label><br>\
             <input id=\"email\" name=\"email\" type=\"email\" required autocomplete=\"email\" \
             size=\"40\" value=\"{email}\"{described}></p>{error}\
             <div style=\"position:absolute;left:-10000px\" aria-hidden=\"true\">\
             <label for=\"website\">{honeypot}</label>\
             <input id=\"website\" name=\"website\" type=\"text\" tabindex=\"-1\" autocomplete=\"off\"></div>\
             <input type=\"hidden\" name=\"t\" value=\"{token}\">\
             <p><button type=\"submit\">{button}</button></p>\
             <p>{note}</p></form>",
            email = escape(email),
            label = t(w, "subscribe-email-label", &[]),
            honeypot = t(w, "subscribe-honeypot-label", &[]),
            button = t(w, "subscribe-button", &[]),
            note = t(w, "subscribe-note", &[]),
        ),
    )
}

/// `GET /subscribe/<list>`.
pub async fn show(State(s): St, Path(list): Path<String>) -> Response {
    match open_list(&s, &list).await {
        Ok((list, lang, texts)) => {
            let w = Words {
                lang: &lang,
                overrides: &texts,
            };
            Html(form(&s, &list, &w, "", None)).into_response()
        }
        Err(page) => page,
    }
}

/// `POST /subscribe/<list>`.
pub async fn submit(
    State(s): St,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(list): Path<String>,
    Form(f): Form<SubscribeForm>,
) -> Response {
    let (list, lang, texts) = match open_list(&s, &list).await {
        Ok(found) => found,
        Err(page) => return page,
    };
    let w = Words {
        lang: &lang,
        overrides: &texts,
    };
    let again = |error: &str, status: StatusCode| {
        let error = w.text(error, &[]);
        let form = form(&s, &list, &w, f.email.trim(), Some(&error));
        (status, Html(form)).into_response()
    };
    let Ok(address) = Address::parse(f.email.trim()) else {
        return again("subscribe-bad-address", StatusCode::BAD_REQUEST);
    };
    let client = peer.ip().to_canonical();
    let sent = || {
        let (who, to) = (address.to_string(), list.to_string());
        Html(page_in(
            &lang,
            &w.text("subscribe-sent-title", &[]),
            &format!(
                "<p>{}</p>",
                t(&w, "subscribe-sent", &[("who", &who), ("list", &to)])
            ),
        ))
        .into_response()
    };
    let age = match spend_form_token(&s, &list, &f.t).await {
        Ok(FormToken::Fresh { age_secs }) => age_secs,
        Ok(FormToken::Expired) => return again("subscribe-expired", StatusCode::BAD_REQUEST),
        Ok(FormToken::Replayed) => {
            // A bot re-posting one fetched form for address after address, or a person's
            // second press: the form again, fresh, and nothing mailed.
            tracing::warn!(list = %list, %client, "subscribe form: time token replayed; refused, nothing sent");
            return again("subscribe-replayed", StatusCode::CONFLICT);
        }
        Err(e) => return e.into_response(),
    };
    if !f.website.is_empty() || age < MIN_FORM_SECS {
        tracing::info!(list = %list, %client, honeypot = !f.website.is_empty(), "subscribe form: looks like a bot; nothing sent");
        return sent();
    }
    match s
        .lists
        .web_subscribe(list.clone(), address.clone(), client)
        .await
    {
        Ok(None) => sent(),
        Ok(Some(why)) => {
            // A refused address (banned, suppressed, erased) gets the same page: the form must
            // not tell strangers who is on which list.
            tracing::info!(list = %list, %client, reason = %why, "subscribe form: nothing to confirm");
            sent()
        }
        Err(e) => e.into_response(),
    }
}
