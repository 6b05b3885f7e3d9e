//! The archive's HTML pages: the index of public archives, a list's months, a month, a
//! thread, search results and one message. Each reads the store once through
//! [`super::with_db`] (which decides who may see the list) and writes the page with the
//! helpers in [`super::html`].
//!
//! SECURITY: everything shown comes from untrusted mail and goes through [`esc`]; a message's
//! HTML is never rendered, only mail-parser's text of it (see the module above).

use super::html::{count, date, esc, listing, page, search_form, shown, Next, Pager};
use super::query::PageQuery;
use super::{not_found, with_db, Reader, WebArchive, PAGE_ROWS};
use crate::stage::url_component;
use crate::store::{Privacy, Scope};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mail_parser::MimeHeaders;
use std::fmt::Write as _;
use std::sync::Arc;

pub(super) async fn index(State(web): State<Arc<WebArchive>>, reader: Reader) -> Response {
    let (lists, pw) = match with_db(web, &reader, None, |db| db.lists()).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    let w = pw.words();
    let mut body = String::from("<ul>");
    for l in lists.iter().filter(|l| l.privacy == Privacy::Public) {
        let _ = write!(
            body,
            "<li><a href=\"/archive/{}/\">{}</a> ({})</li>",
            url_component(&l.list),
            esc(&l.list),
            esc(&count(&w, l.messages))
        );
    }
    body.push_str("</ul>");
    page(&w, &w.text("archive-index-title", &[]), &body).into_response()
}

pub(super) async fn months(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path(list): Path<String>,
) -> Response {
    let l = list.to_lowercase();
    let (ms, pw) = match with_db(web, &reader, Some(l.clone()), move |db| db.months(&l)).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let w = pw.words();
    let mut body = search_form(&w, &list, &PageQuery::default());
    let _ = write!(
        body,
        "<p><a href=\"atom.xml\">{}</a></p>",
        esc(&w.text("archive-feed", &[]))
    );
    body.push_str("<ul>");
    for m in ms {
        let _ = write!(
            body,
            "<li><a href=\"{:04}/{:02}/\">{:04}-{:02}</a> ({})</li>",
            m.year,
            m.month,
            m.year,
            m.month,
            esc(&count(&w, m.count))
        );
    }
    body.push_str("</ul>");
    page(&w, &list, &body).into_response()
}

pub(super) async fn month(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path((list, year, mon)): Path<(String, i32, u8)>,
    Query(q): Query<PageQuery>,
) -> Response {
    let l = list.to_lowercase();
    let after = q.after_key();
    let scope = Scope::Month { year, month: mon };
    let ((rows, show), pw) = match with_db(web, &reader, Some(l.clone()), move |db| {
        Ok((
            db.scope_summaries(&l, scope, after, PAGE_ROWS)?,
            db.shows_addresses(&l)?,
        ))
    })
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    let w = pw.words();
    let mut body = format!(
        "<p><a href=\"mbox\" download>{}</a></p>",
        esc(&w.text("archive-month-mbox", &[]))
    );
    body.push_str(&listing(&w, &list, &rows, Next::After, show));
    page(&w, &format!("{list} {year:04}-{mon:02}"), &body).into_response()
}

pub(super) async fn thread(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path((list, id)): Path<(String, i64)>,
    Query(q): Query<PageQuery>,
) -> Response {
    let l = list.to_lowercase();
    let after = q.after_key();
    let first_page = q.after.is_empty();
    let ((rows, show), pw) = match with_db(web, &reader, Some(l.clone()), move |db| {
        Ok((
            db.scope_summaries(&l, Scope::Thread(id), after, PAGE_ROWS)?,
            db.shows_addresses(&l)?,
        ))
    })
    .await
    {
        Ok(((r, show), pw)) if !r.is_empty() || !first_page => ((r, show), pw),
        Ok((_, pw)) => return not_found(&pw),
        Err(r) => return r,
    };
    let w = pw.words();
    let title = rows.first().map(|m| m.subject.clone()).unwrap_or_default();
    let mut body = format!(
        "<p><a href=\"{id}/mbox\" download>{}</a></p>",
        esc(&w.text("archive-thread-mbox", &[]))
    );
    body.push_str(&listing(&w, &list, &rows, Next::After, show));
    page(&w, &title, &body).into_response()
}

pub(super) async fn search(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path(list): Path<String>,
    Query(q): Query<PageQuery>,
) -> Response {
    // The filters are checked first, but a bad one is answered only once the reader may see
    // the list (and in its words): a private list's search answers 404 like its other pages.
    let filters = q.filters();
    let wanted = filters.as_ref().ok().cloned();
    let l = list.to_lowercase();
    let (p, text, order) = (q.page, q.q.clone(), q.sort.0);
    let (found, pw) = match with_db(web, &reader, Some(l.clone()), move |db| match wanted {
        Some(f) => Ok(Some((
            db.search_page(&l, &text, &f, order, PAGE_ROWS, p.saturating_mul(PAGE_ROWS))?,
            db.shows_addresses(&l)?,
        ))),
        None => Ok(None),
    })
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    let w = pw.words();
    let title = w.text("archive-search-title", &[("list", &list)]);
    let (Ok(_), Some((found, show))) = (&filters, found) else {
        let why = match &filters {
            Err(bad) => bad.say(&w),
            Ok(_) => String::new(),
        };
        let body = format!(
            "{}<p role=\"alert\">{}</p>",
            search_form(&w, &list, &q),
            esc(&why)
        );
        return (StatusCode::BAD_REQUEST, page(&w, &title, &body)).into_response();
    };
    let mut body = search_form(&w, &list, &q);
    let _ = write!(
        body,
        "<p>{}</p>",
        esc(&w.text(
            "archive-results",
            &[("count", &found.total.to_string()), ("query", &q.q)]
        ))
    );
    let extra = format!(
        "&q={}&from={}&since={}&until={}&sort={}",
        url_component(&q.q),
        url_component(&q.from),
        url_component(&q.since),
        url_component(&q.until),
        q.sort.as_str()
    );
    let pager = Pager {
        page: p,
        pages: found.total.div_ceil(PAGE_ROWS as u64),
        extra: &extra,
    };
    body.push_str(&listing(&w, &list, &found.rows, Next::Pages(&pager), show));
    page(&w, &title, &body).into_response()
}

pub(super) async fn message(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path((list, mid)): Path<(String, String)>,
) -> Response {
    let l = list.to_lowercase();
    let ((m, show), pw) = match with_db(web, &reader, Some(l.clone()), move |db| {
        Ok((db.message(&l, &mid)?, db.shows_addresses(&l)?))
    })
    .await
    {
        Ok(((Some(m), show), pw)) => ((m, show), pw),
        Ok(((None, _), pw)) => return not_found(&pw),
        Err(r) => return r,
    };
    let w = pw.words();
    let parsed = mail_parser::MessageParser::default().parse(&m.raw);
    let text = parsed
        .as_ref()
        .and_then(|p| p.body_text(0).map(|t| t.into_owned()))
        .unwrap_or_default();
    let unnamed = w.text("archive-unnamed", &[]);
    let attachments: Vec<(String, usize)> = parsed
        .as_ref()
        .map(|p| {
            p.attachments()
                .map(|a| {
                    (
                        a.attachment_name().unwrap_or(&unnamed).to_string(),
                        a.contents().len(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let s = &m.summary;
    let mid_enc = url_component(&s.message_id);
    let mut body = format!(
        "<p>{}: {}<br>{}: {}<br><a href=\"../thread/{}\">{}</a> · <a href=\"{}/raw\">{}</a></p><pre>{}</pre>",
        esc(&w.text("archive-from", &[])),
        esc(&shown(&s.from, show)),
        esc(&w.text("archive-date", &[])),
        esc(&date(s.date_ms)),
        s.thread_id,
        esc(&w.text("archive-thread", &[])),
        mid_enc,
        esc(&w.text("archive-raw", &[])),
        esc(&shown(&text, show))
    );
    if !attachments.is_empty() {
        let _ = write!(
            body,
            "<h2>{}</h2><ul>",
            esc(&w.text("archive-attachments", &[]))
        );
        for (n, (name, size)) in attachments.iter().enumerate() {
            let _ = write!(
                body,
                "<li><a href=\"{mid_enc}/attachment/{n}\" download>{}</a> ({})</li>",
                esc(name),
                esc(&w.text("archive-bytes", &[("count", &size.to_string())]))
            );
        }
        body.push_str("</ul>");
    }
    let title = match s.subject.as_str() {
        "" => w.text("archive-no-subject", &[]),
        subject => subject.to_string(),
    };
    page(&w, &title, &body).into_response()
}
