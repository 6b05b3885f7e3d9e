//! Behaviour of render/splice beyond the golden files: injection, personalization off, errors,
//! tokens in copies, line limits.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

mod common;

use common::*;
use herald_fanout::{render, verify_unsubscribe_token, FanoutError, ListContext, MAX_HEADER_BYTES};
use herald_types::{ListSettings, ReplyToPolicy};
use mail_parser::{Address as MpAddress, MessageParser};

const POST: &[u8] = b"From: Alice <alice@example.com>\r\nTo: announce@lists.example.org\r\nSubject: hi\r\n\r\nbody\r\n";

fn settings(footer: Option<&str>, personalize: bool) -> ListSettings {
    ListSettings {
        display_name: "Announcements".into(),
        subject_prefix: Some("[announce]".into()),
        footer: footer.map(str::to_string),
        personalize,
        ..ListSettings::default()
    }
}

fn copy(settings: ListSettings, post: &[u8], m: &herald_types::Member) -> Vec<u8> {
    let t = render(
        &list("announce@lists.example.org", settings),
        &ctx(None),
        post,
    )
    .unwrap();
    let mut out = Vec::new();
    t.splice(m, &mut out);
    check_wire(&out);
    out
}

fn to_header(copy: &[u8]) -> (Option<String>, Option<String>) {
    let plain = undot(copy);
    let msg = MessageParser::new().parse(&plain).unwrap();
    match msg.to() {
        Some(MpAddress::List(list)) if list.len() == 1 => (
            list[0].name.as_ref().map(|n| n.to_string()),
            list[0].address.as_ref().map(|a| a.to_string()),
        ),
        other => panic!("To is not one address: {other:?}"),
    }
}

#[test]
fn hostile_display_names_never_add_header_lines() {
    let baseline = header_names(&copy(
        settings(None, true),
        POST,
        &member("m@example.com", Some("Plain"), &[]),
    ));
    let hostile = [
        "Eve\r\nBcc: victim@x",
        "Eve\nBcc: victim@x",
        "Eve\rBcc: victim@x",
        "Eve\0\x01\x1b[31m\x7f\u{85}\u{2028}Bcc: x",
        "\"quoted\\\" <evil@x>, other@y",
        "=?utf-8?B?RXZlDQpCY2M6IHZpY3RpbUB4?=",
        &"ü".repeat(400),
        &"a".repeat(5000),
    ];
    for name in hostile {
        let m = member("m@example.com", Some(name), &[]);
        let out = copy(settings(None, true), POST, &m);
        assert_eq!(header_names(&out), baseline, "name {name:?}");
        let (_, address) = to_header(&out);
        assert_eq!(address.as_deref(), Some("m@example.com"), "name {name:?}");
        for line in out.split(|&b| b == b'\n').take_while(|l| *l != b"\r") {
            assert!(
                !line.iter().any(|&b| b < 0x20 && b != b'\r' && b != b'\t'),
                "control byte in {name:?}"
            );
        }
    }
}

#[test]
fn non_ascii_name_round_trips_through_rfc2047() {
    let name = "Zoë Ünïcödé 日本語の名前 with a rather long tail to force several encoded words";
    let out = copy(
        settings(None, true),
        POST,
        &member("zoe@example.com", Some(name), &[]),
    );
    assert_eq!(
        to_header(&out),
        (Some(name.to_string()), Some("zoe@example.com".to_string()))
    );
    let header_end = find(&out, b"\r\n\r\n").unwrap();
    for line in out[..header_end].split(|&b| b == b'\n') {
        if line.starts_with(b"To:") || line.starts_with(b" =?") {
            assert!(line.len() <= 79, "folded To line too long");
        }
    }
}

#[test]
fn custom_fields_with_line_breaks_stay_on_their_line() {
    let footer = "A {{evil}} Z\n{{evil}}\n{{name}}";
    let m = member(
        "m@example.com",
        Some(".\r\n.\r\nQUIT"),
        &[("evil", "x\r\n.\r\nMAIL FROM:<a@b>\r\n--=_herald_\0\x07")],
    );
    let out = copy(settings(Some(footer), true), POST, &m);
    let text = String::from_utf8(undot(&out)).unwrap();
    assert!(text.ends_with("\r\nbody\r\n\r\nA x . MAIL FROM:<a@b> --=_herald_ Z\r\nx . MAIL FROM:<a@b> --=_herald_\r\n. . QUIT\r\n"), "{text}");
    check_structure(
        "fields",
        POST,
        &out,
        Some("A x . MAIL FROM:<a@b> --=_herald_ Z"),
    );
}

#[test]
fn footer_lines_stay_under_998_octets_whatever_the_values() {
    let footer = "{{a}}{{b}}{{c}} and {{name}}\n{{a}}";
    let big = "é".repeat(3000);
    let m = member(
        "m@example.com",
        Some(&big),
        &[("a", &big), ("b", &big), ("c", &big)],
    );
    let out = copy(settings(Some(footer), true), POST, &m);
    for line in out.split(|&b| b == b'\n') {
        assert!(line.len() <= 999);
        assert!(
            std::str::from_utf8(line).is_ok(),
            "a value was cut inside a character"
        );
    }
}

#[test]
fn personalize_off_keeps_to_and_renders_only_the_url() {
    let footer = "{{name}}|{{email}}|{{company}}|{{unsubscribe_url}}";
    let m = member("bob@example.com", Some("Bob"), &[("company", "Acme")]);
    let out = copy(settings(Some(footer), false), POST, &m);
    let text = String::from_utf8(out.clone()).unwrap();
    assert!(text.contains("\r\nTo: announce@lists.example.org\r\n"));
    assert!(text.contains("\r\n|||https://lists.example.org/unsubscribe/announce%40lists.example.org/bob%40example.com/"));
    assert!(!text.contains("Bob") && !text.contains("Acme"));
}

#[test]
fn tokens_in_copies_verify() {
    let l = list(
        "announce@lists.example.org",
        settings(Some("{{unsubscribe_url}}"), true),
    );
    let t = render(&l, &ctx(None), POST).unwrap();
    let mut out = Vec::new();
    for who in [
        "a@example.com",
        "o'brien+tag@example.ie",
        "\"john doe\"@example.com",
    ] {
        let m = member(who, None, &[]);
        t.splice(&m, &mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        let header = text
            .lines()
            .find(|l| l.starts_with("List-Unsubscribe: <"))
            .unwrap();
        let url = header
            .trim_start_matches("List-Unsubscribe: <")
            .trim_end_matches(">,");
        let token = url.rsplit('/').next().unwrap();
        assert!(verify_unsubscribe_token(
            common::SECRET,
            &l.address,
            &m.address,
            token
        ));
        assert!(
            text.contains(&format!("\r\n{url}\r\n")),
            "footer URL differs from header URL"
        );
        assert!(!verify_unsubscribe_token(
            common::SECRET,
            &l.address,
            &addr("x@example.com"),
            token
        ));
    }
}

#[test]
fn return_path_is_verp() {
    let t = render(
        &list("announce@lists.example.org", settings(None, true)),
        &ctx(None),
        POST,
    )
    .unwrap();
    let m = member("bob@example.com", None, &[]);
    assert_eq!(
        t.return_path(&m),
        "announce-bounces+bob=example.com@lists.example.org"
    );
    let mut out = Vec::new();
    t.splice(&m, &mut out);
    assert!(t.size_hint() >= out.len());
}

#[test]
fn verbatim_mail_can_go_out_with_the_null_reverse_path() {
    let list = herald_types::Address::parse("postmaster@lists.example.org").unwrap();
    let m = member("ops@example.com", None, &[]);
    let t = herald_fanout::verbatim(&list, &ctx(None), POST);
    assert_eq!(
        t.return_path(&m),
        "postmaster-bounces+ops=example.com@lists.example.org"
    );
    let t = t.with_null_return_path();
    assert_eq!(t.return_path(&m), "", "MAIL FROM:<>");
    let mut out = Vec::new();
    t.splice(&m, &mut out);
    check_wire(&out);
    assert!(out.ends_with(b"body\r\n"), "sent as written");
}

#[test]
fn reply_to_list_policy_replaces_posters_reply_to() {
    let mut s = settings(None, true);
    s.reply_to = ReplyToPolicy::List;
    let post =
        b"From: a@example.com\r\nReply-To: a@example.com\r\nReply-To: b@example.com\r\n\r\nx\r\n";
    let out = String::from_utf8(copy(s, post, &member("m@example.com", None, &[]))).unwrap();
    assert_eq!(out.matches("Reply-To:").count(), 1);
    assert!(out.contains("Reply-To: <announce@lists.example.org>\r\n"));
}

#[test]
fn refuses_what_is_not_a_message() {
    let l = list("announce@lists.example.org", settings(None, true));
    let c = ctx(None);
    assert!(matches!(
        render(&l, &c, b""),
        Err(FanoutError::NotAMessage(_))
    ));
    assert!(matches!(
        render(&l, &c, b"\r\nbody only\r\n"),
        Err(FanoutError::NotAMessage(_))
    ));
    assert!(matches!(
        render(&l, &c, b"just text\r\n\r\n"),
        Err(FanoutError::Unparseable(_))
    ));
    let mut huge = b"X-Big: ".to_vec();
    huge.resize(MAX_HEADER_BYTES + 100, b'a');
    assert!(matches!(
        render(&l, &c, &huge),
        Err(FanoutError::HeaderTooLong { .. })
    ));
}

#[test]
fn refuses_unsafe_list_context() {
    let l = list("announce@lists.example.org", settings(None, true));
    for base in [
        "",
        "ftp://x",
        "https://x\r\nBcc: y",
        "https://x/<a>",
        &format!("https://{}", "a".repeat(300)),
    ] {
        let c = ListContext {
            unsubscribe_base_url: base.to_string(),
            ..ctx(None)
        };
        assert!(
            matches!(render(&l, &c, POST), Err(FanoutError::InvalidContext(_))),
            "{base:?}"
        );
    }
    let c = ctx(Some("https://a\tb"));
    assert!(matches!(
        render(&l, &c, POST),
        Err(FanoutError::InvalidContext(_))
    ));
    assert!(
        !format!("{:?}", ctx(None)).contains("test-secret"),
        "Debug leaks the secret"
    );
}

#[test]
fn qp_and_html_single_parts_are_wrapped_intact() {
    let posts: [&[u8]; 3] = [
        b"Subject: q\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nCaf=C3=A9=\r\n ok\r\n",
        b"Subject: h\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>hi</p>\r\n",
        b"Subject: l\r\nContent-Type: text/plain; charset=iso-8859-1\r\n\r\nCaf\xe9\r\n",
    ];
    for post in posts {
        let out = copy(
            settings(Some("FOOTER {{name}}"), true),
            post,
            &member("m@example.com", Some("Mo"), &[]),
        );
        check_structure("wrapped", post, &out, Some("FOOTER Mo"));
        let plain = undot(&out);
        let msg = MessageParser::new().parse(&plain).unwrap();
        assert_eq!(msg.parts.len(), 3, "multipart/mixed with two leaves");
    }
}

/// A template whose bytes were taken out and put back makes the same copies; a shell refuses
/// bytes that are not the ones taken out (a truncated or damaged file), so no member gets a
/// copy spliced from the wrong bytes.
#[test]
fn a_template_taken_apart_and_filled_again_makes_the_same_copies() {
    let t = render(
        &list(
            "announce@lists.example.org",
            settings(Some("--\n{{name}} <{{email}}>\n{{unsubscribe_url}}"), true),
        ),
        &ctx(None),
        POST,
    )
    .unwrap();
    let m = member("m@example.com", Some("Em"), &[]);
    let mut before = Vec::new();
    t.splice(&m, &mut before);
    let (shell, bytes) = t.into_shell();
    assert_eq!(shell.len(), bytes.len());
    assert!(!shell.is_empty());

    let mut damaged = bytes.clone();
    damaged[0] ^= 1;
    let shell = shell.fill(damaged).unwrap_err();
    let shell = shell.fill(bytes[..bytes.len() - 1].to_vec()).unwrap_err();
    let t = shell.fill(bytes).unwrap();
    let mut after = Vec::new();
    t.splice(&m, &mut after);
    assert_eq!(before, after);
}
