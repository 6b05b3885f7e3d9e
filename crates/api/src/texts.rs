//! `/api/v1/lists/<list>/texts`: a list's own wording of Herald's generated
//! mail and public pages. Each catalogue message is listed with the fields it may use and its
//! shipped text; an owner replaces it per language (`PUT`) or goes back to the shipped one
//! (`DELETE`). Owners of the list only (the route table in `access.rs`).
//!
//! SECURITY: the text is checked by `herald_i18n::overrides::check` in the directory before it
//! is stored (bounded, parsed, only the message's own fields); path segments are checked there
//! too (a message id that is not in the catalogue, a language not shipped: 422 naming it).

use crate::admin::{dir, find_list_pub};
use crate::extract::{Json, Path};
use crate::{ApiError, ApiState};
use axum::extract::State;
use axum::http::StatusCode;
use herald_api_types::{ListTextView, ListTexts, SetText, TextOverride};
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// Every message with the list's texts, as the web page and the CLI show them.
pub(crate) async fn texts_of(s: &ApiState, list: &str) -> Result<ListTexts, ApiError> {
    let list = find_list_pub(s, list).await?;
    let id = list.id;
    let stored = dir(s, move |d| d.list_texts(id)).await?;
    let lang = list.settings.language.clone();
    let messages = herald_i18n::overrides::messages()
        .iter()
        .map(|m| ListTextView {
            id: m.clone(),
            fields: herald_i18n::overrides::variables(m).to_vec(),
            shipped: herald_i18n::overrides::shipped_source(&lang, m).unwrap_or_default(),
            overrides: stored
                .iter()
                .filter(|t| &t.message_id == m)
                .map(|t| TextOverride {
                    language: t.language.clone(),
                    text: t.text.clone(),
                    updated_at_ms: t.updated_at_ms,
                })
                .collect(),
        })
        .collect();
    Ok(ListTexts {
        language: lang,
        languages: herald_i18n::CODES.iter().map(|c| c.to_string()).collect(),
        messages,
    })
}

#[utoipa::path(
    get,
    path = "/lists/{list}/texts",
    tag = "lists",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    responses((status = 200, description = "Every message an owner may reword, with its fields, its shipped text in the list's language and the list's own texts", body = ListTexts), crate::schema::Problems)
)]
pub async fn list_texts(
    State(s): St,
    Path(list): Path<String>,
) -> Result<Json<ListTexts>, ApiError> {
    Ok(Json(texts_of(&s, &list).await?))
}

/// Stores the list's text of `message` in `language` (the web page's form calls this too).
pub(crate) async fn store(
    s: &ApiState,
    list: &str,
    message: String,
    language: String,
    text: String,
) -> Result<(), ApiError> {
    let list = find_list_pub(s, list).await?;
    let id = list.id;
    let (m, l) = (message.clone(), language.clone());
    dir(s, move |d| d.set_list_text(id, &m, &l, &text)).await?;
    tracing::info!(list = %list.address, %message, %language, "list text set");
    Ok(())
}

#[utoipa::path(
    put,
    path = "/lists/{list}/texts/{message}/{language}",
    tag = "lists",
    params(
        ("list" = String, Path, description = "The list's posting address", format = Email),
        ("message" = String, Path, description = "The catalogue message id (`welcome-text`)"),
        ("language" = String, Path, description = "A shipped language code (`en`, `de`)")
    ),
    request_body = SetText,
    responses((status = 204, description = "Stored: mail and pages of the list use it from now on"), crate::schema::Problems)
)]
pub async fn set_list_text(
    State(s): St,
    Path((list, message, language)): Path<(String, String, String)>,
    Json(body): Json<SetText>,
) -> Result<StatusCode, ApiError> {
    store(&s, &list, message, language, body.text).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes the list's text of `message` in `language`; false if there was none.
pub(crate) async fn remove(
    s: &ApiState,
    list: &str,
    message: String,
    language: String,
) -> Result<bool, ApiError> {
    let list = find_list_pub(s, list).await?;
    let id = list.id;
    let (m, l) = (message.clone(), language.clone());
    let removed = dir(s, move |d| d.remove_list_text(id, &m, &l)).await?;
    if removed {
        tracing::info!(list = %list.address, %message, %language, "list text removed");
    }
    Ok(removed)
}

#[utoipa::path(
    delete,
    path = "/lists/{list}/texts/{message}/{language}",
    tag = "lists",
    params(
        ("list" = String, Path, description = "The list's posting address", format = Email),
        ("message" = String, Path, description = "The catalogue message id"),
        ("language" = String, Path, description = "A shipped language code")
    ),
    responses((status = 204, description = "Removed: the shipped text is used again"), crate::schema::Problems)
)]
pub async fn remove_list_text(
    State(s): St,
    Path((list, message, language)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    match remove(&s, &list, message.clone(), language.clone()).await? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::NotFound(format!(
            "the list has no text of its own for {message} in {language}"
        ))),
    }
}
