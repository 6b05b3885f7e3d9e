//! `/admin/lists/<list>/texts`: the list's own wording, through the same
//! functions as `/api/v1/lists/<list>/texts` (`crate::texts`). A refused text is shown again
//! with the directory's reason next to the field (422).

use super::{ctx, error_page, html, list_key, see, Done};
use crate::auth::Caller;
use crate::{ApiError, ApiState};
use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use herald_webadmin::texts::{text_href, text_page, texts_page};
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// `GET /admin/lists/<list>/texts`.
pub async fn index(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(list): Path<String>,
    Query(done): Query<Done>,
) -> Response {
    let key = match list_key(&list) {
        Ok(k) => k,
        Err(e) => return error_page(&caller, e),
    };
    match crate::texts::texts_of(&s, &list).await {
        Ok(t) => html(StatusCode::OK, texts_page(&ctx(&caller, &done), &key, &t)),
        Err(e) => error_page(&caller, e),
    }
}

/// The edit page of one message, with a refused draft and its error when there is one.
async fn edit(
    s: &ApiState,
    caller: &Caller,
    done: &Done,
    list: &str,
    message: &str,
    language: &str,
    draft: Option<(&str, &str)>,
) -> Response {
    let key = match list_key(list) {
        Ok(k) => k,
        Err(e) => return error_page(caller, e),
    };
    if !herald_i18n::is_shipped(language) {
        return error_page(
            caller,
            ApiError::NotFound(format!("{language:?} is not a language Herald ships")),
        );
    }
    let texts = match crate::texts::texts_of(s, list).await {
        Ok(t) => t,
        Err(e) => return error_page(caller, e),
    };
    let Some(m) = texts.messages.iter().find(|m| m.id == message) else {
        return error_page(
            caller,
            ApiError::NotFound(format!("no message {message:?}")),
        );
    };
    let status = if draft.is_some() {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    let page = text_page(
        &ctx(caller, done),
        &key,
        m,
        language,
        draft.map(|d| d.0),
        draft.map(|d| d.1),
    );
    html(status, page)
}

/// `GET /admin/lists/<list>/texts/<message>/<language>`.
pub async fn show(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path((list, message, language)): Path<(String, String, String)>,
    Query(done): Query<Done>,
) -> Response {
    edit(&s, &caller, &done, &list, &message, &language, None).await
}

#[derive(Debug, serde::Deserialize)]
pub struct TextForm {
    #[serde(default)]
    text: String,
}

/// `POST /admin/lists/<list>/texts/<message>/<language>`: save.
pub async fn save(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path((list, message, language)): Path<(String, String, String)>,
    Form(f): Form<TextForm>,
) -> Response {
    let key = match list_key(&list) {
        Ok(k) => k,
        Err(e) => return error_page(&caller, e),
    };
    match crate::texts::store(&s, &list, message.clone(), language.clone(), f.text.clone()).await {
        Ok(()) => see(format!(
            "{}?done=text-saved",
            text_href(&key, &message, &language)
        )),
        Err(ApiError::Invalid { reason, .. }) => {
            let done = Done::default();
            edit(
                &s,
                &caller,
                &done,
                &list,
                &message,
                &language,
                Some((&f.text, &reason)),
            )
            .await
        }
        Err(e) => error_page(&caller, e),
    }
}

/// `POST /admin/lists/<list>/texts/<message>/<language>/remove`: back to the shipped text.
pub async fn remove(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path((list, message, language)): Path<(String, String, String)>,
) -> Response {
    let key = match list_key(&list) {
        Ok(k) => k,
        Err(e) => return error_page(&caller, e),
    };
    match crate::texts::remove(&s, &list, message.clone(), language.clone()).await {
        Ok(_) => see(format!(
            "{}?done=text-removed",
            text_href(&key, &message, &language)
        )),
        Err(e) => error_page(&caller, e),
    }
}
