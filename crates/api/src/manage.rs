//! A member's own subscriptions page: `GET /manage` asks for an address
//! and `POST /manage` mails it a signed link (the same bot protection as the subscribe page:
//! honeypot, time-token, `[notice_limits]`); `GET /manage/<token>` shows every list the address
//! is on with its name and delivery mode, and forms to change them or unsubscribe, which `POST
//! /manage/<token>` carries out; `GET /manage/<token>/data` is the self-service download of all
//! the directory holds about the address (GDPR article 15).
//!
//! Following the mailed link proves the mailbox, as a confirmation does: the token is the
//! member's key (24 h). GET never changes anything (link scanners), and the page answering
//! `POST /manage` is the same whether or not the address is a member anywhere.
//!
//! SECURITY: public (see `auth::is_public`); only a valid `manage` token (HMAC under the server
//! secret, its own MAC domain) reaches a member's data, and only that address's. Everything shown
//! is escaped; names are checked by the directory (no control characters, bounded).

use crate::subscribe::{FormToken, MIN_FORM_SECS};
use crate::unsubscribe::{escape, page_in};
use crate::{ApiError, ApiState};
use axum::extract::{ConnectInfo, Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use herald_i18n::Words;
use herald_lists::{Change, Door, Membership};
use herald_types::{Address, DeliveryMode};
use std::net::SocketAddr;
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// The list the page's forms name.
const PAGE_LIST: &str = "manage@subscriptions.invalid";

fn now_secs() -> u64 {
    herald_types::unix_ms_now() / 1000
}

fn page_list() -> Address {
    // A constant that parses: the time-token of this form is bound to it.
    Address::parse(PAGE_LIST).unwrap_or_else(|_| unreachable!("PAGE_LIST is an address"))
}

/// The language a browser asks for (`Accept-Language`), among the shipped ones; English when
/// it names none. The page before a member is known (and a member's page when they chose no
/// language) is written in it.
fn browser_words(headers: &HeaderMap) -> Words<'static> {
    let asked = headers
        .get(axum::http::header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok())
        .and_then(herald_i18n::negotiate);
    Words::shipped(asked.unwrap_or(herald_i18n::DEFAULT))
}

fn ask_form(s: &ApiState, w: &Words<'_>, error: Option<&str>) -> String {
    let token = crate::subscribe::fresh_form_token(s, &page_list());
    let error = error.map_or(String::new(), |e| {
        format!(
            "<p id=\"email-error\" role=\"alert\"><strong>{}</strong></p>",
            escape(e)
        )
    });
    let e = |id: &str| escape(&w.text(id, &[]));
    page_in(
        w.lang,
        &w.text("manage-title", &[]),
        &format!(
            "<form method=\"post\" action=\"/manage\">\
             <p><label for=\"email\">{label}</label><br>\
             <input id=\"email\" name=\"email\" type=\"email\" required autocomplete=\"email\" size=\"40\"></p>{error}\
             <div style=\"position:absolute;left:-10000px\" aria-hidden=\"true\">\
             <label for=\"website\">{honeypot}</label>\
             <input id=\"website\" name=\"website\" type=\"text\" tabindex=\"-1\" autocomplete=\"off\"></div>\
             <input type=\"hidden\" name=\"t\" value=\"{token}\">\
             <p><button type=\"submit\">{button}</button></p></form>",
            label = e("subscribe-email-label"),
            honeypot = e("subscribe-honeypot-label"),
            button = e("manage-send-button"),
        ),
    )
}

/// `GET /manage`.
pub async fn ask(State(s): St, headers: HeaderMap) -> Html<String> {
    Html(ask_form(&s, &browser_words(&headers), None))
}

/// `POST /manage`: mails the link (the answer never says whether the address is a member).
pub async fn send_link(
    State(s): St,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(f): Form<crate::subscribe::SubscribeForm>,
) -> Response {
    let w = browser_words(&headers);
    let Ok(address) = Address::parse(f.email.trim()) else {
        return (
            StatusCode::BAD_REQUEST,
            Html(ask_form(
                &s,
                &w,
                Some(&w.text("subscribe-bad-address", &[])),
            )),
        )
            .into_response();
    };
    let client = peer.ip().to_canonical();
    let refused = |status: StatusCode, id: &str| {
        (status, Html(ask_form(&s, &w, Some(&w.text(id, &[]))))).into_response()
    };
    let age = match crate::subscribe::spend_form_token(&s, &page_list(), &f.t).await {
        Ok(FormToken::Fresh { age_secs }) => age_secs,
        Ok(FormToken::Expired) => return refused(StatusCode::BAD_REQUEST, "subscribe-expired"),
        Ok(FormToken::Replayed) => {
            tracing::warn!(%client, "subscriptions form: time token replayed; refused, nothing sent");
            return refused(StatusCode::CONFLICT, "subscribe-replayed");
        }
        Err(e) => return e.into_response(),
    };
    if f.website.is_empty() && age >= MIN_FORM_SECS {
        if let Err(e) = s.lists.manage_link(address.clone(), client).await {
            return e.into_response();
        }
    } else {
        tracing::info!(%client, "subscriptions form: looks like a bot; nothing sent");
    }
    let who = address.to_string();
    Html(page_in(
        w.lang,
        &w.text("subscribe-sent-title", &[]),
        &format!(
            "<p>{}</p>",
            escape(&w.text("manage-sent", &[("who", &who)]))
        ),
    ))
    .into_response()
}

/// The address a token opens.
fn opened(s: &ApiState, token: &str) -> Option<Address> {
    herald_types::token::verify_manage(&s.secret, token, now_secs())
}

/// The page for a link that is not valid (forged, expired).
fn invalid_link(w: &Words<'_>) -> Response {
    (
        StatusCode::FORBIDDEN,
        Html(page_in(
            w.lang,
            &w.text("link-invalid-title", &[]),
            &format!(
                "<p>{} <a href=\"/manage\">{}</a></p>",
                escape(&w.text("manage-link-invalid", &[])),
                escape(&w.text("manage-ask-again", &[]))
            ),
        )),
    )
        .into_response()
}

/// The subscriptions page of `who`, with `note` (what was just done) on top. Written in the
/// member's language (the first list where they chose one), else the browser's, else the
/// first list's.
async fn subscriptions(
    s: &ApiState,
    headers: &HeaderMap,
    token: &str,
    who: &Address,
    note: Note,
) -> Result<String, ApiError> {
    let dir = s.directory.clone();
    let w = who.clone();
    let web = s.archive.clone();
    let (person, archives, list_langs) = tokio::task::spawn_blocking(move || {
        let person = dir.person(&w)?;
        // The archive of each list, as this member may open it: public (anyone), members
        // (with a key signed for this member), or nothing to link.
        let archives: Vec<Option<herald_archive::Privacy>> = person
            .memberships
            .iter()
            .map(|m| web.as_ref().and_then(|a| a.privacy(&m.list).ok()))
            .collect();
        let list_langs: Vec<String> = person
            .memberships
            .iter()
            .map(|m| {
                Address::parse(&m.list)
                    .ok()
                    .and_then(|a| dir.list_by_address(&a).ok().flatten())
                    .map_or_else(|| herald_i18n::DEFAULT.to_string(), |l| l.settings.language)
            })
            .collect();
        Ok::<_, herald_directory::DirectoryError>((person, archives, list_langs))
    })
    .await??;
    let chosen = person
        .memberships
        .iter()
        .find_map(|m| m.language.clone())
        .filter(|l| herald_i18n::is_shipped(l));
    let asked = headers
        .get(axum::http::header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok())
        .and_then(herald_i18n::negotiate);
    let lang = chosen
        .or(asked.map(str::to_string))
        .or_else(|| list_langs.first().cloned())
        .unwrap_or_else(|| herald_i18n::DEFAULT.to_string());
    let w = Words::shipped(&lang);
    let e = |id: &str, args: &[(&str, &str)]| escape(&w.text(id, args));
    let who_text = who.to_string();
    let mut body = String::new();
    if let Some((id, list)) = note.0 {
        body.push_str(&format!(
            "<p role=\"status\"><strong>{}</strong></p>",
            e(id, &[("list", &list)])
        ));
    }
    if person.memberships.is_empty() {
        body.push_str(&format!(
            "<p>{}</p>",
            e("manage-none", &[("who", &who_text)])
        ));
    }
    let action = format!("/manage/{}", escape(token));
    let key_expires =
        herald_types::unix_ms_now() / 1000 + herald_archive::web::MEMBER_KEY_DAYS * 86_400;
    for ((m, archive), list_lang) in person.memberships.iter().zip(archives).zip(&list_langs) {
        let list = escape(&m.list);
        let archive_link = match (archive, Address::parse(&m.list)) {
            (Some(herald_archive::Privacy::Public), _) => format!(
                "<p><a href=\"/archive/{}/\">{}</a></p>",
                herald_archive::stage::url_component(&m.list.to_lowercase()),
                e("manage-archive", &[])
            ),
            (Some(herald_archive::Privacy::Members), Ok(l)) => format!(
                "<p><a href=\"/archive/{}/?key={}\">{}</a> {}</p>",
                herald_archive::stage::url_component(&m.list.to_lowercase()),
                herald_types::token::archive_token(&s.secret, &l, who, key_expires),
                e("manage-archive", &[]),
                e(
                    "manage-archive-members",
                    &[("days", &herald_archive::web::MEMBER_KEY_DAYS.to_string())]
                ),
            ),
            _ => String::new(),
        };
        let name = escape(m.display_name.as_deref().unwrap_or(""));
        let options: String = DeliveryMode::ALL
            .iter()
            .map(|d| {
                let word = d.as_str();
                let sel = if word == m.delivery { " selected" } else { "" };
                format!(
                    "<option value=\"{word}\"{sel}>{}</option>",
                    e(&format!("delivery-{word}"), &[])
                )
            })
            .collect();
        let list_lang_name = herald_i18n::LANGUAGES
            .iter()
            .find(|(c, _)| c == list_lang)
            .map_or(list_lang.as_str(), |(_, n)| n);
        let mut languages = format!(
            "<option value=\"\"{}>{}</option>",
            if m.language.is_none() {
                " selected"
            } else {
                ""
            },
            e("manage-language-list", &[("name", list_lang_name)])
        );
        for (code, own_name) in herald_i18n::LANGUAGES {
            let sel = if m.language.as_deref() == Some(*code) {
                " selected"
            } else {
                ""
            };
            languages.push_str(&format!(
                "<option value=\"{code}\" lang=\"{code}\"{sel}>{}</option>",
                escape(own_name)
            ));
        }
        let state = match &m.disabled_reason {
            None => e("manage-receiving", &[]),
            Some(r) => e("manage-disabled", &[("reason", r)]),
        };
        body.push_str(&format!(
            "<section><h2>{list}</h2><p>{state}</p>{archive_link}\
             <form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"list\" value=\"{list}\">\
             <p><label for=\"name-{id}\">{name_label}</label> <input id=\"name-{id}\" name=\"name\" value=\"{name}\" size=\"30\"> \
             <label for=\"delivery-{id}\">{delivery_label}</label> <select id=\"delivery-{id}\" name=\"delivery\">{options}</select> \
             <label for=\"language-{id}\">{language_label}</label> <select id=\"language-{id}\" name=\"language\">{languages}</select> \
             <button type=\"submit\" name=\"action\" value=\"save\">{save}</button></p></form>\
             <form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"list\" value=\"{list}\">\
             <p><button type=\"submit\" name=\"action\" value=\"unsubscribe\">{unsubscribe}</button></p></form></section>",
            id = m.member_id,
            name_label = e("manage-name-label", &[]),
            delivery_label = e("manage-delivery-label", &[]),
            language_label = e("manage-language-label", &[]),
            save = e("manage-save", &[]),
            unsubscribe = e("manage-unsubscribe", &[("list", &m.list)]),
        ));
    }
    if !person.memberships.is_empty() {
        // The archive over IMAP: members-only archives open with this
        // password (derived, never stored; see `herald_types::token::imap_password`).
        let password = herald_types::token::imap_password(&s.secret, who);
        body.push_str(&format!(
            "<p>{} {} <code>{}</code>, {} <code id=\"imap-password\">{password}</code>.</p>",
            e("manage-imap", &[]),
            e("manage-imap-user", &[]),
            escape(&who_text),
            e("manage-imap-password", &[]),
        ));
    }
    body.push_str(&format!(
        "<p><a href=\"{action}/data\">{}</a> (JSON).</p>",
        e("manage-download", &[])
    ));
    Ok(page_in(
        w.lang,
        &w.text("manage-page-title", &[("who", &who_text)]),
        &body,
    ))
}

/// What was just done, shown on top of the page: a catalogue message and the list it names.
#[derive(Debug, Default)]
struct Note(Option<(&'static str, String)>);

/// `GET /manage/<token>`.
pub async fn show(State(s): St, headers: HeaderMap, Path(token): Path<String>) -> Response {
    let Some(who) = opened(&s, &token) else {
        return invalid_link(&browser_words(&headers));
    };
    match subscriptions(&s, &headers, &token, &who, Note::default()).await {
        Ok(html) => Html(html).into_response(),
        Err(e) => e.into_response(),
    }
}

/// What the page's forms send.
#[derive(Debug, serde::Deserialize)]
pub struct ManageForm {
    pub list: String,
    pub action: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub delivery: Option<String>,
    /// A shipped language code, or empty for the list's.
    #[serde(default)]
    pub language: Option<String>,
}

/// `POST /manage/<token>`: save a name and delivery mode, or unsubscribe.
pub async fn change(
    State(s): St,
    headers: HeaderMap,
    Path(token): Path<String>,
    Form(f): Form<ManageForm>,
) -> Response {
    let Some(who) = opened(&s, &token) else {
        return invalid_link(&browser_words(&headers));
    };
    match apply(&s, &who, f).await {
        Ok(note) => match subscriptions(&s, &headers, &token, &who, note).await {
            Ok(html) => Html(html).into_response(),
            Err(e) => e.into_response(),
        },
        Err(e) => e.into_response(),
    }
}

async fn apply(s: &ApiState, who: &Address, f: ManageForm) -> Result<Note, ApiError> {
    let list_address =
        Address::parse(&f.list).map_err(|e| ApiError::BadRequest(format!("list: {e}")))?;
    let dir = s.directory.clone();
    let la = list_address.clone();
    let list = tokio::task::spawn_blocking(move || dir.list_by_address(&la))
        .await??
        .ok_or_else(|| ApiError::NotFound(format!("no list {list_address}")))?;
    let m = Membership::new(&s.directory);
    let w = who.clone();
    match f.action.as_str() {
        "unsubscribe" => {
            let removed =
                tokio::task::spawn_blocking(move || m.unsubscribe(list.id, &w, Door::ManagePage))
                    .await??;
            let id = if removed {
                "manage-unsubscribed"
            } else {
                "manage-not-on"
            };
            Ok(Note(Some((id, list.address.to_string()))))
        }
        "save" => {
            let mode = match f.delivery.as_deref() {
                None => None,
                Some(d) => Some(DeliveryMode::parse(d).ok_or_else(|| {
                    ApiError::BadRequest(format!("delivery: not a delivery mode: {d}"))
                })?),
            };
            // An empty name clears it; an empty language is the list's. The language is
            // written first: a code that is not shipped is refused before anything changes.
            let change = Change {
                language: f.language.map(|l| {
                    let l = l.trim();
                    (!l.is_empty()).then(|| l.to_string())
                }),
                name: Some(
                    f.name
                        .map(|n| n.trim().to_string())
                        .filter(|n| !n.is_empty()),
                ),
                delivery: mode,
                ..Change::default()
            };
            let found = tokio::task::spawn_blocking(move || {
                m.change(list.id, &w, &change, Door::ManagePage)
            })
            .await??;
            if !found {
                return Err(ApiError::NotFound(format!("you are not on {list_address}")));
            }
            Ok(Note(Some(("manage-saved", list_address.to_string()))))
        }
        other => Err(ApiError::BadRequest(format!("unknown action {other}"))),
    }
}

/// `GET /manage/<token>/data`: the self-service download (GDPR article 15).
pub async fn data(State(s): St, headers: HeaderMap, Path(token): Path<String>) -> Response {
    let Some(who) = opened(&s, &token) else {
        return invalid_link(&browser_words(&headers));
    };
    let dir = s.directory.clone();
    match tokio::task::spawn_blocking(move || dir.person(&who)).await {
        Ok(Ok(record)) => Json(record).into_response(),
        Ok(Err(e)) => ApiError::from(e).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}
