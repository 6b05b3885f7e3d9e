//! Golden tests: the exact bytes of every kind of mail the lists stage generates, with a fixed
//! [`Stamp`] (date, Message-ID, boundary) and fixed tokens. A change in what Herald writes shows
//! up here line by line; the hostile cases show a subject with CR/LF and 8-bit text coming out
//! as encoded words in one header, never as a header of its own.

use crate::mail::{compose, Stamp};
use crate::notices::{self, HeldPost, Notice};
use crate::requests;
use bytes::Bytes;
use herald_i18n::Words;
use herald_types::token::{self, Action, Moderation};
use herald_types::{Address, PostId};

const STAMP: Stamp = Stamp {
    now_secs: 1_700_000_000,
    nonce: 0x0123_4567_89ab_cdef,
};

fn a(s: &str) -> Address {
    Address::parse(s).expect("address")
}

fn list() -> Address {
    a("dev@lists.test")
}

/// The notice as the lists stage sends it to `to`.
fn built(to: &str, n: &Notice) -> Bytes {
    compose("herald.test", &list(), &a(to), &n.subject, &n.text, STAMP)
}

fn confirmation() -> Bytes {
    let (l, bob) = (list(), a("bob@d0.test"));
    let t = token::confirmation_token(b"secret", Action::Subscribe, &l, &bob, 1000);
    let url = format!("https://lists.test/confirm/{t}");
    built(
        "bob@d0.test",
        &notices::confirmation(&Words::shipped("en"), Action::Subscribe, &bob, &l, &t, &url),
    )
}

fn request_reply() -> Bytes {
    let n = notices::request_reply(
        &Words::shipped("en"),
        &list(),
        requests::help_text(&Words::shipped("en"), &list()),
    );
    built("bob@d0.test", &n)
}

fn held() -> Bytes {
    built(
        "stranger@d9.test",
        &notices::held(&Words::shipped("en"), &list(), "not a member", 14),
    )
}

fn moderation(subject: &str) -> Bytes {
    let l = list();
    let sign = |m| token::moderation_token(b"secret", m, &l, PostId(0xAB), 1000);
    let post = HeldPost {
        list: &l,
        poster: "stranger@d9.test",
        reason: "not a member",
        subject,
        id: PostId(0xAB),
        expiry_days: 14,
    };
    let n = notices::moderation(
        &Words::shipped("en"),
        &post,
        &sign(Moderation::Approve),
        &sign(Moderation::Reject),
    );
    built("boss@d0.test", &n)
}

fn rejected() -> Bytes {
    built(
        "stranger@d9.test",
        &notices::rejected(&Words::shipped("en"), &list()),
    )
}

fn disabled() -> Bytes {
    let n = notices::disabled(
        &Words::shipped("en"),
        &list(),
        &a("bob@d0.test"),
        "5.1.1 user unknown (3 bounces)",
    );
    built("bob@d0.test", &n)
}

fn hostile(subject: &str) -> Bytes {
    let n = Notice {
        subject: subject.into(),
        text: "x\n".into(),
    };
    built("bob@d0.test", &n)
}

/// The message as text, for a line-by-line diff when it differs.
fn text(b: &Bytes) -> &str {
    std::str::from_utf8(b).expect("generated mail is UTF-8")
}

/// The header section parsed back: (name, raw value) pairs.
fn header_names(b: &Bytes) -> Vec<String> {
    let parsed = mail_parser::MessageParser::new().parse_headers(&b[..]);
    parsed
        .iter()
        .flat_map(|m| m.headers_raw())
        .map(|(name, _)| name.to_ascii_lowercase())
        .collect()
}

const HEADERS: [&str; 10] = [
    "from",
    "to",
    "reply-to",
    "subject",
    "date",
    "message-id",
    "auto-submitted",
    "precedence",
    "mime-version",
    "content-type",
];

/// The long token goes out whole, folded before it (not quoted-printable split mid-token), the
/// link on one line: a reply or a click carries it intact.
#[test]
fn a_confirmation_request_is_byte_for_byte_this() {
    assert_eq!(text(&confirmation()), CONFIRMATION);
}

#[test]
fn a_request_reply_is_byte_for_byte_this() {
    assert_eq!(text(&request_reply()), REQUEST_REPLY);
}

#[test]
fn a_held_post_notice_is_byte_for_byte_this() {
    assert_eq!(text(&held()), HELD);
}

/// The approve token stays one word in the subject, the reject token one line in the body.
#[test]
fn a_moderator_notice_is_byte_for_byte_this() {
    assert_eq!(text(&moderation("Hello, world")), MODERATION);
}

/// A held post's 8-bit subject is quoted in the body: the part becomes `8bit`, the headers
/// do not change.
#[test]
fn a_moderator_notice_quoting_8bit_text_is_byte_for_byte_this() {
    assert_eq!(text(&moderation("Grüße aus Köln")), MODERATION_8BIT);
}

#[test]
fn a_rejection_notice_is_byte_for_byte_this() {
    assert_eq!(text(&rejected()), REJECTED);
}

#[test]
fn a_disabled_member_notice_is_byte_for_byte_this() {
    assert_eq!(text(&disabled()), DISABLED);
}

/// CR/LF in an ASCII subject: folded into the one Subject header, no `Bcc:` of its own.
#[test]
fn a_subject_with_crlf_stays_one_header() {
    let b = hostile("Re: x\r\nBcc: victim@x.test");
    assert_eq!(text(&b), HOSTILE_ASCII);
    let names = header_names(&b);
    assert!(!names.iter().any(|n| n == "bcc"), "{names:?}");
    assert_eq!(
        names,
        HEADERS
            .iter()
            .chain(&["content-transfer-encoding"])
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    );
}

/// CR/LF and 8-bit text: RFC 2047 encoded words in the one Subject header, which decode back
/// to the text (line breaks included, as data, not as headers).
#[test]
fn a_subject_with_crlf_and_8bit_text_comes_out_encoded() {
    let subject = "Grüße\r\nBcc: victim@x.test\nX-Evil: 1";
    let b = hostile(subject);
    assert_eq!(text(&b), HOSTILE_8BIT);
    let names = header_names(&b);
    assert!(
        !names.iter().any(|n| n == "bcc" || n == "x-evil"),
        "{names:?}"
    );
    let parsed = mail_parser::MessageParser::new()
        .parse(&b[..])
        .expect("parses");
    assert_eq!(parsed.subject(), Some(subject));
}

/// Every kind carries the headers receivers rely on: automatic (RFC 3834), list precedence,
/// from and replies to the request address, Message-ID in Herald's domain.
#[test]
fn every_kind_is_marked_automatic_and_comes_from_the_request_address() {
    for b in [
        confirmation(),
        request_reply(),
        held(),
        moderation("s"),
        rejected(),
        disabled(),
    ] {
        let m = mail_parser::MessageParser::new()
            .parse(&b[..])
            .expect("parses");
        let raw = |h: &'static str| m.header_raw(h).map(str::trim);
        assert_eq!(raw("Auto-Submitted"), Some("auto-replied"));
        assert_eq!(raw("Precedence"), Some("list"));
        let first = |a: Option<&mail_parser::Address<'_>>| {
            a.and_then(|a| a.first())
                .and_then(|a| a.address())
                .map(str::to_string)
        };
        assert_eq!(first(m.from()).as_deref(), Some("dev-request@lists.test"));
        assert_eq!(
            first(m.reply_to()).as_deref(),
            Some("dev-request@lists.test")
        );
        assert_eq!(m.message_id(), Some("herald.0123456789abcdef@herald.test"));
    }
}

const CONFIRMATION: &str = concat!(
        "From: <dev-request@lists.test>\r\n",
        "To: <bob@d0.test>\r\n",
        "Reply-To: <dev-request@lists.test>\r\n",
        "Subject: confirm\r\n",
        " c3wxMDAwfGRldkBsaXN0cy50ZXN0fGJvYkBkMC50ZXN0.RWjCO5CeuSjNbHpGQiLOZQ\r\n",
        "Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n",
        "Message-ID: <herald.0123456789abcdef@herald.test>\r\n",
        "Auto-Submitted: auto-replied\r\n",
        "Precedence: list\r\n",
        "MIME-Version: 1.0\r\n",
        "Content-Type: text/plain; charset=\"utf-8\"\r\n",
        "Content-Transfer-Encoding: 7bit\r\n",
        "\r\n",
        "Somebody (probably you) asked to subscribe bob@d0.test to the list dev@lists.test.\r\n",
        "\r\n",
        "To confirm, open this link:\r\n",
        "\r\n",
        "  https://lists.test/confirm/c3wxMDAwfGRldkBsaXN0cy50ZXN0fGJvYkBkMC50ZXN0.RWjCO5CeuSjNbHpGQiLOZQ\r\n",
        "\r\n",
        "or simply reply to this message (keep the subject).\r\n",
        "\r\n",
        "If you did not ask for this, ignore this message: nothing changes.\r\n",
);

const REQUEST_REPLY: &str = concat!(
        "From: <dev-request@lists.test>\r\n",
        "To: <bob@d0.test>\r\n",
        "Reply-To: <dev-request@lists.test>\r\n",
        "Subject: Re: your request to dev@lists.test\r\n",
        "Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n",
        "Message-ID: <herald.0123456789abcdef@herald.test>\r\n",
        "Auto-Submitted: auto-replied\r\n",
        "Precedence: list\r\n",
        "MIME-Version: 1.0\r\n",
        "Content-Type: text/plain; charset=\"utf-8\"\r\n",
        "Content-Transfer-Encoding: 7bit\r\n",
        "\r\n",
        "This is the request address of the mailing list dev@lists.test.\r\n",
        "\r\n",
        "Send a mail to dev-request@lists.test with one of these words in the subject or the first line:\r\n",
        "\r\n",
        "  subscribe     join the list (you will be asked to confirm)\r\n",
        "  unsubscribe   leave the list (you will be asked to confirm)\r\n",
        "  set digest mime|plain|off   receive digests instead of single posts, or not\r\n",
        "  set nomail on|off          stop (or resume) list mail, staying a member\r\n",
        "  help          this text\r\n",
);

const HELD: &str = concat!(
    "From: <dev-request@lists.test>\r\n",
    "To: <stranger@d9.test>\r\n",
    "Reply-To: <dev-request@lists.test>\r\n",
    "Subject: Your message is held for moderation\r\n",
    "Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n",
    "Message-ID: <herald.0123456789abcdef@herald.test>\r\n",
    "Auto-Submitted: auto-replied\r\n",
    "Precedence: list\r\n",
    "MIME-Version: 1.0\r\n",
    "Content-Type: text/plain; charset=\"utf-8\"\r\n",
    "Content-Transfer-Encoding: 7bit\r\n",
    "\r\n",
    "Your message to dev@lists.test is held for a moderator (not a member).\r\n",
    "You will not hear again unless it is approved; it expires after 14 days.\r\n",
);

const MODERATION: &str = concat!(
    "From: <dev-request@lists.test>\r\n",
    "To: <boss@d0.test>\r\n",
    "Reply-To: <dev-request@lists.test>\r\n",
    "Subject: approve\r\n",
    " YXwxMDAwfGRldkBsaXN0cy50ZXN0fDAwMDAwMDAwMDAwMDAwQUI.TP3VeK3tiWKN9t4PYHFB2A\r\n",
    "Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n",
    "Message-ID: <herald.0123456789abcdef@herald.test>\r\n",
    "Auto-Submitted: auto-replied\r\n",
    "Precedence: list\r\n",
    "MIME-Version: 1.0\r\n",
    "Content-Type: text/plain; charset=\"utf-8\"\r\n",
    "Content-Transfer-Encoding: 7bit\r\n",
    "\r\n",
    "A post to dev@lists.test from stranger@d9.test is held for moderation (not a member).\r\n",
    "Its subject: Hello, world\r\n",
    "Held post: 00000000000000AB\r\n",
    "\r\n",
    "To approve it, reply to this message (keep the subject).\r\n",
    "To reject it, send a mail to dev-request@lists.test with this subject:\r\n",
    "\r\n",
    "  reject cnwxMDAwfGRldkBsaXN0cy50ZXN0fDAwMDAwMDAwMDAwMDAwQUI.Gpl9tIz1M4_Xu497vZ6log\r\n",
    "\r\n",
    "Nobody acting, it expires after 14 days.\r\n",
);

const MODERATION_8BIT: &str = concat!(
    "From: <dev-request@lists.test>\r\n",
    "To: <boss@d0.test>\r\n",
    "Reply-To: <dev-request@lists.test>\r\n",
    "Subject: approve\r\n",
    " YXwxMDAwfGRldkBsaXN0cy50ZXN0fDAwMDAwMDAwMDAwMDAwQUI.TP3VeK3tiWKN9t4PYHFB2A\r\n",
    "Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n",
    "Message-ID: <herald.0123456789abcdef@herald.test>\r\n",
    "Auto-Submitted: auto-replied\r\n",
    "Precedence: list\r\n",
    "MIME-Version: 1.0\r\n",
    "Content-Type: text/plain; charset=\"utf-8\"\r\n",
    "Content-Transfer-Encoding: 8bit\r\n",
    "\r\n",
    "A post to dev@lists.test from stranger@d9.test is held for moderation (not a member).\r\n",
    "Its subject: Grüße aus Köln\r\n",
    "Held post: 00000000000000AB\r\n",
    "\r\n",
    "To approve it, reply to this message (keep the subject).\r\n",
    "To reject it, send a mail to dev-request@lists.test with this subject:\r\n",
    "\r\n",
    "  reject cnwxMDAwfGRldkBsaXN0cy50ZXN0fDAwMDAwMDAwMDAwMDAwQUI.Gpl9tIz1M4_Xu497vZ6log\r\n",
    "\r\n",
    "Nobody acting, it expires after 14 days.\r\n",
);

const REJECTED: &str = concat!(
    "From: <dev-request@lists.test>\r\n",
    "To: <stranger@d9.test>\r\n",
    "Reply-To: <dev-request@lists.test>\r\n",
    "Subject: Your message was rejected\r\n",
    "Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n",
    "Message-ID: <herald.0123456789abcdef@herald.test>\r\n",
    "Auto-Submitted: auto-replied\r\n",
    "Precedence: list\r\n",
    "MIME-Version: 1.0\r\n",
    "Content-Type: text/plain; charset=\"utf-8\"\r\n",
    "Content-Transfer-Encoding: 7bit\r\n",
    "\r\n",
    "Your message to dev@lists.test was rejected by a moderator and will not be distributed.\r\n",
);

const DISABLED: &str = concat!(
        "From: <dev-request@lists.test>\r\n",
        "To: <bob@d0.test>\r\n",
        "Reply-To: <dev-request@lists.test>\r\n",
        "Subject: Your subscription to dev@lists.test is disabled\r\n",
        "Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n",
        "Message-ID: <herald.0123456789abcdef@herald.test>\r\n",
        "Auto-Submitted: auto-replied\r\n",
        "Precedence: list\r\n",
        "MIME-Version: 1.0\r\n",
        "Content-Type: text/plain; charset=\"utf-8\"\r\n",
        "Content-Transfer-Encoding: 7bit\r\n",
        "\r\n",
        "Mail from the list dev@lists.test to bob@d0.test has been bouncing, so your subscription is now\r\n",
        "disabled: you will not receive posts.\r\n",
        "\r\n",
        "Why: 5.1.1 user unknown (3 bounces)\r\n",
        "\r\n",
        "To receive the list again, send a mail to dev-request@lists.test with the subject\r\n",
        "'subscribe' and confirm the answer.\r\n",
);

const HOSTILE_ASCII: &str = concat!(
    "From: <dev-request@lists.test>\r\n",
    "To: <bob@d0.test>\r\n",
    "Reply-To: <dev-request@lists.test>\r\n",
    "Subject: Re: x Bcc: victim@x.test\r\n",
    "Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n",
    "Message-ID: <herald.0123456789abcdef@herald.test>\r\n",
    "Auto-Submitted: auto-replied\r\n",
    "Precedence: list\r\n",
    "MIME-Version: 1.0\r\n",
    "Content-Type: text/plain; charset=\"utf-8\"\r\n",
    "Content-Transfer-Encoding: 7bit\r\n",
    "\r\n",
    "x\r\n",
);

const HOSTILE_8BIT: &str = concat!(
    "From: <dev-request@lists.test>\r\n",
    "To: <bob@d0.test>\r\n",
    "Reply-To: <dev-request@lists.test>\r\n",
    "Subject: =?utf-8?Q?Gr=C3=BC=C3=9Fe=0D=0ABcc:_victim@x.test=0AX-Evil:_1?=\r\n",
    "Date: Tue, 14 Nov 2023 22:13:20 +0000\r\n",
    "Message-ID: <herald.0123456789abcdef@herald.test>\r\n",
    "Auto-Submitted: auto-replied\r\n",
    "Precedence: list\r\n",
    "MIME-Version: 1.0\r\n",
    "Content-Type: text/plain; charset=\"utf-8\"\r\n",
    "Content-Transfer-Encoding: 7bit\r\n",
    "\r\n",
    "x\r\n",
);

/// A list whose `language` is `de` writes German: the text from the German catalogue (UTF-8,
/// its umlauts intact through the transfer encoding), the command word in the subject left as
/// the request parser reads it, the link whole.
#[test]
fn a_german_list_writes_its_notices_in_german() {
    let (l, bob) = (list(), a("bob@d0.test"));
    let t = token::confirmation_token(b"secret", Action::Subscribe, &l, &bob, 1000);
    let url = format!("https://lists.test/confirm/{t}");
    let n = notices::confirmation(&Words::shipped("de"), Action::Subscribe, &bob, &l, &t, &url);
    assert_eq!(n.subject, format!("confirm {t}"));
    let raw = built("bob@d0.test", &n);
    let parsed = mail_parser::MessageParser::new()
        .parse(&raw[..])
        .expect("parses");
    let body = parsed.body_text(0).expect("text");
    assert!(
        body.contains("in die Liste dev@lists.test einzutragen"),
        "{body}"
    );
    assert!(
        body.contains("Zum Bestätigen öffnen Sie diesen Link"),
        "{body}"
    );
    assert!(body.contains(&url), "{body}");
    let held = notices::held(&Words::shipped("de"), &l, "kein Mitglied", 14);
    assert_eq!(held.subject, "Ihre Nachricht wartet auf Freigabe");
    assert!(held.text.ends_with("verfällt sie.\n"), "{}", held.text);
}
