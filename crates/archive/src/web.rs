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
//! URLs are percent-encoded ([`crate::stage::url_component`]) and only used as SQL parameters.

use crate::stage::url_component;
use crate::store::{Archive, Filters, MessageSummary, Privacy, Scope, SearchOrder};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use herald_i18n::{Overrides, Words};
use mail_parser::MimeHeaders;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

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
        .route("/archive/{list}/atom.xml", get(atom))
        .route("/archive/{list}/msg/{mid}/attachment/{n}", get(attachment))
        .layer(axum::middleware::from_fn(keep_key))
        .with_state(web)
}

#[derive(serde::Deserialize, Default)]
struct PageQuery {
    #[serde(default)]
    page: usize,
    #[serde(default)]
    q: String,
    /// Search filters: the sender contains this; first and last day (YYYY-MM-DD, UTC).
    #[serde(default)]
    from: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    /// Search order: newest first (the default) or best match first.
    #[serde(default)]
    sort: SearchOrderParam,
    /// A month or thread page starts after this row: `<date_ms>.<id>` of the last row shown.
    #[serde(default)]
    after: String,
}

impl PageQuery {
    /// The key a month or thread page starts after; the start for none or a malformed one.
    fn after_key(&self) -> (i64, i64) {
        self.after
            .split_once('.')
            .and_then(|(d, i)| Some((d.parse().ok()?, i.parse().ok()?)))
            .unwrap_or((i64::MIN, 0))
    }

    /// The filters, or the first bad date as the reader's error.
    fn filters(&self) -> Result<Filters, BadDate> {
        let day = |s: &str, field: DateField, next: bool| -> Result<Option<i64>, BadDate> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            let bad = || BadDate {
                field,
                value: s.chars().take(40).collect(),
            };
            let d: jiff::civil::Date = s.parse().map_err(|_| bad())?;
            let d = if next {
                d.tomorrow().map_err(|_| bad())?
            } else {
                d
            };
            let ts = jiff::tz::Offset::UTC
                .to_timestamp(d.at(0, 0, 0, 0))
                .map_err(|_| bad())?;
            Ok(Some(ts.as_millisecond()))
        };
        Ok(Filters {
            from: Some(self.from.trim().to_string()).filter(|f| !f.is_empty()),
            since_ms: day(&self.since, DateField::Since, false)?,
            // `until` names the last day shown: the bound is the next midnight.
            until_ms: day(&self.until, DateField::Until, true)?,
        })
    }
}

/// The `sort` parameter: an unknown value is the default order, not an error page (a link
/// from an older page or a hand-edited URL still finds its results).
#[derive(Default, Clone, Copy, PartialEq, Eq)]
struct SearchOrderParam(SearchOrder);

impl<'de> serde::Deserialize<'de> for SearchOrderParam {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(SearchOrderParam(match s.as_str() {
            "relevance" => SearchOrder::Relevance,
            _ => SearchOrder::Newest,
        }))
    }
}

impl SearchOrderParam {
    fn as_str(self) -> &'static str {
        match self.0 {
            SearchOrder::Newest => "newest",
            SearchOrder::Relevance => "relevance",
        }
    }
}

/// Which date filter a reader got wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DateField {
    Since,
    Until,
}

/// A search date that is not one (shown above the form, in the page's words, with the field's
/// label and the first 40 characters of what was typed).
#[derive(Debug, Clone, PartialEq, Eq)]
struct BadDate {
    field: DateField,
    value: String,
}

impl BadDate {
    fn say(&self, w: &Words<'_>) -> String {
        let label = w.text(
            match self.field {
                DateField::Since => "archive-since-label",
                DateField::Until => "archive-until-label",
            },
            &[],
        );
        w.text(
            "archive-bad-date",
            &[("field", &label), ("value", &self.value)],
        )
    }
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

/// Who is reading: the archive key they present — `?key=` (the link on a member's
/// subscriptions page) or, after that first visit, the `herald_archive_key` cookie scoped to
/// the list's archive — and the shipped language their browser prefers (`Accept-Language`).
#[derive(Debug, Clone, Default)]
pub struct Reader {
    key: Option<String>,
    accept: Option<&'static str>,
}

/// The cookie holding a member's archive key.
const KEY_COOKIE: &str = "herald_archive_key";

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Reader {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let accept = parts
            .headers
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok())
            .and_then(herald_i18n::negotiate);
        Ok(Reader {
            key: query_key(parts).or_else(|| cookie_key(parts)),
            accept,
        })
    }
}

/// Longest key accepted (a signed token is ~120 bytes; anything far longer is junk).
const MAX_KEY_BYTES: usize = 512;

fn query_key(parts: &axum::http::request::Parts) -> Option<String> {
    parts
        .uri
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("key="))
        .filter(|k| !k.is_empty() && k.len() <= MAX_KEY_BYTES)
        .map(str::to_string)
}

fn cookie_key(parts: &axum::http::request::Parts) -> Option<String> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(KEY_COOKIE)?.strip_prefix('='))
        .filter(|k| !k.is_empty() && k.len() <= MAX_KEY_BYTES)
        .map(str::to_string)
}

/// After a page opened with `?key=` answered 200, the key goes into a cookie for that list's
/// archive only (`Path=/archive/<list>/`, HttpOnly, SameSite=Lax: sent on the reader's own
/// clicks within the archive, never readable by a script), so the next pages need no key in
/// their links.
async fn keep_key(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let key = {
        let (parts, body) = req.into_parts();
        let key = query_key(&parts);
        let list = parts
            .uri
            .path()
            .strip_prefix("/archive/")
            .and_then(|rest| rest.split('/').next())
            .filter(|l| !l.is_empty())
            .map(str::to_string);
        (
            key.zip(list),
            axum::extract::Request::from_parts(parts, body),
        )
    };
    let (found, req) = key;
    let mut res = next.run(req).await;
    if let (Some((key, list)), StatusCode::OK) = (found, res.status()) {
        // The key is base64url and a dot (checked by the signature before a 200), the list
        // segment is as the browser sent it: neither can break out of the cookie.
        let cookie = format!(
            "{KEY_COOKIE}={key}; Path=/archive/{list}/; Max-Age={}; HttpOnly; SameSite=Lax",
            MEMBER_KEY_DAYS * 86_400
        );
        if let Ok(v) = axum::http::HeaderValue::from_str(&cookie) {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    res
}

/// How long a member's archive key (and its cookie) is valid.
pub const MEMBER_KEY_DAYS: u64 = 30;

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

/// "one message", "12 messages" in the page's words.
fn count(w: &Words<'_>, n: impl ToString) -> String {
    w.text("archive-count", &[("count", &n.to_string())])
}

async fn index(State(web): State<Arc<WebArchive>>, reader: Reader) -> Response {
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

async fn months(
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

async fn month(
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

async fn thread(
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

async fn search(
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

async fn message(
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

async fn raw(
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
async fn attachment(
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

async fn month_mbox(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path((list, year, month)): Path<(String, i32, u8)>,
) -> Response {
    let name = format!("{}-{year:04}-{month:02}.mbox", list.to_lowercase());
    mbox(web, reader, list, Scope::Month { year, month }, name).await
}

async fn thread_mbox(
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
        .spawn(move || {
            let mut page = first;
            loop {
                let mut out = Vec::new();
                for m in &page {
                    let _ = crate::mbox::write_message(
                        &mut out,
                        &m.summary.from,
                        m.summary.date_ms,
                        &m.raw,
                    );
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
                    db.scope_page(&l, scope, after, MBOX_PAGE)
                };
                match next {
                    Ok(p) if !p.is_empty() => page = p,
                    Ok(_) => return,
                    Err(e) => {
                        // The response is under way: the truncated mbox is all the client can get.
                        tracing::error!(error = %e, "archive mbox download");
                        return;
                    }
                }
            }
        });
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

/// Entries in the Atom feed.
const FEED_ENTRIES: usize = 30;

/// `/archive/<list>/atom.xml`: the newest posts, each with its text (addresses as the web
/// pages show them) and a link to its page.
async fn atom(
    State(web): State<Arc<WebArchive>>,
    reader: Reader,
    Path(list): Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
    let l = list.to_lowercase();
    let ((rows, show), pw) = match with_db(web, &reader, Some(l.clone()), move |db| {
        Ok((db.latest(&l, FEED_ENTRIES)?, db.shows_addresses(&l)?))
    })
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    // Links are relative to the host the reader asked: the feed works behind any name.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("localhost");
    let base = format!(
        "http://{host}/archive/{}/",
        url_component(&list.to_lowercase())
    );
    match feed_xml(&pw.words(), &list, &base, &rows, show) {
        Ok(xml) => (
            [(header::CONTENT_TYPE, "application/atom+xml; charset=utf-8")],
            xml,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "archive feed");
            (StatusCode::INTERNAL_SERVER_ERROR, "feed unavailable\n").into_response()
        }
    }
}

fn feed_xml(
    w: &Words<'_>,
    list: &str,
    base: &str,
    rows: &[crate::StoredMessage],
    show: bool,
) -> Result<String, String> {
    use atom_syndication::{Content, Entry, Feed, FixedDateTime, Link, Person, Text};
    let when = |ms: i64| -> Result<FixedDateTime, String> {
        let ts = jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        FixedDateTime::parse_from_rfc3339(&ts.to_string()).map_err(|e| e.to_string())
    };
    let link = |href: String| Link {
        href,
        ..Link::default()
    };
    let mut entries = Vec::with_capacity(rows.len());
    for m in rows {
        let s = &m.summary;
        let page = format!("{base}msg/{}", url_component(&s.message_id));
        let text = mail_parser::MessageParser::default()
            .parse(&m.raw)
            .and_then(|p| p.body_text(0).map(|t| t.into_owned()))
            .unwrap_or_default();
        let mut e = Entry::default();
        e.set_id(page.clone());
        e.set_title(Text::plain(xml_text(&match s.subject.as_str() {
            "" => w.text("archive-no-subject", &[]),
            subject => subject.to_string(),
        })));
        e.set_updated(when(s.date_ms)?);
        e.set_authors(vec![Person {
            name: xml_text(&shown(&s.from, show)),
            ..Person::default()
        }]);
        e.set_links(vec![link(page)]);
        let mut c = Content::default();
        c.set_content_type("text".to_string());
        c.set_value(xml_text(&shown(&text, show)));
        e.set_content(c);
        entries.push(e);
    }
    let mut feed = Feed::default();
    feed.set_id(base.to_string());
    feed.set_title(Text::plain(xml_text(list)));
    feed.set_updated(when(rows.first().map_or(0, |m| m.summary.date_ms))?);
    feed.set_links(vec![link(base.to_string())]);
    feed.set_entries(entries);
    Ok(feed.to_string())
}

/// Text XML 1.0 can carry: control characters other than tab and line breaks are not allowed
/// in an XML document at all (escaping does not help), so they go.
fn xml_text(s: &str) -> String {
    s.chars()
        .filter(|&c| !c.is_control() || matches!(c, '\t' | '\n' | '\r'))
        .collect()
}

/// How a listing links its next page: a month or a thread by the key of its last row (no deep
/// OFFSET), search results by page number with the previous page and the count of pages (the
/// total is known, and a relevance order has no stable key).
enum Next<'a> {
    After,
    Pages(&'a Pager<'a>),
}

/// Where a page of search results stands: `page` counts from 0.
struct Pager<'a> {
    page: usize,
    pages: u64,
    /// The query string after `page=` that keeps the words, filters and order.
    extra: &'a str,
}

impl Pager<'_> {
    fn links(&self, w: &Words<'_>) -> String {
        if self.pages <= 1 {
            return String::new();
        }
        let mut out = String::from("<nav class=\"pager\"><p>");
        if self.page > 0 {
            let _ = write!(
                out,
                "<a rel=\"prev\" href=\"?page={}{}\">{}</a> ",
                self.page - 1,
                self.extra,
                esc(&w.text("archive-previous-page", &[]))
            );
        }
        let _ = write!(
            out,
            "{}",
            esc(&w.text(
                "archive-page-of",
                &[
                    ("page", &(self.page + 1).to_string()),
                    ("pages", &self.pages.to_string())
                ]
            ))
        );
        if (self.page as u64) + 1 < self.pages {
            let _ = write!(
                out,
                " <a rel=\"next\" href=\"?page={}{}\">{}</a>",
                self.page + 1,
                self.extra,
                esc(&w.text("archive-next-page", &[]))
            );
        }
        out.push_str("</p></nav>");
        out
    }
}

fn listing(
    w: &Words<'_>,
    list: &str,
    rows: &[MessageSummary],
    next: Next<'_>,
    show: bool,
) -> String {
    let mut out = format!(
        "<table><tr><th>{}</th><th>{}</th><th>{}</th><th></th></tr>",
        esc(&w.text("archive-date", &[])),
        esc(&w.text("archive-from", &[])),
        esc(&w.text("archive-subject", &[]))
    );
    let (no_subject, thread) = (
        w.text("archive-no-subject", &[]),
        w.text("archive-thread", &[]),
    );
    for m in rows {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td><a href=\"/archive/{}/msg/{}\">{}</a></td><td><a href=\"/archive/{}/thread/{}\">{}</a></td></tr>",
            esc(&date(m.date_ms)),
            esc(&shown(&m.from, show)),
            url_component(list),
            url_component(&m.message_id),
            esc(if m.subject.is_empty() { &no_subject } else { &m.subject }),
            url_component(list),
            m.thread_id,
            esc(&thread)
        );
    }
    out.push_str("</table>");
    if let Next::Pages(pager) = next {
        out.push_str(&pager.links(w));
        return out;
    }
    if let (true, Some(last)) = (rows.len() == PAGE_ROWS, rows.last()) {
        let href = format!("?after={}.{}", last.date_ms, last.id);
        let _ = write!(
            out,
            "<p><a href=\"{href}\">{}</a></p>",
            esc(&w.text("archive-next-page", &[]))
        );
    }
    out
}

/// `text` as the web archive shows it: mail addresses written `user at example.org` unless
/// the list shows them ([`Archive::shows_addresses`]), as pipermail and HyperKitty do.
pub fn shown(text: &str, show_addresses: bool) -> String {
    if show_addresses {
        return text.to_string();
    }
    static ADDRESS: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let re = ADDRESS.get_or_init(|| {
        regex::Regex::new(r"([A-Za-z0-9._%+\-]+)@([A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+)").ok()
    });
    match re {
        Some(re) => re.replace_all(text, "$1 at $2").into_owned(),
        // The pattern is a constant that compiles; without it, hide every `@`.
        None => text.replace('@', " at "),
    }
}

fn search_form(w: &Words<'_>, list: &str, q: &PageQuery) -> String {
    format!(
        "<form action=\"/archive/{}/search\" method=\"get\">\
         <label>{} <input name=\"q\" value=\"{}\"></label> \
         <label>{} <input name=\"from\" value=\"{}\"></label> \
         <label>{} <input name=\"since\" type=\"date\" value=\"{}\"></label> \
         <label>{} <input name=\"until\" type=\"date\" value=\"{}\"></label> \
         <label>{} <select name=\"sort\">\
         <option value=\"newest\"{}>{}</option>\
         <option value=\"relevance\"{}>{}</option></select></label> \
         <button>{}</button></form>",
        url_component(list),
        esc(&w.text("archive-words-label", &[])),
        esc(&q.q),
        esc(&w.text("archive-from-label", &[])),
        esc(&q.from),
        esc(&w.text("archive-since-label", &[])),
        esc(&q.since),
        esc(&w.text("archive-until-label", &[])),
        esc(&q.until),
        esc(&w.text("archive-sort-label", &[])),
        selected(q.sort.0 == SearchOrder::Newest),
        esc(&w.text("archive-sort-newest", &[])),
        selected(q.sort.0 == SearchOrder::Relevance),
        esc(&w.text("archive-sort-relevance", &[])),
        esc(&w.text("archive-search-button", &[]))
    )
}

fn selected(on: bool) -> &'static str {
    if on {
        " selected"
    } else {
        ""
    }
}

fn date(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string()
}

/// A page in the language of `w` (a shipped code, so it is safe in the attribute: screen
/// readers and browsers' translation offers read it).
fn page(w: &Words<'_>, title: &str, body: &str) -> Html<String> {
    let lang = if herald_i18n::is_shipped(w.lang) {
        w.lang
    } else {
        herald_i18n::DEFAULT
    };
    Html(format!(
        "<!doctype html><html lang=\"{lang}\"><head><meta charset=\"utf-8\"><title>{t}</title></head><body><h1>{t}</h1>{body}</body></html>",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MessageSummary, StoredMessage};

    #[test]
    fn addresses_are_hidden_unless_shown() {
        let t = "Eve <eve.x+tag@mail.outside.test> wrote to dev@lists.test; not@an-address";
        assert_eq!(
            shown(t, false),
            "Eve <eve.x+tag at mail.outside.test> wrote to dev at lists.test; not@an-address"
        );
        assert_eq!(shown(t, true), t);
        // A long hostile line is linear work and comes back whole.
        let long = "a@".repeat(100_000);
        assert_eq!(shown(&long, false).len(), long.len());
    }

    #[test]
    fn a_hostile_subject_makes_a_feed_that_parses() {
        let raw = b"Subject: x\r\n\r\nbody <![CDATA[ ]]> \x01\x1b end\r\n".to_vec();
        let m = StoredMessage {
            summary: MessageSummary {
                id: 1,
                list: "l@x.test".into(),
                message_id: "a/b@x".into(),
                date_ms: 1_764_000_000_000,
                thread_id: 1,
                subject: "<script>&amp; ]]> \u{1}\u{7f}".into(),
                from: "E <e@x.test>".into(),
                size: raw.len() as i64,
            },
            raw,
        };
        let xml = feed_xml(
            &Words::shipped("en"),
            "l@x.test",
            "http://h/archive/l@x.test/",
            &[m],
            false,
        )
        .unwrap();
        let feed: atom_syndication::Feed = xml.parse().expect("parses");
        assert_eq!(feed.entries()[0].title().as_str(), "<script>&amp; ]]> ");
        assert_eq!(feed.entries()[0].authors()[0].name(), "E <e at x.test>");
        assert!(!xml.contains("<script"), "{xml}");
    }

    #[test]
    fn search_dates_are_checked() {
        let q = |since: &str, until: &str| PageQuery {
            since: since.into(),
            until: until.into(),
            ..PageQuery::default()
        };
        let f = q("2026-11-24", "2026-11-24").filters().unwrap();
        assert_eq!(
            f.until_ms.unwrap() - f.since_ms.unwrap(),
            86_400_000,
            "until is inclusive"
        );
        for bad in ["yesterday", "2026-13-01", "24.11.2026", "'; DROP TABLE"] {
            assert!(q(bad, "").filters().is_err(), "{bad}");
            assert!(q("", bad).filters().is_err(), "{bad}");
        }
    }
}
