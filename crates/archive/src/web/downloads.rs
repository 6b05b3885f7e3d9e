//! What the archive serves as files rather than pages: a message as archived (`raw`), an
//! attachment, and the mbox of a month or a thread. Apart from the pages because each
//! answers with bytes from the post and its own headers, and the mbox streams from a thread
//! of its own.
//!
//! SECURITY: the bytes are untrusted mail and are never served as something a browser runs:
//! `raw` is `text/plain` with `nosniff`; an attachment is always a download
//! (`application/octet-stream`, `Content-Disposition: attachment`, a sandbox CSP) under a
//! name cut to a safe character set; an mbox is `application/mbox` as a download.

use super::{not_found, with_db, Reader, WebArchive};
use crate::store::{Scope, StoredMessage};
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use mail_parser::MimeHeaders;
use std::sync::Arc;

pub(super) async fn raw(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path((list, mid)): Path<(String, String)>,
) -> Response {
    let l = list.to_lowercase();
    match with_db(web, &reader, Some(l.clone()), move |db| {
        db.message(&l, &mid)
    })
    .await
    {
        Ok((Some(m), _)) => (
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            m.raw,
        )
            .into_response(),
        Ok((None, pw)) => not_found(&pw),
        Err(r) => r,
    }
}

/// `…/msg/<id>/attachment/<n>`: the `n`th attachment's bytes, always as a download
/// (`application/octet-stream`, `Content-Disposition: attachment`, `nosniff`, and a sandbox
/// CSP in case a browser renders it anyway), so nothing from a post runs on this origin.
pub(super) async fn attachment(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path((list, mid, n)): Path<(String, String, usize)>,
) -> Response {
    let l = list.to_lowercase();
    let (m, pw) = match with_db(web, &reader, Some(l.clone()), move |db| {
        db.message(&l, &mid)
    })
    .await
    {
        Ok((Some(m), pw)) => (m, pw),
        Ok((None, pw)) => return not_found(&pw),
        Err(r) => return r,
    };
    let Some(parsed) = mail_parser::MessageParser::default().parse(&m.raw) else {
        return not_found(&pw);
    };
    let Some(a) = parsed.attachments().nth(n) else {
        return not_found(&pw);
    };
    // The name goes into a header: only a conservative set of characters survives.
    let name: String = a
        .attachment_name()
        .unwrap_or("attachment")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
            (header::CONTENT_SECURITY_POLICY, "sandbox".to_string()),
        ],
        a.contents().to_vec(),
    )
        .into_response()
}

/// Pages per mbox chunk: a page of messages is read under the store's lock, written as
/// mboxrd and sent; the next page waits for the client to take it (a bounded channel), so a
/// download of a big month holds neither the lock nor the whole month in memory.
const MBOX_PAGE: usize = 50;

pub(super) async fn month_mbox(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path((list, year, month)): Path<(String, i32, u8)>,
) -> Response {
    let name = format!("{}-{year:04}-{month:02}.mbox", list.to_lowercase());
    mbox(web, reader, list, Scope::Month { year, month }, name).await
}

pub(super) async fn thread_mbox(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path((list, id)): Path<(String, i64)>,
) -> Response {
    let name = format!("{}-thread-{id}.mbox", list.to_lowercase());
    mbox(web, reader, list, Scope::Thread(id), name).await
}

/// Streams a month or a thread as mboxrd (the format `herald archive import` reads back).
async fn mbox(
    web: Arc<WebArchive>,
    reader: Reader,
    list: String,
    scope: Scope,
    file: String,
) -> Response {
    let l = list.to_lowercase();
    // The first page answers "is there anything, and may this reader see it" before the
    // headers go out; later pages stream.
    let first = {
        let l = l.clone();
        match with_db(web.clone(), &reader, Some(l.clone()), move |db| {
            db.scope_page(&l, scope, (i64::MIN, 0), MBOX_PAGE)
        })
        .await
        {
            Ok((r, _)) if !r.is_empty() => r,
            Ok((_, pw)) => return not_found(&pw),
            Err(r) => return r,
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(2);
    // A thread of its own, not the runtime's blocking pool: it lives as long as the client takes
    // to read the mbox, and must not hold a pool thread that queries wait for meanwhile.
    let spawned = std::thread::Builder::new()
        .name("archive-mbox".into())
        .spawn(move || send_pages(&web, &l, scope, first, &tx));
    if let Err(e) = spawned {
        // The stream ends at once (its sender went with the closure): an empty download.
        tracing::error!(error = %e, "cannot start the mbox download's thread");
    }
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    (
        [
            (header::CONTENT_TYPE, "application/mbox".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!(
                    "attachment; filename=\"{}\"",
                    file.replace(['"', '\\', '/'], "_")
                ),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
        ],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

/// The mbox thread's loop: writes `page` as mboxrd, sends it, reads the next page after its
/// last row under the store's lock, until a short page, the client leaving (the channel
/// closed) or a store error (the response is under way: a truncated mbox is all it can get).
fn send_pages(
    web: &WebArchive,
    list: &str,
    scope: Scope,
    mut page: Vec<StoredMessage>,
    tx: &tokio::sync::mpsc::Sender<bytes::Bytes>,
) {
    loop {
        let mut out = Vec::new();
        for m in &page {
            let _ =
                crate::mbox::write_message(&mut out, &m.summary.from, m.summary.date_ms, &m.raw);
        }
        if tx.blocking_send(bytes::Bytes::from(out)).is_err() {
            return; // the client went away
        }
        let Some(last) = page.last() else { return };
        if page.len() < MBOX_PAGE {
            return;
        }
        let after = (last.summary.date_ms, last.summary.id);
        let next = {
            let db = web.db.lock().unwrap_or_else(|p| p.into_inner());
            db.scope_page(list, scope, after, MBOX_PAGE)
        };
        match next {
            Ok(p) if !p.is_empty() => page = p,
            Ok(_) => return,
            Err(e) => {
                tracing::error!(error = %e, "archive mbox download");
                return;
            }
        }
    }
}
