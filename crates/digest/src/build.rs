//! Building one digest (pure: bytes in, bytes out, no I/O): the numbered masthead, a table of
//! contents, and the posts in archive order, as RFC 2046 `multipart/digest` (each post a
//! `message/rfc822` part, as received) or as an RFC 1153 plain-text digest (each post's text).
//!
//! Hand-written rather than with `mail-builder`: that crate builds a message from typed parts
//! and re-encodes them, while a MIME digest must carry each archived post byte for byte, and
//! RFC 1153 is a plain-text layout, not a MIME structure.
//!
//! Invariants: CRLF line endings; no line longer than [`MAX_LINE_BYTES`] (long text lines are
//! split, so the `8bit` body is valid SMTP); the MIME boundary occurs in no part (checked, not
//! hoped); a line of 30 hyphens inside a plain post is shifted by a space so it cannot end the
//! message early (RFC 1153 §"Digest format"); header values built from posts (subject, sender)
//! have control characters replaced, so nothing from a post can add a header.
//!
//! SECURITY: the posts are archived list mail, i.e. input from anyone allowed to post. They are
//! parsed with `mail-parser` (bounded by the archive's size limit) only to read subject, sender,
//! date and text; nothing of theirs reaches the digest's own header block unsanitized.

use base64::Engine;
use mail_parser::MessageParser;

/// Longest line written (RFC 5322 allows 998 octets before CRLF).
pub const MAX_LINE_BYTES: usize = 990;

/// Which digest format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Mime,
    Plain,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Mime => "mime",
            Format::Plain => "plain",
        }
    }
}

/// The words of a digest's own text: from the list's language and the list's
/// own wording (`herald_i18n::Words`), or English by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestWords {
    /// "Dev Digest, Vol 1, Issue 2": the subject and the first line.
    pub title: String,
    /// "Today's Topics:", above the table of contents.
    pub topics: String,
    /// The line before the MIME parts.
    pub preamble: String,
    /// "End of …", the plain digest's last line.
    pub end: String,
    /// What a post without a text part shows in a plain digest.
    pub no_text: String,
}

impl DigestWords {
    /// The words for issue `issue` of volume `volume` of the list called `name` ("" → the
    /// address's local part), in `w`.
    pub fn new(
        w: &herald_i18n::Words<'_>,
        list: &str,
        name: &str,
        volume: u32,
        issue: u32,
    ) -> Self {
        let name = match name.trim() {
            "" => list.split('@').next().unwrap_or(list),
            n => n,
        };
        let name = clean(name);
        let (volume, issue) = (volume.to_string(), issue.to_string());
        let args = [
            ("name", name.as_str()),
            ("volume", volume.as_str()),
            ("issue", issue.as_str()),
        ];
        // The words land in headers and single lines: no line breaks from a list's own text.
        let line = |id: &str| clean(&w.text(id, &args));
        DigestWords {
            title: line("digest-title"),
            topics: line("digest-topics"),
            preamble: line("digest-preamble"),
            end: line("digest-end"),
            no_text: line("digest-no-text"),
        }
    }
}

/// What a digest is called and where it comes from.
#[derive(Debug, Clone)]
pub struct Masthead<'a> {
    /// The list's posting address.
    pub list: &'a str,
    /// The list's display name ("" → the address's local part).
    pub name: &'a str,
    pub volume: u32,
    pub issue: u32,
    /// The `Date:` of the digest, as RFC 5322 text.
    pub date: &'a str,
    /// The digest's Message-ID, without angle brackets (deterministic per list, volume, issue
    /// and format: see the stage).
    pub message_id: &'a str,
    /// Its own text, in the list's language.
    pub words: &'a DigestWords,
}

impl Masthead<'_> {
    /// "Dev Digest, Vol 1, Issue 2".
    pub fn title(&self) -> &str {
        &self.words.title
    }
}

/// One post's table-of-contents line and text, read from its archived bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub subject: String,
    pub from: String,
    pub date: String,
    pub message_id: String,
}

/// Reads what the table of contents and the plain digest show of a post.
pub fn entry(raw: &[u8]) -> Entry {
    let Some(m) = MessageParser::new().parse_headers(raw) else {
        return Entry {
            subject: "(unreadable message)".into(),
            from: String::new(),
            date: String::new(),
            message_id: String::new(),
        };
    };
    let from = m
        .from()
        .and_then(|f| f.first())
        .map(|a| match (a.name(), a.address()) {
            (Some(n), Some(addr)) => format!("{n} <{addr}>"),
            (None, Some(addr)) => addr.to_string(),
            (Some(n), None) => n.to_string(),
            (None, None) => String::new(),
        })
        .unwrap_or_default();
    Entry {
        subject: clean(m.subject().unwrap_or("(no subject)")),
        from: clean(&from),
        date: m
            .header_raw("Date")
            .map(|d| clean(d.trim()))
            .unwrap_or_default(),
        message_id: m.message_id().map(clean).unwrap_or_default(),
    }
}

/// The digest message for `posts` (archived bytes, in archive order).
pub fn build(format: Format, head: &Masthead<'_>, posts: &[Vec<u8>]) -> Vec<u8> {
    let entries: Vec<Entry> = posts.iter().map(|p| entry(p)).collect();
    match format {
        Format::Mime => mime(head, &entries, posts),
        Format::Plain => plain(head, &entries, posts),
    }
}

fn toc(head: &Masthead<'_>, entries: &[Entry]) -> String {
    let mut t = format!(
        "{}\r\n\r\n{}\r\n\r\n",
        fit_line(head.title()),
        fit_line(&head.words.topics)
    );
    for (i, e) in entries.iter().enumerate() {
        let line = match e.from.as_str() {
            "" => format!("   {}. {}", i + 1, e.subject),
            f => format!("   {}. {} ({f})", i + 1, e.subject),
        };
        t.push_str(&fit_line(&line));
        t.push_str("\r\n");
    }
    t
}

fn headers(head: &Masthead<'_>, content_type: &str, eight_bit: bool) -> String {
    let request = match head.list.split_once('@') {
        Some((local, domain)) => format!("{local}-request@{domain}"),
        None => head.list.to_string(),
    };
    format!(
        "From: {request}\r\nTo: {list}\r\nSubject: {subject}\r\nDate: {date}\r\n\
         Message-ID: <{mid}>\r\nMIME-Version: 1.0\r\nContent-Type: {content_type}\r\n\
         Content-Transfer-Encoding: {cte}\r\n\r\n",
        list = head.list,
        subject = encode_word(head.title()),
        date = head.date,
        mid = head.message_id,
        cte = if eight_bit { "8bit" } else { "7bit" },
    )
}

fn mime(head: &Masthead<'_>, entries: &[Entry], posts: &[Vec<u8>]) -> Vec<u8> {
    let toc = toc(head, entries);
    let outer = boundary("mixed", head, posts, toc.as_bytes());
    let inner = boundary("digest", head, posts, toc.as_bytes());
    let eight_bit = !toc.is_ascii() || posts.iter().any(|p| !p.is_ascii());
    let mut out = headers(
        head,
        &format!("multipart/mixed; boundary=\"{outer}\""),
        eight_bit,
    )
    .into_bytes();
    out.extend_from_slice(fit_line(&head.words.preamble).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(format!("\r\n--{outer}\r\n").as_bytes());
    out.extend_from_slice(b"Content-Type: text/plain; charset=\"utf-8\"\r\n");
    out.extend_from_slice(
        format!(
            "Content-Description: {}\r\n\r\n",
            encode_word(head.words.topics.trim_end_matches(':'))
        )
        .as_bytes(),
    );
    out.extend_from_slice(toc.as_bytes());
    out.extend_from_slice(format!("\r\n--{outer}\r\n").as_bytes());
    out.extend_from_slice(
        format!("Content-Type: multipart/digest; boundary=\"{inner}\"\r\n\r\n").as_bytes(),
    );
    for (i, p) in posts.iter().enumerate() {
        // In multipart/digest a part's default type is message/rfc822 (RFC 2046 §5.1.5); it is
        // still written out for readers that ignore that default.
        out.extend_from_slice(format!("\r\n--{inner}\r\n").as_bytes());
        out.extend_from_slice(b"Content-Type: message/rfc822\r\n");
        out.extend_from_slice(
            format!(
                "Content-Description: {}\r\n\r\n",
                fit_line(&format!("{}. {}", i + 1, entries[i].subject))
            )
            .as_bytes(),
        );
        out.extend_from_slice(&crlf(p));
        if !p.ends_with(b"\n") {
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(format!("\r\n--{inner}--\r\n").as_bytes());
    out.extend_from_slice(format!("\r\n--{outer}--\r\n").as_bytes());
    out
}

const SEPARATOR_70: &str = "----------------------------------------------------------------------";
const SEPARATOR_30: &str = "------------------------------";

fn plain(head: &Masthead<'_>, entries: &[Entry], posts: &[Vec<u8>]) -> Vec<u8> {
    let mut body = toc(head, entries);
    body.push_str("\r\n");
    body.push_str(SEPARATOR_70);
    body.push_str("\r\n\r\n");
    for (e, raw) in entries.iter().zip(posts) {
        for (name, value) in [
            ("Date", &e.date),
            ("From", &e.from),
            ("Subject", &e.subject),
            ("Message-ID", &e.message_id),
        ] {
            if !value.is_empty() {
                body.push_str(&fit_line(&format!("{name}: {value}")));
                body.push_str("\r\n");
            }
        }
        body.push_str("\r\n");
        let text = MessageParser::new()
            .parse(raw)
            .and_then(|m| m.body_text(0).map(|t| t.into_owned()))
            .unwrap_or_else(|| head.words.no_text.clone());
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            // A line of exactly 30 hyphens would end the message early (RFC 1153).
            if line == SEPARATOR_30 {
                body.push(' ');
            }
            for piece in split_long(line) {
                body.push_str(piece);
                body.push_str("\r\n");
            }
        }
        body.push_str("\r\n");
        body.push_str(SEPARATOR_30);
        body.push_str("\r\n\r\n");
    }
    let end = head.words.end.clone();
    body.push_str(&fit_line(&end));
    body.push_str("\r\n");
    body.push_str(&"*".repeat(end.len().min(MAX_LINE_BYTES)));
    body.push_str("\r\n");
    let mut out = headers(head, "text/plain; charset=\"utf-8\"", !body.is_ascii()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// A boundary found in no part: a fixed stem with the issue's numbers, lengthened until it
/// occurs nowhere (a post quoting an earlier digest could hold the first try).
fn boundary(kind: &str, head: &Masthead<'_>, posts: &[Vec<u8>], toc: &[u8]) -> String {
    let mut n = 0u32;
    loop {
        let b = format!("=_herald_{kind}_{}_{}_{n}", head.volume, head.issue);
        let found = |hay: &[u8]| hay.windows(b.len()).any(|w| w == b.as_bytes());
        if !found(toc) && !posts.iter().any(|p| found(p)) {
            return b;
        }
        n += 1;
    }
}

/// Bare LF made CRLF (archived posts are CRLF already; imported ones may not be).
fn crlf(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + raw.len() / 50);
    let mut prev = 0u8;
    for &b in raw {
        if b == b'\n' && prev != b'\r' {
            out.push(b'\r');
        }
        out.push(b);
        prev = b;
    }
    out
}

/// Control characters (CR, LF, NUL, …) replaced by spaces: a post's subject or sender must
/// not be able to start a new header line in the digest.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// One line, cut at [`MAX_LINE_BYTES`] (on a character boundary).
fn fit_line(s: &str) -> String {
    split_long(&clean(s)).next().unwrap_or("").to_string()
}

/// `line` in pieces of at most [`MAX_LINE_BYTES`], cut on character boundaries.
fn split_long(line: &str) -> impl Iterator<Item = &str> {
    let mut rest = line;
    let mut first = true;
    std::iter::from_fn(move || {
        if rest.is_empty() && !first {
            return None;
        }
        first = false;
        let mut cut = rest.len().min(MAX_LINE_BYTES);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (piece, tail) = rest.split_at(cut);
        rest = tail;
        Some(piece)
    })
}

/// The subject as an RFC 2047 encoded word when it is not ASCII.
fn encode_word(s: &str) -> String {
    let s = fit_line(s);
    if s.is_ascii() {
        return s;
    }
    format!(
        "=?utf-8?b?{}?=",
        base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
    )
}
