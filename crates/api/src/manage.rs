//! A member's own subscriptions page (issue 15 items 3 and 4): `GET /manage` asks for an address
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

use crate::subscribe::{MAX_FORM_SECS, MIN_FORM_SECS};
use crate::unsubscribe::{escape, page};
use crate::{ApiError, ApiState};
use axum::extract::{ConnectInfo, Form, Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
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

fn ask_form(s: &ApiState, error: Option<&str>) -> String {
    let token = herald_types::token::form_token(&s.secret, &page_list(), now_secs());
    let error = error.map_or(String::new(), |e| {
        format!(
            "<p id=\"email-error\" role=\"alert\"><strong>{}</strong></p>",
            escape(e)
        )
    });
    page(
        "Your subscriptions",
        &format!(
            "<form method=\"post\" action=\"/manage\">\
             <p><label for=\"email\">Your e-mail address</label><br>\
             <input id=\"email\" name=\"email\" type=\"email\" required autocomplete=\"email\" size=\"40\"></p>{error}\
             <div style=\"position:absolute;left:-10000px\" aria-hidden=\"true\">\
             <label for=\"website\">Leave this empty</label>\
             <input id=\"website\" name=\"website\" type=\"text\" tabindex=\"-1\" autocomplete=\"off\"></div>\
             <input type=\"hidden\" name=\"t\" value=\"{token}\">\
             <p><button type=\"submit\">Send me a link</button></p></form>"
        ),
    )
}

/// `GET /manage`.
pub async fn ask(State(s): St) -> Html<String> {
    Html(ask_form(&s, None))
}

/// `POST /manage`: mails the link (the answer never says whether the address is a member).
pub async fn send_link(
    State(s): St,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Form(f): Form<crate::subscribe::SubscribeForm>,
) -> Response {
    let Ok(address) = Address::parse(f.email.trim()) else {
        return (
            StatusCode::BAD_REQUEST,
            Html(ask_form(
                &s,
                Some("This is not an e-mail address we can write to."),
            )),
        )
            .into_response();
    };
    let age = herald_types::token::form_token_issued(&s.secret, &page_list(), &f.t)
        .map(|at| now_secs().saturating_sub(at));
    if age.is_none_or(|a| a > MAX_FORM_SECS) {
        return (
            StatusCode::BAD_REQUEST,
            Html(ask_form(
                &s,
                Some("This form has expired. Please send it again."),
            )),
        )
            .into_response();
    }
    let client = peer.ip().to_canonical();
    if f.website.is_empty() && age.is_some_and(|a| a >= MIN_FORM_SECS) {
        if let Err(e) = s.lists.manage_link(address.clone(), client).await {
            return e.into_response();
        }
    } else {
        tracing::info!(%client, "subscriptions form: looks like a bot; nothing sent");
    }
    Html(page(
        "Check your mailbox",
        &format!(
            "<p>If {} is subscribed to a list here, a message with a link to its subscriptions \
             is on its way.</p>",
            escape(&address.to_string())
        ),
    ))
    .into_response()
}

/// The address a token opens.
fn opened(s: &ApiState, token: &str) -> Option<Address> {
    herald_types::token::verify_manage(&s.secret, token, now_secs())
}

/// The page for a link that is not valid (forged, expired).
fn invalid_link() -> Response {
    (
        StatusCode::FORBIDDEN,
        Html(page(
            "Link not valid",
            "<p>This link is not valid or has expired. <a href=\"/manage\">Ask for a new one.</a></p>",
        )),
    )
        .into_response()
}

/// The subscriptions page of `who`, with `note` (what was just done) on top.
async fn subscriptions(
    s: &ApiState,
    token: &str,
    who: &Address,
    note: &str,
) -> Result<String, ApiError> {
    let dir = s.directory.clone();
    let w = who.clone();
    let web = s.archive.clone();
    let (person, archives) = tokio::task::spawn_blocking(move || {
        let person = dir.person(&w)?;
        // The archive of each list, as this member may open it: public (anyone), members
        // (with a key signed for this member), or nothing to link.
        let archives: Vec<Option<herald_archive::Privacy>> = person
            .memberships
            .iter()
            .map(|m| web.as_ref().and_then(|a| a.privacy(&m.list).ok()))
            .collect();
        Ok::<_, herald_directory::DirectoryError>((person, archives))
    })
    .await??;
    let mut body = String::new();
    if !note.is_empty() {
        body.push_str(&format!(
            "<p role=\"status\"><strong>{}</strong></p>",
            escape(note)
        ));
    }
    if person.memberships.is_empty() {
        body.push_str(&format!(
            "<p>{} is not subscribed to any list here.</p>",
            escape(&who.to_string())
        ));
    }
    let action = format!("/manage/{}", escape(token));
    let key_expires =
        herald_types::unix_ms_now() / 1000 + herald_archive::web::MEMBER_KEY_DAYS * 86_400;
    for (m, archive) in person.memberships.iter().zip(archives) {
        let list = escape(&m.list);
        let archive_link = match (archive, Address::parse(&m.list)) {
            (Some(herald_archive::Privacy::Public), _) => format!(
                "<p><a href=\"/archive/{}/\">The list's archive</a></p>",
                herald_archive::stage::url_component(&m.list.to_lowercase())
            ),
            (Some(herald_archive::Privacy::Members), Ok(l)) => format!(
                "<p><a href=\"/archive/{}/?key={}\">The list's archive</a> (for members: this \
                 link is yours, valid {} days)</p>",
                herald_archive::stage::url_component(&m.list.to_lowercase()),
                herald_types::token::archive_token(&s.secret, &l, who, key_expires),
                herald_archive::web::MEMBER_KEY_DAYS
            ),
            _ => String::new(),
        };
        let name = escape(m.display_name.as_deref().unwrap_or(""));
        let options: String = DeliveryMode::ALL
            .iter()
            .map(|d| {
                let w = d.as_str();
                let sel = if w == m.delivery { " selected" } else { "" };
                format!("<option value=\"{w}\"{sel}>{}</option>", delivery_label(*d))
            })
            .collect();
        let state = match &m.disabled_reason {
            None => "receiving mail".to_string(),
            Some(r) => format!("disabled: {}", escape(r)),
        };
        body.push_str(&format!(
            "<section><h2>{list}</h2><p>{state}</p>{archive_link}\
             <form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"list\" value=\"{list}\">\
             <p><label for=\"name-{id}\">Your name</label> <input id=\"name-{id}\" name=\"name\" value=\"{name}\" size=\"30\"> \
             <label for=\"delivery-{id}\">Delivery</label> <select id=\"delivery-{id}\" name=\"delivery\">{options}</select> \
             <button type=\"submit\" name=\"action\" value=\"save\">Save</button></p></form>\
             <form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"list\" value=\"{list}\">\
             <p><button type=\"submit\" name=\"action\" value=\"unsubscribe\">Unsubscribe from {list}</button></p></form></section>",
            id = m.member_id,
        ));
    }
    if !person.memberships.is_empty() {
        // The archive over IMAP (issue 14 item 5): members-only archives open with this
        // password (derived, never stored; see `herald_types::token::imap_password`).
        let password = herald_types::token::imap_password(&s.secret, who);
        body.push_str(&format!(
            "<p>Read the archives of your lists with a mail program (IMAP): user name \
             <code>{}</code>, password <code id=\"imap-password\">{password}</code>.</p>",
            escape(&who.to_string())
        ));
    }
    body.push_str(&format!(
        "<p><a href=\"{action}/data\">Download everything this server holds about you</a> (JSON).</p>"
    ));
    Ok(page(&format!("Subscriptions of {who}"), &body))
}

fn delivery_label(d: DeliveryMode) -> &'static str {
    match d {
        DeliveryMode::Regular => "each post",
        DeliveryMode::DigestMime => "digest (MIME)",
        DeliveryMode::DigestPlain => "digest (plain text)",
        DeliveryMode::Nomail => "no mail",
    }
}

/// `GET /manage/<token>`.
pub async fn show(State(s): St, Path(token): Path<String>) -> Response {
    let Some(who) = opened(&s, &token) else {
        return invalid_link();
    };
    match subscriptions(&s, &token, &who, "").await {
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
}

/// `POST /manage/<token>`: save a name and delivery mode, or unsubscribe.
pub async fn change(
    State(s): St,
    Path(token): Path<String>,
    Form(f): Form<ManageForm>,
) -> Response {
    let Some(who) = opened(&s, &token) else {
        return invalid_link();
    };
    match apply(&s, &who, f).await {
        Ok(note) => match subscriptions(&s, &token, &who, &note).await {
            Ok(html) => Html(html).into_response(),
            Err(e) => e.into_response(),
        },
        Err(e) => e.into_response(),
    }
}

async fn apply(s: &ApiState, who: &Address, f: ManageForm) -> Result<String, ApiError> {
    let list_address =
        Address::parse(&f.list).map_err(|e| ApiError::BadRequest(format!("list: {e}")))?;
    let dir = s.directory.clone();
    let la = list_address.clone();
    let list = tokio::task::spawn_blocking(move || dir.list_by_address(&la))
        .await??
        .ok_or_else(|| ApiError::NotFound(format!("no list {list_address}")))?;
    let dir = s.directory.clone();
    let w = who.clone();
    match f.action.as_str() {
        "unsubscribe" => {
            let removed =
                tokio::task::spawn_blocking(move || dir.remove_member(list.id, &w)).await??;
            tracing::info!(list = %list.address, "member unsubscribed on the subscriptions page");
            Ok(if removed {
                format!("You are unsubscribed from {}.", list.address)
            } else {
                format!("You were not on {}.", list.address)
            })
        }
        "save" => {
            let mode = match f.delivery.as_deref() {
                None => None,
                Some(d) => Some(DeliveryMode::parse(d).ok_or_else(|| {
                    ApiError::BadRequest(format!("delivery: not a delivery mode: {d}"))
                })?),
            };
            let name = f.name.map(|n| n.trim().to_string());
            let found = tokio::task::spawn_blocking(move || {
                let name = name.as_deref().filter(|n| !n.is_empty());
                let mut found = dir.set_display_name(list.id, &w, name)?;
                if let Some(m) = mode {
                    found &= dir.set_delivery(list.id, &w, m)?;
                }
                Ok::<_, herald_directory::DirectoryError>(found)
            })
            .await??;
            if !found {
                return Err(ApiError::NotFound(format!("you are not on {list_address}")));
            }
            Ok(format!("Saved your settings for {list_address}."))
        }
        other => Err(ApiError::BadRequest(format!("unknown action {other}"))),
    }
}

/// `GET /manage/<token>/data`: the self-service download (GDPR article 15).
pub async fn data(State(s): St, Path(token): Path<String>) -> Response {
    let Some(who) = opened(&s, &token) else {
        return invalid_link();
    };
    let dir = s.directory.clone();
    match tokio::task::spawn_blocking(move || dir.person(&who)).await {
        Ok(Ok(record)) => Json(record).into_response(),
        Ok(Err(e)) => ApiError::from(e).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}
