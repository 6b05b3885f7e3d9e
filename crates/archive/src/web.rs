//! The web archive: server-rendered HTML pages (no JavaScript) over the store, mounted on the
//! HTTP API's router. Only lists whose privacy is `public` are served; every other list's
//! pages answer 404 to everybody (members' signed links and administrators' sessions come with
//! the web administration issue; until then the CLI reads private archives).
//!
//! Pages read only what they show: every listing is a paged query (`?page=`, 100 rows).
//!
//! SECURITY: everything shown comes from untrusted mail. Text is HTML-escaped by [`esc`]; HTML
//! parts are never rendered — the page shows mail-parser's text of the message (HTML converted
//! to plain text), so no markup, script or remote image from a post reaches the browser. `raw`
//! is served as `text/plain` with `nosniff`. A hand-written escaper rather than ammonia because
//! nothing here keeps any markup: escaping five characters is the whole job. Message-IDs in
//! URLs are percent-encoded ([`crate::stage::url_component`]) and only used as SQL parameters.

use crate::stage::url_component;
use crate::store::{Archive, MessageSummary, Privacy};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use mail_parser::MimeHeaders;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

const PAGE_ROWS: usize = 100;

/// The store as the pages read it. A std `Mutex` around one read connection: handlers take
/// it inside `spawn_blocking` and never across an `.await`.
pub struct WebArchive {
    db: Mutex<Archive>,
}

impl WebArchive {
    pub fn new(archive: Archive) -> Self {
        WebArchive {
            db: Mutex::new(archive),
        }
    }
}

/// The archive's routes, for any outer router state.
pub fn router<S: Clone + Send + Sync + 'static>(web: Arc<WebArchive>) -> Router<S> {
    Router::new()
        .route("/archive/", get(index))
        .route("/archive/{list}/", get(months))
        .route("/archive/{list}/{year}/{month}/", get(month))
        .route("/archive/{list}/thread/{id}", get(thread))
        .route("/archive/{list}/msg/{mid}", get(message))
        .route("/archive/{list}/msg/{mid}/raw", get(raw))
        .route("/archive/{list}/search", get(search))
        .with_state(web)
}

#[derive(serde::Deserialize, Default)]
struct PageQuery {
    #[serde(default)]
    page: usize,
    #[serde(default)]
    q: String,
}

/// Runs `f` on the store off the async threads; a public list only when `list` is given.
async fn with_db<T: Send + 'static>(
    web: Arc<WebArchive>,
    list: Option<String>,
    f: impl FnOnce(&Archive) -> Result<T, crate::ArchiveError> + Send + 'static,
) -> Result<T, Response> {
    let r = tokio::task::spawn_blocking(move || {
        let db = web.db.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(list) = list {
            if db.privacy(&list)? != Privacy::Public {
                return Ok(None);
            }
        }
        f(&db).map(Some)
    })
    .await;
    match r {
        Ok(Ok(Some(v))) => Ok(v),
        Ok(Ok(None)) => Err(not_found()),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "archive page");
            Err((StatusCode::INTERNAL_SERVER_ERROR, "archive unavailable\n").into_response())
        }
        Err(_) => Err((StatusCode::INTERNAL_SERVER_ERROR, "archive unavailable\n").into_response()),
    }
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        page("Not found", "<p>No such public archive or message.</p>"),
    )
        .into_response()
}

async fn index(State(web): State<Arc<WebArchive>>) -> Response {
    let lists = match with_db(web, None, |db| db.lists()).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    let mut body = String::from("<ul>");
    for l in lists.iter().filter(|l| l.privacy == Privacy::Public) {
        let _ = write!(
            body,
            "<li><a href=\"/archive/{}/\">{}</a> ({} messages)</li>",
            url_component(&l.list),
            esc(&l.list),
            l.messages
        );
    }
    body.push_str("</ul>");
    page("Archives", &body).into_response()
}

async fn months(State(web): State<Arc<WebArchive>>, Path(list): Path<String>) -> Response {
    let l = list.to_lowercase();
    let ms = match with_db(web, Some(l.clone()), move |db| db.months(&l)).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let mut body = search_form(&list);
    body.push_str("<ul>");
    for m in ms {
        let _ = write!(
            body,
            "<li><a href=\"{:04}/{:02}/\">{:04}-{:02}</a> ({} messages)</li>",
            m.year, m.month, m.year, m.month, m.count
        );
    }
    body.push_str("</ul>");
    page(&list, &body).into_response()
}

async fn month(
    State(web): State<Arc<WebArchive>>,
    Path((list, year, mon)): Path<(String, i32, u8)>,
    Query(q): Query<PageQuery>,
) -> Response {
    let l = list.to_lowercase();
    let p = q.page;
    let rows = match with_db(web, Some(l.clone()), move |db| {
        db.month_page(&l, year, mon, PAGE_ROWS, p * PAGE_ROWS)
    })
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    let body = listing(&list, &rows, p, "");
    page(&format!("{list} {year:04}-{mon:02}"), &body).into_response()
}

async fn thread(
    State(web): State<Arc<WebArchive>>,
    Path((list, id)): Path<(String, i64)>,
    Query(q): Query<PageQuery>,
) -> Response {
    let l = list.to_lowercase();
    let p = q.page;
    let rows = match with_db(web, Some(l.clone()), move |db| {
        db.thread(&l, id, PAGE_ROWS, p * PAGE_ROWS)
    })
    .await
    {
        Ok(r) if !r.is_empty() || p > 0 => r,
        Ok(_) => return not_found(),
        Err(r) => return r,
    };
    let title = rows.first().map(|m| m.subject.clone()).unwrap_or_default();
    page(&title, &listing(&list, &rows, p, "")).into_response()
}

async fn search(
    State(web): State<Arc<WebArchive>>,
    Path(list): Path<String>,
    Query(q): Query<PageQuery>,
) -> Response {
    let l = list.to_lowercase();
    let (p, text) = (q.page, q.q.clone());
    let rows = match with_db(web, Some(l.clone()), move |db| {
        db.search(&l, &text, PAGE_ROWS, p * PAGE_ROWS)
    })
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    let mut body = search_form(&list);
    let _ = write!(
        body,
        "<p>{} results for <q>{}</q></p>",
        rows.len(),
        esc(&q.q)
    );
    body.push_str(&listing(
        &list,
        &rows,
        p,
        &format!("&q={}", url_component(&q.q)),
    ));
    page(&format!("Search {list}"), &body).into_response()
}

async fn message(
    State(web): State<Arc<WebArchive>>,
    Path((list, mid)): Path<(String, String)>,
) -> Response {
    let l = list.to_lowercase();
    let m = match with_db(web, Some(l.clone()), move |db| db.message(&l, &mid)).await {
        Ok(Some(m)) => m,
        Ok(None) => return not_found(),
        Err(r) => return r,
    };
    let parsed = mail_parser::MessageParser::default().parse(&m.raw);
    let text = parsed
        .as_ref()
        .and_then(|p| p.body_text(0).map(|t| t.into_owned()))
        .unwrap_or_default();
    let attachments: Vec<String> = parsed
        .as_ref()
        .map(|p| {
            p.attachments()
                .map(|a| a.attachment_name().unwrap_or("(unnamed)").to_string())
                .collect()
        })
        .unwrap_or_default();
    let s = &m.summary;
    let mut body = format!(
        "<p>From: {}<br>Date: {}<br><a href=\"../thread/{}\">thread</a> · <a href=\"{}/raw\">raw</a></p><pre>{}</pre>",
        esc(&s.from),
        esc(&date(s.date_ms)),
        s.thread_id,
        url_component(&s.message_id),
        esc(&text)
    );
    if !attachments.is_empty() {
        body.push_str("<p>Attachments (in the raw message): ");
        body.push_str(
            &attachments
                .iter()
                .map(|a| esc(a))
                .collect::<Vec<_>>()
                .join(", "),
        );
        body.push_str("</p>");
    }
    page(&s.subject, &body).into_response()
}

async fn raw(
    State(web): State<Arc<WebArchive>>,
    Path((list, mid)): Path<(String, String)>,
) -> Response {
    let l = list.to_lowercase();
    match with_db(web, Some(l.clone()), move |db| db.message(&l, &mid)).await {
        Ok(Some(m)) => (
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            m.raw,
        )
            .into_response(),
        Ok(None) => not_found(),
        Err(r) => r,
    }
}

fn listing(list: &str, rows: &[MessageSummary], page_no: usize, extra: &str) -> String {
    let mut out =
        String::from("<table><tr><th>Date</th><th>From</th><th>Subject</th><th></th></tr>");
    for m in rows {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td><a href=\"/archive/{}/msg/{}\">{}</a></td><td><a href=\"/archive/{}/thread/{}\">thread</a></td></tr>",
            esc(&date(m.date_ms)),
            esc(&m.from),
            url_component(list),
            url_component(&m.message_id),
            esc(if m.subject.is_empty() { "(no subject)" } else { &m.subject }),
            url_component(list),
            m.thread_id
        );
    }
    out.push_str("</table>");
    if rows.len() == PAGE_ROWS {
        let _ = write!(
            out,
            "<p><a href=\"?page={}{extra}\">next page</a></p>",
            page_no + 1
        );
    }
    out
}

fn search_form(list: &str) -> String {
    format!(
        "<form action=\"/archive/{}/search\" method=\"get\"><input name=\"q\"> <button>Search</button></form>",
        url_component(list)
    )
}

fn date(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string()
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title></head><body><h1>{t}</h1>{body}</body></html>",
        t = esc(title)
    ))
}

/// HTML text and attribute escaping.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
