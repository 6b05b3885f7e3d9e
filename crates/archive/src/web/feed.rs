//! The Atom feed of a list's archive (`atom.xml`): the newest posts with their text and a
//! link to each page. Apart from the pages because it writes XML through
//! `atom_syndication`, not HTML.
//!
//! SECURITY: titles, authors and text come from untrusted mail. The XML writer escapes them;
//! [`xml_text`] also drops the control characters XML 1.0 cannot carry at all, so a hostile
//! subject still makes a feed that parses. The `Host` the links are built on is taken only
//! when it is printable ASCII.

use super::html::shown;
use super::{with_db, Reader, WebArchive};
use crate::stage::url_component;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use herald_i18n::Words;
use std::sync::Arc;

/// Entries in the Atom feed.
const FEED_ENTRIES: usize = 30;

/// `/archive/<list>/atom.xml`: the newest posts, each with its text (addresses as the web
/// pages show them) and a link to its page.
pub(super) async fn atom(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MessageSummary, StoredMessage};
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
}
