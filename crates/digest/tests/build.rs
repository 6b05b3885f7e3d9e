//! The digest bytes, parsed back with mail-parser: the MIME digest is multipart/mixed with a
//! table of contents and a multipart/digest holding each post, in order, as message/rfc822;
//! the plain digest follows RFC 1153 (topics, 70- and 30-hyphen separators, the end line).
//! Hostile posts (a boundary inside a post, a 30-hyphen line, CR/LF in a subject, a 5,000-byte
//! line, broken MIME) cannot break either structure.

use herald_digest::build::{build, DigestWords, Format, Masthead, MAX_LINE_BYTES};
use mail_parser::{MessageParser, MimeHeaders, PartType};

fn post(n: usize, subject: &str, body: &str) -> Vec<u8> {
    format!(
        "From: Poster {n} <p{n}@x.test>\r\nSubject: {subject}\r\nDate: Tue, 14 Nov 2023 22:13:2{n} +0000\r\n\
         Message-ID: <post{n}@x.test>\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
    )
    .into_bytes()
}

fn english() -> &'static DigestWords {
    static WORDS: std::sync::OnceLock<DigestWords> = std::sync::OnceLock::new();
    WORDS.get_or_init(|| {
        DigestWords::new(
            &herald_i18n::Words::shipped("en"),
            "dev@lists.test",
            "Dev",
            3,
            7,
        )
    })
}

fn head() -> Masthead<'static> {
    Masthead {
        list: "dev@lists.test",
        name: "Dev",
        volume: 3,
        issue: 7,
        date: "Wed, 25 Nov 2026 01:00:00 +0000",
        message_id: "digest.3.7.mime.dev.lists.test@h.test",
        words: english(),
    }
}

fn posts() -> Vec<Vec<u8>> {
    vec![
        post(
            1,
            "First topic",
            "Hello one.\r\n------------------------------\r\nafter the fake separator",
        ),
        post(2, "Grüße", "Zwei. =_herald_digest_3_7_0 in the text"),
        post(3, "Third", &"x".repeat(5000)),
    ]
}

fn lines_fit(raw: &[u8]) {
    for line in raw.split(|&b| b == b'\n') {
        assert!(
            line.len() <= MAX_LINE_BYTES + 1,
            "line of {} bytes",
            line.len()
        );
    }
    crlf_only(raw);
}

fn crlf_only(raw: &[u8]) {
    // Every LF is part of a CRLF.
    for (i, &b) in raw.iter().enumerate() {
        if b == b'\n' {
            assert!(i > 0 && raw[i - 1] == b'\r', "bare LF at {i}");
        }
    }
}

#[test]
fn mime_digest_parses_back_with_every_post_in_order() {
    let raw = build(Format::Mime, &head(), &posts());
    let m = MessageParser::new().parse(&raw).expect("parses");
    assert_eq!(m.subject(), Some("Dev Digest, Vol 3, Issue 7"));
    assert_eq!(
        m.message_id(),
        Some("digest.3.7.mime.dev.lists.test@h.test")
    );
    assert!(m
        .content_type()
        .is_some_and(|c| c.ctype() == "multipart" && c.subtype() == Some("mixed")));
    // Part 1: the table of contents, every subject numbered in order.
    let toc = m.body_text(0).expect("toc");
    let p1 = toc.find("1. First topic").expect("1");
    let p2 = toc.find("2. Grüße").expect("2");
    let p3 = toc.find("3. Third").expect("3");
    assert!(p1 < p2 && p2 < p3, "{toc}");
    // The multipart/digest part holds three message/rfc822 parts, in order.
    let digest = m
        .parts
        .iter()
        .find(|p| {
            p.content_type()
                .is_some_and(|c| c.subtype() == Some("digest"))
        })
        .expect("multipart/digest part");
    let PartType::Multipart(children) = &digest.body else {
        panic!("digest part is not multipart");
    };
    let subjects: Vec<String> = children
        .iter()
        .map(|&i| match &m.parts[i as usize].body {
            PartType::Message(inner) => inner.subject().unwrap_or_default().to_string(),
            other => panic!("part is not message/rfc822: {other:?}"),
        })
        .collect();
    assert_eq!(subjects, ["First topic", "Grüße", "Third"]);
    // A post's own text survives byte for byte (the boundary-like text included).
    let PartType::Message(second) = &m.parts[children[1] as usize].body else {
        unreachable!()
    };
    assert!(second
        .body_text(0)
        .expect("text")
        .contains("=_herald_digest_3_7_0 in the text"));
    // Posts go in as archived (a 5,000-byte line too: SMTP refused such lines on the way in,
    // so only an imported post can hold one); the digest adds only CRLF lines of its own.
    crlf_only(&raw);
}

#[test]
fn plain_digest_follows_rfc_1153() {
    let raw = build(Format::Plain, &head(), &posts());
    let m = MessageParser::new().parse(&raw).expect("parses");
    assert!(m
        .content_type()
        .is_some_and(|c| c.ctype() == "text" && c.subtype() == Some("plain")));
    let text = m.body_text(0).expect("text").replace("\r\n", "\n");
    assert!(text.starts_with("Dev Digest, Vol 3, Issue 7\n\nToday's Topics:\n\n   1. First topic (Poster 1 <p1@x.test>)\n"), "{text}");
    assert!(text.contains(&format!("\n{}\n\n", "-".repeat(70))));
    // Messages are separated by exactly-30-hyphen lines: three posts, three separators, and the
    // post's own 30-hyphen line was shifted so it is not one.
    let seps = text.lines().filter(|l| *l == "-".repeat(30)).count();
    assert_eq!(seps, 3, "{text}");
    assert!(text.contains(&format!("\n {}\nafter the fake separator", "-".repeat(30))));
    let first = text.find("Subject: First topic").expect("1");
    let second = text.find("Subject: Grüße").expect("2");
    let third = text.find("Subject: Third").expect("3");
    assert!(first < second && second < third);
    assert!(text.trim_end().ends_with(&format!(
        "End of Dev Digest, Vol 3, Issue 7\n{}",
        "*".repeat("End of Dev Digest, Vol 3, Issue 7".len())
    )));
    lines_fit(&raw);
}

#[test]
fn hostile_headers_cannot_add_digest_headers() {
    // A subject decoded from an encoded word can hold CR/LF; it must stay on its TOC line.
    let evil = b"From: a@x.test\r\nSubject: =?utf-8?q?hi=0D=0ABcc:_victim@x.test?=\r\n\r\nbody\r\n"
        .to_vec();
    let broken = b"\xff\xfe not a message at all".to_vec();
    for f in [Format::Mime, Format::Plain] {
        let raw = build(f, &head(), &[evil.clone(), broken.clone()]);
        let m = MessageParser::new().parse(&raw).expect("parses");
        assert!(m.header("Bcc").is_none(), "{f:?}");
        let text = String::from_utf8_lossy(&raw);
        assert!(!text.contains("\r\nBcc: victim"), "{f:?}");
        assert!(
            text.contains("1. hi  Bcc:_victim@x.test")
                || text.contains("1. hi  Bcc: victim@x.test"),
            "{f:?}: {text}"
        );
        lines_fit(&raw);
    }
}

#[test]
fn an_empty_display_name_uses_the_local_part() {
    let en = herald_i18n::Words::shipped("en");
    let w = DigestWords::new(&en, "dev@lists.test", "", 3, 7);
    assert_eq!(w.title, "dev Digest, Vol 3, Issue 7");
    assert_eq!(head().title(), "Dev Digest, Vol 3, Issue 7");
}

/// A German list's digest speaks German, and a list's own wording of a heading is used —
/// with its line breaks flattened, so an owner's text cannot add a header or a line.
#[test]
fn the_digest_is_written_in_the_lists_language_and_words() {
    let de = herald_i18n::Words::shipped("de");
    let w = DigestWords::new(&de, "dev@lists.test", "Dev", 3, 7);
    assert_eq!(w.title, "Dev Sammelnachricht, Jahrgang 3, Ausgabe 7");
    assert_eq!(w.topics, "Themen dieser Ausgabe:");
    let texts = herald_i18n::Overrides::new([herald_i18n::Override {
        id: "digest-title".into(),
        language: "de".into(),
        text: "Neues aus { $name }\nBcc: x@evil.test (Nr. { $issue })".into(),
    }]);
    let own = herald_i18n::Words {
        lang: "de",
        overrides: &texts,
    };
    let w = DigestWords::new(&own, "dev@lists.test", "Dev", 3, 7);
    assert_eq!(w.title, "Neues aus Dev Bcc: x@evil.test (Nr. 7)");
    let mut h = head();
    h.words = Box::leak(Box::new(w));
    for f in [Format::Mime, Format::Plain] {
        let raw = String::from_utf8(build(f, &h, &posts())).expect("utf-8");
        let head_block = raw.split("\r\n\r\n").next().expect("header block");
        assert!(!head_block.contains("\r\nBcc:"), "{head_block}");
        assert!(raw.contains("Themen dieser Ausgabe:"), "{f:?}");
        if f == Format::Plain {
            // (A MIME digest carries each post byte for byte, long lines included.)
            lines_fit(raw.as_bytes());
        }
    }
}
