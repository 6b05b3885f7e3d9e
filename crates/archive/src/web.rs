//! The web archive: server-rendered HTML pages (no JavaScript) over the store, mounted on the
//! HTTP API's router. Lists whose privacy is `public` are served to anyone; `members` lists to
//! a member holding the key on their subscriptions page (`?key=` once, then a cookie scoped to
//! the list's archive; checked against the directory on every page, so a member who leaves
//! loses access), 403 to anyone else; `private` and `none` answer 404 to everybody (the CLI
//! reads them, and an administrator over IMAP).
//!
//! Pages read only what they show: month and thread listings page by the key of the last row
//! shown (`?after=<date>.<id>`, 100 rows, an index range scan however deep), search results by
//! page number with the count of matches and of pages, newest first or best match first; the
//! mbox downloads of a month or a thread stream a page of 50 messages at a time through the
//! (list, month|thread, date) indexes; the Atom feed (`atom.xml`) reads the newest 30.
//! Search takes words and/or filters (sender contains, since, until). Addresses on the pages
//! and in the feed are written `user at example.org` unless the list shows them (`herald
//! archive addresses <list> show`); raw messages and mbox downloads stay as archived.
//! Attachments are listed on the message page and served only as downloads.
//!
//! Words: a list's pages are written in the list's language with the list's
//! own texts (catalogue messages `archive-*`, overridable per list like every message), a
//! member who opened a `members` archive with their key reads it in their own language; pages
//! that name no list (the index, "not found") follow the browser's `Accept-Language`. The
//! directory answers through [`ListWords`], given by the server (this crate does not read it).
//!
//! SECURITY: everything shown comes from untrusted mail. Text is HTML-escaped by [`esc`]; HTML
//! parts are never rendered — the page shows mail-parser's text of the message (HTML converted
//! to plain text), so no markup, script or remote image from a post reaches the browser. `raw`
//! is served as `text/plain` with `nosniff`. A hand-written escaper rather than ammonia because
//! nothing here keeps any markup: escaping five characters is the whole job. Message-IDs in
//!
//! Where things are: this file holds the shared state ([`WebArchive`]), the routes and the one
//! access check every page goes through (`with_db`); `reader` who is reading (member key,
//! cookie, language), `query` the query string, `pages` the HTML pages, `downloads` raw
//! messages, attachments and mboxes, `feed` the Atom feed, `html` the shared markup and [`esc`].

mod downloads;
mod feed;
mod html;
mod pages;
mod query;
mod reader;

pub use html::{esc, shown};
pub use reader::{Reader, MEMBER_KEY_DAYS};

use crate::store::{Archive, Privacy};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use herald_i18n::{Overrides, Words};
use html::page;
use std::sync::{Arc, Mutex};

/// Rows on a month, thread or search results page.
const PAGE_ROWS: usize = 100;

/// The store as the pages read it. A std `Mutex` around one read connection: handlers take
/// it inside `spawn_blocking` and never across an `.await`.
pub struct WebArchive {
    db: Mutex<Archive>,
    /// The running writer's counters, for `/metrics`.
    writer: Option<Arc<crate::metrics::WriterStats>>,
    /// How `members` archives let members in; `None`: nobody reads them on the web.
    members: Option<MemberKeys>,
    /// The language and texts of a list's pages; `None`: the browser's language, shipped texts.
    words: Option<ListWords>,
}

/// `(list, reader)`: the language a page of the list's archive is written in for the reader
/// (a member's own when known, else the list's) and the list's own texts; `None` for a list
/// the directory does not know (an imported archive): the browser's language then. Blocking.
pub type ListWords = Arc<
    dyn Fn(&herald_types::Address, Option<&herald_types::Address>) -> Option<(String, Overrides)>
        + Send
        + Sync,
>;

/// What one page is written with: a language and the list's texts.
pub struct PageWords {
    lang: String,
    overrides: Overrides,
}

impl PageWords {
    /// A page about no particular list: the browser's language (or English), shipped texts.
    fn browser(accept: Option<&'static str>) -> Self {
        PageWords {
            lang: accept.unwrap_or(herald_i18n::DEFAULT).to_string(),
            overrides: Overrides::none(),
        }
    }

    fn words(&self) -> Words<'_> {
        Words {
            lang: &self.lang,
            overrides: &self.overrides,
        }
    }
}

/// `(list, address)`: is the address an enabled member of the list? (Blocking.)
pub type IsMember =
    Arc<dyn Fn(&herald_types::Address, &herald_types::Address) -> bool + Send + Sync>;

/// How members read a `members` archive (until accounts and sessions): a key signed
/// for (list, member, expiry) with the server's secret, and the directory's word that the
/// address is still an enabled member of the list.
pub struct MemberKeys {
    pub secret: Vec<u8>,
    /// `(list, address)`: is the address an enabled member of the list? (Blocking.)
    pub is_member: IsMember,
}

impl WebArchive {
    pub fn new(archive: Archive) -> Self {
        WebArchive {
            db: Mutex::new(archive),
            writer: None,
            members: None,
            words: None,
        }
    }

    /// Pages of a list the directory knows are written in its language with its own texts.
    pub fn with_words(mut self, words: ListWords) -> Self {
        self.words = Some(words);
        self
    }

    /// The words of a page of `list` for `who` (a member who presented their key), falling
    /// back to the browser's language for a list the directory does not know. Blocking.
    fn page_words(
        &self,
        list: &str,
        who: Option<&herald_types::Address>,
        accept: Option<&'static str>,
    ) -> PageWords {
        let found = match (&self.words, herald_types::Address::parse(list)) {
            (Some(f), Ok(list)) => f(&list, who),
            _ => None,
        };
        match found {
            Some((lang, overrides)) => PageWords { lang, overrides },
            None => PageWords::browser(accept),
        }
    }

    pub fn with_member_keys(mut self, keys: MemberKeys) -> Self {
        self.members = Some(keys);
        self
    }

    /// The privacy of a list's archive (for the subscriptions page's links). Blocking.
    pub fn privacy(&self, list: &str) -> Result<Privacy, crate::ArchiveError> {
        self.db
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .privacy(&list.to_lowercase())
    }

    /// The member whose key lets its holder read `list`'s members archive now, if any.
    /// Blocking.
    fn member_reading(&self, list: &str, reader: &Reader) -> Option<herald_types::Address> {
        let (Some(m), Some(key)) = (&self.members, &reader.key) else {
            return None;
        };
        let list = herald_types::Address::parse(list).ok()?;
        let now = herald_types::unix_ms_now() / 1000;
        let who = herald_types::token::verify_archive(&m.secret, &list, key, now)?;
        (m.is_member)(&list, &who).then_some(who)
    }

    pub fn with_writer_stats(mut self, stats: Arc<crate::metrics::WriterStats>) -> Self {
        self.writer = Some(stats);
        self
    }

    /// What a `/metrics` scrape reads from the store: the message count (when it could be
    /// read) and the database file. Blocking (one `COUNT(*)`): call it from a blocking task.
    pub fn scrape(&self) -> (Option<i64>, Option<std::path::PathBuf>) {
        let db = self.db.lock().unwrap_or_else(|p| p.into_inner());
        (db.count().ok(), db.path())
    }

    /// The running writer's counters, when the server archives.
    pub fn writer_stats(&self) -> Option<&crate::metrics::WriterStats> {
        self.writer.as_deref()
    }
}

/// The archive's routes, for any outer router state.
pub fn router<S: Clone + Send + Sync + 'static>(web: Arc<WebArchive>) -> Router<S> {
    use downloads::{attachment, month_mbox, raw, thread_mbox};
    use pages::{index, message, month, months, search, thread};
    Router::new()
        .route("/archive/", get(index))
        .route("/archive/{list}/", get(months))
        .route("/archive/{list}/{year}/{month}/", get(month))
        .route("/archive/{list}/thread/{id}", get(thread))
        .route("/archive/{list}/msg/{mid}", get(message))
        .route("/archive/{list}/msg/{mid}/raw", get(raw))
        .route("/archive/{list}/search", get(search))
        .route("/archive/{list}/{year}/{month}/mbox", get(month_mbox))
        .route("/archive/{list}/thread/{id}/mbox", get(thread_mbox))
        .route("/archive/{list}/atom.xml", get(feed::atom))
        .route("/archive/{list}/msg/{mid}/attachment/{n}", get(attachment))
        .layer(axum::middleware::from_fn(reader::keep_key))
        .with_state(web)
}

/// Runs `f` on the store off the async threads, with the words of the page. With a list:
/// only when the reader may see its archive — anyone for `public`; for `members`, a reader
/// holding a valid member key ([`Reader`]) of an address that is still an enabled member; nobody
/// for the rest.
async fn with_db<T: Send + 'static>(
    web: Arc<WebArchive>,
    reader: &Reader,
    list: Option<String>,
    f: impl FnOnce(&Archive) -> Result<T, crate::ArchiveError> + Send + 'static,
) -> Result<(T, PageWords), Response> {
    let (reader, accept) = (reader.clone(), reader.accept);
    let r = tokio::task::spawn_blocking(move || {
        let mut who = None;
        if let Some(list) = &list {
            let privacy = {
                let db = web.db.lock().unwrap_or_else(|p| p.into_inner());
                db.privacy(list)?
            };
            match privacy {
                Privacy::Public => {}
                Privacy::Members => match web.member_reading(list, &reader) {
                    Some(member) => who = Some(member),
                    None => {
                        let words = web.page_words(list, None, accept);
                        return Ok(Err(Denied::MembersOnly(words)));
                    }
                },
                Privacy::Private | Privacy::None => return Ok(Err(Denied::NotFound)),
            }
        }
        let words = match &list {
            Some(l) => web.page_words(l, who.as_ref(), accept),
            None => PageWords::browser(accept),
        };
        let db = web.db.lock().unwrap_or_else(|p| p.into_inner());
        f(&db).map(|v| Ok((v, words)))
    })
    .await;
    match r {
        Ok(Ok(Ok(v))) => Ok(v),
        Ok(Ok(Err(Denied::NotFound))) => Err(not_found(&PageWords::browser(accept))),
        Ok(Ok(Err(Denied::MembersOnly(words)))) => Err(members_only(&words)),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "archive page");
            Err((StatusCode::INTERNAL_SERVER_ERROR, "archive unavailable\n").into_response())
        }
        Err(_) => Err((StatusCode::INTERNAL_SERVER_ERROR, "archive unavailable\n").into_response()),
    }
}

/// Why a reader does not see a list's archive.
enum Denied {
    /// Private or no archive, or no such list: the same answer for each, so a private list's
    /// existence does not show (in the browser's language, not the list's, for the same reason).
    NotFound,
    /// A members' archive without a valid member key, in the list's words.
    MembersOnly(PageWords),
}

fn members_only(pw: &PageWords) -> Response {
    let w = pw.words();
    (
        StatusCode::FORBIDDEN,
        page(
            &w,
            &w.text("archive-members-only-title", &[]),
            &format!(
                "<p>{} <a href=\"/manage\">{}</a></p>",
                esc(&w.text("archive-members-only", &[])),
                esc(&w.text("archive-members-only-ask", &[]))
            ),
        ),
    )
        .into_response()
}

fn not_found(pw: &PageWords) -> Response {
    let w = pw.words();
    (
        StatusCode::NOT_FOUND,
        page(
            &w,
            &w.text("archive-not-found-title", &[]),
            &format!("<p>{}</p>", esc(&w.text("archive-not-found", &[]))),
        ),
    )
        .into_response()
}
