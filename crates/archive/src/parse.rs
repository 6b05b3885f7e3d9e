//! What the archive's index needs from one message: Message-ID, threading fields, subject,
//! sender, date and the text the full-text index reads. Parsing is mail-parser's; this file
//! only applies Herald's limits and fallbacks.
//!
//! SECURITY: input is untrusted mail. The whole message and its header section are bounded
//! before mail-parser sees it; nothing here allocates more than a constant times the input.
//! A Message-ID is kept as text (it may hold `/`, `..` or `%`): it is never a file name, and
//! the web pages escape it in URLs.

use mail_parser::{HeaderValue, MessageParser};
use sha2::{Digest, Sha256};

/// Limits on one archived message.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A message larger than this is refused.
    pub max_message_bytes: usize,
    /// A header section larger than this is refused (a 10 MB header is an attack or a
    /// broken tool, never mail a reader wants to see).
    pub max_header_bytes: usize,
    /// Text given to the full-text index per message (the rest is still stored).
    pub max_index_text_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: 32 * 1024 * 1024,
            max_header_bytes: 256 * 1024,
            max_index_text_bytes: 64 * 1024,
        }
    }
}

/// Why a message was not archived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("message of {0} bytes is over the limit")]
    Oversize(usize),
    #[error("header section of {0} bytes or more is over the limit")]
    HeaderOversize(usize),
    #[error("not a parseable message (broken MIME or no header)")]
    Unparseable,
    #[error("removed by an administrator (tombstone)")]
    Tombstoned,
}

/// The index fields of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Without angle brackets. Generated from the content's SHA-256 when the message has
    /// none, so importing the same file twice gives the same id (idempotent).
    pub message_id: String,
    /// True when `message_id` was generated.
    pub generated_id: bool,
    /// The parent: In-Reply-To, else the last of References.
    pub parent: Option<String>,
    /// Every referenced id (References and In-Reply-To), for threading out of order.
    pub references: Vec<String>,
    pub subject: String,
    pub from: String,
    /// From the Date header; `None` when absent or unreadable.
    pub date_ms: Option<i64>,
    /// Plain text for the full-text index (text part, else the HTML part's text), bounded.
    pub text: String,
}

/// Parses `raw` under `limits`.
pub fn parse(raw: &[u8], limits: &Limits) -> Result<Parsed, Refused> {
    if raw.len() > limits.max_message_bytes {
        return Err(Refused::Oversize(raw.len()));
    }
    let header_len = header_len(raw, limits.max_header_bytes)?;
    if header_len == 0 {
        return Err(Refused::Unparseable);
    }
    let msg = MessageParser::default()
        .parse(raw)
        .ok_or(Refused::Unparseable)?;
    // mail-parser accepts nearly anything; a "message" with no header field at all is a
    // body fragment (e.g. what a broken mbox split leaves), not mail.
    if msg.headers().is_empty() {
        return Err(Refused::Unparseable);
    }
    let (message_id, generated_id) = match msg.message_id().map(clean_id) {
        Some(id) if !id.is_empty() => (id, false),
        _ => (generated_id(raw), true),
    };
    let mut references: Vec<String> = ids(msg.references());
    let in_reply_to = ids(msg.in_reply_to());
    let parent = in_reply_to
        .first()
        .cloned()
        .or_else(|| references.last().cloned());
    for id in in_reply_to {
        if !references.contains(&id) {
            references.push(id);
        }
    }
    // A thousand-level thread carries a thousand References; only the nearest matter for
    // threading, and the row must stay small.
    if references.len() > 64 {
        references.drain(..references.len() - 64);
    }
    let from = msg
        .from()
        .and_then(|a| a.first())
        .map(|a| match (&a.name, &a.address) {
            (Some(n), Some(addr)) => format!("{n} <{addr}>"),
            (None, Some(addr)) => addr.to_string(),
            (Some(n), None) => n.to_string(),
            (None, None) => String::new(),
        })
        .unwrap_or_default();
    let date_ms = msg
        .date()
        .filter(|d| d.is_valid())
        .map(|d| d.to_timestamp().saturating_mul(1000));
    let mut text = msg.body_text(0).map(|t| t.into_owned()).unwrap_or_default();
    truncate_utf8(&mut text, limits.max_index_text_bytes);
    Ok(Parsed {
        message_id,
        generated_id,
        parent,
        references,
        subject: msg.subject().unwrap_or("").chars().take(998).collect(),
        from: from.chars().take(512).collect(),
        date_ms,
        text,
    })
}

/// Length of the header section (through the blank line), refusing one over `max`.
/// A message with no blank line is all header.
fn header_len(raw: &[u8], max: usize) -> Result<usize, Refused> {
    let window = &raw[..raw.len().min(max.saturating_add(4))];
    let end = find(window, b"\r\n\r\n")
        .map(|i| i + 4)
        .or_else(|| find(window, b"\n\n").map(|i| i + 2));
    match end {
        Some(n) if n <= max => Ok(n),
        Some(n) => Err(Refused::HeaderOversize(n)),
        None if raw.len() > max => Err(Refused::HeaderOversize(raw.len())),
        None => Ok(raw.len()),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Message-IDs of a header (one or a list), cleaned, at most 200 bytes each.
fn ids(v: &HeaderValue) -> Vec<String> {
    match v {
        HeaderValue::Text(t) => vec![clean_id(t)],
        HeaderValue::TextList(l) => l.iter().map(|t| clean_id(t)).collect(),
        _ => Vec::new(),
    }
    .into_iter()
    .filter(|s| !s.is_empty())
    .collect()
}

/// Angle brackets and spaces stripped, control characters dropped, bounded length.
pub fn clean_id(id: &str) -> String {
    let id = id.trim().trim_start_matches('<').trim_end_matches('>');
    id.chars()
        .filter(|c| !c.is_control() && !c.is_whitespace())
        .take(200)
        .collect()
}

/// A stable id for a message that has none: the same bytes always get the same id.
pub fn generated_id(raw: &[u8]) -> String {
    let digest = Sha256::digest(raw);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}@generated.archive.invalid")
}

/// The subject threading tools compare: reply/forward prefixes and `[list]` tags removed,
/// whitespace collapsed, lowercase.
pub fn base_subject(subject: &str) -> String {
    let mut s = subject.trim();
    loop {
        let before = s;
        if s.starts_with('[') {
            if let Some(end) = s.find(']') {
                s = s[end + 1..].trim_start();
            }
        }
        for p in ["re:", "fwd:", "fw:", "aw:", "sv:", "re :"] {
            if s.len() >= p.len()
                && s.is_char_boundary(p.len())
                && s[..p.len()].eq_ignore_ascii_case(p)
            {
                s = s[p.len()..].trim_start();
            }
        }
        if s == before {
            break;
        }
    }
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// True when the subject says it is a reply (`Re:` and its translations after any `[list]`
/// tags): subject-fallback threading only joins replies.
pub fn is_reply_subject(subject: &str) -> bool {
    let mut s = subject.trim_start();
    while s.starts_with('[') {
        match s.find(']') {
            Some(end) => s = s[end + 1..].trim_start(),
            None => break,
        }
    }
    ["re:", "re :", "aw:", "sv:"].iter().any(|p| {
        s.len() >= p.len() && s.is_char_boundary(p.len()) && s[..p.len()].eq_ignore_ascii_case(p)
    })
}

fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_threading_fields() {
        let raw = b"From: Ann <ann@example.org>\r\nSubject: Re: [dev] Hello\r\nMessage-ID: <b@x>\r\nIn-Reply-To: <a@x>\r\nReferences: <r@x> <a@x>\r\nDate: Tue, 24 Nov 2026 10:00:00 +0000\r\n\r\nbody text\r\n";
        let p = parse(raw, &Limits::default()).unwrap();
        assert_eq!(p.message_id, "b@x");
        assert_eq!(p.parent.as_deref(), Some("a@x"));
        assert_eq!(p.references, vec!["r@x".to_string(), "a@x".to_string()]);
        assert_eq!(p.from, "Ann <ann@example.org>");
        assert_eq!(p.date_ms, Some(1_795_514_400_000));
        assert!(p.text.contains("body text"));
        assert_eq!(base_subject(&p.subject), "hello");
        assert!(is_reply_subject(&p.subject));
        assert!(!is_reply_subject("[dev] Hello"));
    }

    #[test]
    fn no_message_id_gets_a_stable_generated_one() {
        let raw = b"From: a@x\r\nSubject: s\r\n\r\nb\r\n";
        let a = parse(raw, &Limits::default()).unwrap();
        let b = parse(raw, &Limits::default()).unwrap();
        assert!(a.generated_id);
        assert_eq!(a.message_id, b.message_id);
        assert!(a.message_id.ends_with("@generated.archive.invalid"));
    }

    #[test]
    fn ten_megabyte_header_is_refused() {
        let mut raw = b"From: a@x\r\nX-Big: ".to_vec();
        raw.extend(std::iter::repeat_n(b'a', 10 * 1024 * 1024));
        raw.extend_from_slice(b"\r\n\r\nbody\r\n");
        assert!(matches!(
            parse(&raw, &Limits::default()),
            Err(Refused::HeaderOversize(_))
        ));
    }

    #[test]
    fn oversize_and_garbage_are_refused() {
        let limits = Limits {
            max_message_bytes: 10,
            ..Limits::default()
        };
        assert_eq!(
            parse(b"From: a@x\r\n\r\nlong body", &limits),
            Err(Refused::Oversize(22))
        );
        assert_eq!(parse(b"", &Limits::default()), Err(Refused::Unparseable));
    }

    #[test]
    fn broken_mime_still_archives_with_its_header() {
        let raw = b"From: a@x\r\nMessage-ID: <m@x>\r\nContent-Type: multipart/mixed; boundary=\"zz\"\r\n\r\n--zz\r\nContent-Type: text/plain\r\n\r\nhi there\r\n--zz-- no end\r\n--zz\r\n";
        let p = parse(raw, &Limits::default()).unwrap();
        assert_eq!(p.message_id, "m@x");
    }

    #[test]
    fn message_id_with_path_characters_is_kept_as_text() {
        let raw = b"From: a@x\r\nMessage-ID: <../../etc/passwd%2f@x>\r\n\r\nb\r\n";
        let p = parse(raw, &Limits::default()).unwrap();
        assert_eq!(p.message_id, "../../etc/passwd%2f@x");
    }
}
