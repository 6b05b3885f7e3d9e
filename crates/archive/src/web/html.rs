//! The HTML the archive pages share: the page frame, the message listing and its pager, the
//! search form, dates, the address hiding of [`shown`] and the escaper [`esc`].
//!
//! SECURITY: [`esc`] is the one escaper every page uses for text from mail or from the
//! reader. A hand-written escaper rather than ammonia because nothing here keeps any markup:
//! escaping five characters is the whole job. Links carry list names and Message-IDs only
//! percent-encoded ([`crate::stage::url_component`]).

use super::query::PageQuery;
use super::PAGE_ROWS;
use crate::stage::url_component;
use crate::store::{MessageSummary, SearchOrder};
use axum::response::Html;
use herald_i18n::Words;
use std::fmt::Write as _;

/// "one message", "12 messages" in the page's words.
pub(super) fn count(w: &Words<'_>, n: impl ToString) -> String {
    w.text("archive-count", &[("count", &n.to_string())])
}

/// How a listing links its next page: a month or a thread by the key of its last row (no deep
/// OFFSET), search results by page number with the previous page and the count of pages (the
/// total is known, and a relevance order has no stable key).
pub(super) enum Next<'a> {
    After,
    Pages(&'a Pager<'a>),
}

/// Where a page of search results stands: `page` counts from 0.
pub(super) struct Pager<'a> {
    pub(super) page: usize,
    pub(super) pages: u64,
    /// The query string after `page=` that keeps the words, filters and order.
    pub(super) extra: &'a str,
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

pub(super) fn listing(
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

pub(super) fn search_form(w: &Words<'_>, list: &str, q: &PageQuery) -> String {
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

pub(super) fn date(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string()
}

/// A page in the language of `w` (a shipped code, so it is safe in the attribute: screen
/// readers and browsers' translation offers read it).
pub(super) fn page(w: &Words<'_>, title: &str, body: &str) -> Html<String> {
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
}
