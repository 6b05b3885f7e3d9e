//! Reports as providers send them, and hostile ones.

use super::*;
use proptest::prelude::*;

const ORIGINAL: &str = "Return-Path: <dev-bounces+alice=d0.test@lists.test>\r\n\
Received: from herald.test by mx.d0.test\r\n\
From: carol@d0.test\r\n\
To: alice@d0.test\r\n\
Subject: hello\r\n\
List-Id: Dev <dev.lists.test>\r\n\
List-Unsubscribe: <https://h.test/unsubscribe/dev%40lists.test/alice%40d0.test/TOKEN0123456789abcdefg>,\r\n <mailto:dev-request@lists.test?subject=unsubscribe>\r\n\
Message-ID: <m1@d0.test>\r\n";

fn arf(feedback: &str, original_type: &str, original: &str) -> Vec<u8> {
    format!(
        "From: feedback@arf.mail.yahoo.com\r\n\
To: dev-bounces@lists.test\r\n\
Subject: FW: hello\r\n\
MIME-Version: 1.0\r\n\
Content-Type: multipart/report; report-type=feedback-report;\r\n\tboundary=\"b1\"\r\n\
\r\n\
--b1\r\n\
Content-Type: text/plain\r\n\
\r\n\
This is an email abuse report.\r\n\
--b1\r\n\
Content-Type: message/feedback-report\r\n\
\r\n\
{feedback}\
--b1\r\n\
Content-Type: {original_type}\r\n\
\r\n\
{original}\r\n\
--b1--\r\n"
    )
    .into_bytes()
}

const FIELDS: &str = "Feedback-Type: Abuse\r\nUser-Agent: Yahoo!-Mail-Feedback/2.0\r\nVersion: 1\r\nOriginal-Rcpt-To: alice@d0.test\r\n\r\n";

#[test]
fn rfc5965_with_the_original_message() {
    let body = format!("{ORIGINAL}\r\nhello\r\n");
    let c = parse(&arf(FIELDS, "message/rfc822", &body)).expect("complaint");
    assert_eq!(c.format, Format::Arf);
    assert_eq!(c.feedback_type, "abuse");
    assert_eq!(c.reporter, "Yahoo!-Mail-Feedback/2.0");
    let o = c.original.expect("original");
    assert_eq!(
        o.return_path.map(|a| a.to_string()).as_deref(),
        Some("dev-bounces+alice=d0.test@lists.test")
    );
    assert_eq!(o.list_id.as_deref(), Some("dev.lists.test"));
    let u = o.unsubscribe.expect("unsubscribe ref");
    assert_eq!(
        (u.list.to_string(), u.member.to_string()),
        ("dev@lists.test".into(), "alice@d0.test".into())
    );
    assert_eq!(u.token, "TOKEN0123456789abcdefg");
}

#[test]
fn headers_only_original_as_yahoo_and_comcast_send() {
    let c = parse(&arf(FIELDS, "text/rfc822-headers", ORIGINAL)).expect("complaint");
    assert_eq!(c.format, Format::ArfHeaders);
    let o = c.original.expect("original");
    assert_eq!(o.list_id.as_deref(), Some("dev.lists.test"));
    assert!(o.unsubscribe.is_some());
}

#[test]
fn microsoft_jmrp() {
    let raw = format!(
        "From: staff@hotmail.com\r\n\
X-HmXmrOriginalRecipient: <redacted@outlook.com>\r\n\
Subject: complaint about message from 127.0.0.1\r\n\
MIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"j\"\r\n\
\r\n\
--j\r\n\
Content-Type: text/plain\r\n\
\r\n\
This is an email abuse report.\r\n\
--j\r\n\
Content-Type: message/rfc822\r\n\
Content-Disposition: attachment\r\n\
\r\n\
{ORIGINAL}\r\nhello\r\n\
--j--\r\n"
    );
    let c = parse(raw.as_bytes()).expect("complaint");
    assert_eq!(c.format, Format::Jmrp);
    assert_eq!(c.feedback_type, "abuse");
    assert_eq!(c.reporter, "hotmail.com");
    assert!(c.original.and_then(|o| o.unsubscribe).is_some());
}

#[test]
fn a_dsn_an_auto_reply_and_garbage_are_not_complaints() {
    let dsn = b"From: MAILER-DAEMON@mx.test\r\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"x\"\r\n\r\n--x\r\nContent-Type: message/delivery-status\r\n\r\nFinal-Recipient: rfc822; a@b.test\r\nAction: failed\r\nStatus: 5.1.1\r\n\r\n--x--\r\n";
    assert_eq!(parse(dsn), None);
    assert_eq!(
        parse(b"Subject: Out of office\r\n\r\nback monday\r\n"),
        None
    );
    assert_eq!(parse(b""), None);
    assert_eq!(parse(&[0xff; 300]), None);
}

/// Hostile reports: no original, a broken one, absurd field values. Recognised as complaints
/// (so counted) with nothing to map, never a panic.
#[test]
fn hostile_reports_parse_to_nothing_mappable() {
    let c = parse(&arf(FIELDS, "text/plain", "no original here")).expect("complaint");
    assert_eq!(c.original, None);
    let long = format!(
        "Feedback-Type: {}\r\nUser-Agent: a\x01b\r\n\r\n",
        "x".repeat(100_000)
    );
    let c = parse(&arf(&long, "message/rfc822", "Return-Path: <>\r\nList-Id: <>\r\nList-Unsubscribe: <https://x/unsubscribe/%zz/a/b>\r\n\r\nx")).expect("complaint");
    assert_eq!(c.feedback_type.chars().count(), MAX_VALUE_CHARS);
    assert_eq!(c.reporter, "ab");
    let o = c.original.expect("original");
    assert_eq!(o, Original::default());
    let fields = parse_feedback_fields(&"X: y\n".repeat(100_000));
    assert_eq!(fields, FeedbackFields::default());
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_bytes(raw in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = parse(&raw);
    }

    #[test]
    fn never_panics_on_mangled_reports(cut in 0usize..1200, byte in any::<u8>(), at in 0usize..1200) {
        let mut raw = arf(FIELDS, "message/rfc822", ORIGINAL);
        if at < raw.len() { raw[at] = byte; }
        raw.truncate(cut.min(raw.len()));
        let _ = parse(&raw);
    }
}
