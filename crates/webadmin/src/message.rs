//! A held post as a moderator reads it: a few headers, the text body, and the attachments by
//! name, type and size — read with mail-parser, bounded, and never rendered as HTML (a post
//! that has only an HTML part is shown as the text mail-parser converts it to).
//!
//! SECURITY: the message is whatever a stranger sent the list. Nothing of it is trusted:
//! every string is bounded ([`MAX_TEXT_CHARS`], [`MAX_HEADER_CHARS`], [`MAX_ATTACHMENTS`]),
//! control characters but line breaks and tabs are dropped, and the page escapes everything
//! (maud). Attachments are never served, only named.

use mail_parser::{MessageParser, MimeHeaders};

/// Most characters of the body shown.
pub const MAX_TEXT_CHARS: usize = 100_000;
/// Most characters of one header value shown.
pub const MAX_HEADER_CHARS: usize = 1000;
/// Most attachments listed.
pub const MAX_ATTACHMENTS: usize = 100;

/// One attachment, by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub name: String,
    pub content_type: String,
    pub bytes: u64,
}

/// What the held-post page shows of a message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageView {
    /// (name, value) of From, To, Cc, Reply-To, Subject, Date, Message-ID when present.
    pub headers: Vec<(&'static str, String)>,
    pub subject: String,
    pub text: String,
    /// The body was longer than [`MAX_TEXT_CHARS`].
    pub truncated: bool,
    /// The post has no text part: `text` is converted from its HTML.
    pub from_html: bool,
    pub attachments: Vec<Attachment>,
    /// More attachments than [`MAX_ATTACHMENTS`].
    pub more_attachments: usize,
}

/// Drops control characters (keeping line breaks and tabs when `lines`) and bounds the length.
fn clean(s: &str, max: usize, lines: bool) -> (String, bool) {
    let mut out = String::with_capacity(s.len().min(max));
    let mut n = 0;
    for c in s.chars() {
        if n == max {
            return (out, true);
        }
        let keep = !c.is_control() || (lines && (c == '\n' || c == '\t'));
        if keep {
            out.push(c);
            n += 1;
        }
    }
    (out, false)
}

fn addresses(a: Option<&mail_parser::Address<'_>>) -> Option<String> {
    let list: Vec<String> = a?
        .iter()
        .take(50)
        .map(|x| match (&x.name, &x.address) {
            (Some(n), Some(a)) => format!("{n} <{a}>"),
            (None, Some(a)) => a.to_string(),
            (Some(n), None) => n.to_string(),
            (None, None) => String::new(),
        })
        .collect();
    Some(list.join(", "))
}

/// The decoded Subject of `raw` (headers only), cleaned and bounded: for the held list.
pub fn subject_of(raw: &[u8]) -> String {
    let parsed = MessageParser::default().parse_headers(raw);
    let subject = parsed.as_ref().and_then(|m| m.subject()).unwrap_or("");
    clean(subject, MAX_HEADER_CHARS, false).0
}

impl MessageView {
    /// Reads `raw`; a message mail-parser cannot read at all is shown as its first bytes.
    pub fn parse(raw: &[u8]) -> MessageView {
        let Some(m) = MessageParser::default().parse(raw) else {
            let (text, truncated) = clean(&String::from_utf8_lossy(raw), MAX_TEXT_CHARS, true);
            return MessageView {
                text,
                truncated,
                ..MessageView::default()
            };
        };
        let mut headers = Vec::new();
        let mut put = |name: &'static str, v: Option<String>| {
            if let Some(v) = v {
                headers.push((name, clean(&v, MAX_HEADER_CHARS, false).0));
            }
        };
        put("From", addresses(m.from()));
        put("To", addresses(m.to()));
        put("Cc", addresses(m.cc()));
        put("Reply-To", addresses(m.reply_to()));
        put("Subject", m.subject().map(str::to_string));
        put("Date", m.date().map(|d| d.to_rfc3339()));
        put("Message-ID", m.message_id().map(str::to_string));
        let subject = clean(m.subject().unwrap_or(""), MAX_HEADER_CHARS, false).0;
        let from_html = m.text_part(0).is_some_and(|p| p.is_text_html());
        let body = m.body_text(0).unwrap_or_default();
        let (text, truncated) = clean(&body, MAX_TEXT_CHARS, true);
        let all: Vec<_> = m.attachments().collect();
        let attachments = all
            .iter()
            .take(MAX_ATTACHMENTS)
            .map(|p| Attachment {
                name: clean(p.attachment_name().unwrap_or("(no name)"), 255, false).0,
                content_type: p
                    .content_type()
                    .map(|c| match c.subtype() {
                        Some(s) => format!("{}/{s}", c.ctype()),
                        None => c.ctype().to_string(),
                    })
                    .map(|t| clean(&t, 127, false).0)
                    .unwrap_or_else(|| "application/octet-stream".into()),
                bytes: p.len() as u64,
            })
            .collect();
        MessageView {
            headers,
            subject,
            text,
            truncated,
            from_html,
            attachments,
            more_attachments: all.len().saturating_sub(MAX_ATTACHMENTS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_stays_text_and_attachments_are_named() {
        let raw = b"From: \"Eve <script>\" <eve@x.test>\r\nTo: dev@lists.test\r\n\
Subject: =?utf-8?q?Hi_<img_src=3Dx_onerror=3Dalert(1)>?=\r\nMessage-ID: <1@x.test>\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n\
--b\r\nContent-Type: text/html\r\n\r\n<p>Hello <script>alert(2)</script></p>\r\n\
--b\r\nContent-Type: application/x-msdownload; name=\"run\x07.exe\"\r\n\
Content-Disposition: attachment; filename=\"run.exe\"\r\nContent-Transfer-Encoding: base64\r\n\r\nTVqQAAMAAAAEAAAA\r\n--b--\r\n";
        let v = MessageView::parse(raw);
        assert_eq!(
            v.subject, "Hi <img src=x onerror=alert(1)>",
            "decoded, escaped later"
        );
        assert!(v.from_html);
        assert!(!v.text.contains("<p>"), "converted to text: {:?}", v.text);
        assert_eq!(v.attachments.len(), 1);
        assert_eq!(v.attachments[0].name, "run.exe");
        assert_eq!(v.attachments[0].content_type, "application/x-msdownload");
        assert_eq!(v.attachments[0].bytes, 12);
    }

    #[test]
    fn hostile_bodies_are_bounded() {
        let mut raw = b"Subject: x\r\n\r\n".to_vec();
        raw.extend(std::iter::repeat_n(b'a', MAX_TEXT_CHARS + 10));
        raw.extend_from_slice(b"\x1b[31m\x00");
        let v = MessageView::parse(&raw);
        assert!(v.truncated && v.text.chars().count() == MAX_TEXT_CHARS);
        let garbage = MessageView::parse(b"\x00\x01\xff\xfe");
        assert!(garbage.text.chars().all(|c| !c.is_control()));
        let empty = MessageView::parse(b"");
        assert!(empty.attachments.is_empty());
    }
}
