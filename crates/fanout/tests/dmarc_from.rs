//! DMARC-aware From handling at render time: the policy recorded in our own
//! Authentication-Results field decides, per the list's `from_rewrite` setting, whether From
//! becomes `"Poster via List" <list>`; Reply-To / Cc keep replies reaching the poster; the
//! poster's DKIM-Signature is kept, renamed or removed. (The DNS side, deciding the recorded
//! policy from real `_dmarc` records, is tested end to end in tests/it/dmarc.rs.)

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

mod common;

use common::*;
use herald_fanout::render;
use herald_types::{FromRewrite, ListSettings, PosterDkim, ReplyToPolicy};
use mail_parser::MessageParser;

const LIST: &str = "dev@lists.example.org";

fn ar(policy: &str) -> String {
    format!(
        "Authentication-Results: {AUTHSERV_ID};\r\n\tdkim=pass header.d=poster.example header.s=s1;\r\n\tdmarc=pass header.from=poster.example policy.dmarc={policy}\r\n"
    )
}

fn post(extra_top: &str, extra: &str) -> Vec<u8> {
    format!(
        "{extra_top}DKIM-Signature: v=1; a=rsa-sha256; d=poster.example; s=s1;\r\n b=AAAA\r\nFrom: \"Alice Poster\" <alice@poster.example>\r\nTo: {LIST}\r\n{extra}Subject: hello\r\nMessage-ID: <1@poster.example>\r\n\r\nbody\r\n"
    )
    .into_bytes()
}

fn settings(from_rewrite: FromRewrite) -> ListSettings {
    ListSettings {
        display_name: "Dev List".into(),
        from_rewrite,
        ..ListSettings::default()
    }
}

fn copy(settings: ListSettings, raw: &[u8]) -> String {
    let t = render(&list(LIST, settings), &ctx(None), raw).unwrap();
    let mut out = Vec::new();
    t.splice(&member("bob@example.net", Some("Bob"), &[]), &mut out);
    check_wire(&out);
    String::from_utf8(undot(&out)).unwrap()
}

fn header<'a>(copy: &'a str, name: &str) -> Vec<&'a str> {
    let head = copy.split("\r\n\r\n").next().unwrap();
    let mut fields: Vec<&str> = Vec::new();
    let mut starts = vec![0];
    for (i, _) in head.match_indices("\r\n") {
        if !head[i + 2..].starts_with([' ', '\t']) {
            starts.push(i + 2);
        }
    }
    starts.push(head.len() + 2);
    for w in starts.windows(2) {
        let field = &head[w[0]..(w[1] - 2).max(w[0])];
        if let Some((n, v)) = field.split_once(':') {
            if n.trim().eq_ignore_ascii_case(name) {
                fields.push(v.trim());
            }
        }
    }
    fields
}

fn from_of(copy: &str) -> (String, String) {
    let msg = MessageParser::new().parse(copy.as_bytes()).unwrap();
    let a = msg.from().unwrap().first().unwrap();
    (
        a.name().unwrap_or_default().to_string(),
        a.address().unwrap_or_default().to_string(),
    )
}

#[test]
fn reject_and_quarantine_rewrite_from_and_set_reply_to() {
    for policy in ["reject", "quarantine"] {
        let c = copy(settings(FromRewrite::WhenNeeded), &post(&ar(policy), ""));
        assert_eq!(
            from_of(&c),
            ("Alice Poster via Dev List".to_string(), LIST.to_string()),
            "{policy}: {c}"
        );
        assert_eq!(header(&c, "From").len(), 1, "{c}");
        assert_eq!(
            header(&c, "Reply-To"),
            ["\"Alice Poster\" <alice@poster.example>"],
            "{c}"
        );
        // The poster's signature is renamed, not left to fail.
        assert!(header(&c, "DKIM-Signature").is_empty(), "{c}");
        assert_eq!(header(&c, "X-Original-DKIM-Signature").len(), 1, "{c}");
    }
}

#[test]
fn none_absent_and_unrecorded_policies_keep_from() {
    for raw in [
        post(&ar("none"), ""),
        post("", ""),
        // A field from another authserv-id is not ours and is not believed.
        post(
            "Authentication-Results: mx.elsewhere; dmarc=fail header.from=poster.example policy.dmarc=reject\r\n",
            "",
        ),
    ] {
        let c = copy(settings(FromRewrite::WhenNeeded), &raw);
        assert_eq!(from_of(&c).1, "alice@poster.example", "{c}");
        assert!(header(&c, "Reply-To").is_empty(), "{c}");
        assert_eq!(header(&c, "DKIM-Signature").len(), 1, "{c}");
    }
}

#[test]
fn a_policy_lookup_that_failed_rewrites_to_be_safe() {
    let ar = format!(
        "Authentication-Results: {AUTHSERV_ID}; dmarc=temperror header.from=poster.example policy.dmarc=none\r\n"
    );
    let c = copy(settings(FromRewrite::WhenNeeded), &post(&ar, ""));
    assert_eq!(from_of(&c).1, LIST, "{c}");
}

#[test]
fn always_and_never_ignore_the_policy() {
    let c = copy(settings(FromRewrite::Always), &post("", ""));
    assert_eq!(from_of(&c).1, LIST, "{c}");
    let c = copy(settings(FromRewrite::Never), &post(&ar("reject"), ""));
    assert_eq!(from_of(&c).1, "alice@poster.example", "{c}");
    assert_eq!(header(&c, "DKIM-Signature").len(), 1, "{c}");
}

#[test]
fn a_poster_in_the_list_domain_is_not_rewritten() {
    let raw = String::from_utf8(post(&ar("reject"), ""))
        .unwrap()
        .replace("alice@poster.example", "alice@lists.example.org")
        .replace(
            "header.from=poster.example",
            "header.from=lists.example.org",
        );
    let c = copy(settings(FromRewrite::WhenNeeded), raw.as_bytes());
    assert_eq!(from_of(&c).1, "alice@lists.example.org", "{c}");
}

#[test]
fn reply_to_list_copies_the_poster_in_cc() {
    let mut s = settings(FromRewrite::WhenNeeded);
    s.reply_to = ReplyToPolicy::List;
    let c = copy(s.clone(), &post(&ar("reject"), ""));
    assert_eq!(header(&c, "Reply-To"), [format!("<{LIST}>")], "{c}");
    assert_eq!(
        header(&c, "Cc"),
        ["\"Alice Poster\" <alice@poster.example>"],
        "{c}"
    );
    let c = copy(s, &post(&ar("reject"), "Cc: carol@example.com\r\n"));
    let cc = header(&c, "Cc");
    assert_eq!(cc.len(), 1, "{c}");
    assert!(
        cc[0].starts_with("carol@example.com,") && cc[0].ends_with("<alice@poster.example>"),
        "{c}"
    );
}

#[test]
fn the_posters_own_reply_to_is_kept() {
    let c = copy(
        settings(FromRewrite::WhenNeeded),
        &post(&ar("reject"), "Reply-To: <replies@poster.example>\r\n"),
    );
    assert_eq!(header(&c, "Reply-To"), ["<replies@poster.example>"], "{c}");
}

#[test]
fn poster_dkim_keep_and_remove() {
    let mut s = settings(FromRewrite::WhenNeeded);
    s.poster_dkim = PosterDkim::Keep;
    let c = copy(s.clone(), &post(&ar("reject"), ""));
    assert_eq!(header(&c, "DKIM-Signature").len(), 1, "{c}");
    s.poster_dkim = PosterDkim::Remove;
    for raw in [post(&ar("reject"), ""), post("", "")] {
        let c = copy(s.clone(), &raw);
        assert!(header(&c, "DKIM-Signature").is_empty(), "{c}");
        assert!(header(&c, "X-Original-DKIM-Signature").is_empty(), "{c}");
    }
}

#[test]
fn hostile_from_fields_never_break_the_copy() {
    let hostile = [
        "From: \r\n",
        "From: =?utf-8?B?QWxpY2UNCkJjYzogZXZlQHg=?= <alice@poster.example>\r\n",
        "From: \"Eve\\\r\n Bcc: x@y\" <eve@poster.example>\r\n",
        "From: <>\r\n",
        "From: not an address at all\r\n",
        "From: a@poster.example, b@poster.example\r\n",
        "From: \"\u{202e}gnp.exe\" <x@poster.example>\r\n",
    ];
    for from in hostile {
        let raw = format!("{}{from}Subject: x\r\n\r\nbody\r\n", ar("reject"));
        let c = copy(settings(FromRewrite::WhenNeeded), raw.as_bytes());
        let names: Vec<&str> = c
            .split("\r\n\r\n")
            .next()
            .unwrap()
            .split("\r\n")
            .filter(|l| !l.starts_with([' ', '\t']))
            .filter_map(|l| l.split_once(':').map(|(n, _)| n))
            .collect();
        assert!(
            !names.iter().any(|n| n.eq_ignore_ascii_case("Bcc")),
            "{from:?}: {c}"
        );
        assert_eq!(header(&c, "From").len(), 1, "{from:?}: {c}");
        // The display name we write is sanitized; the poster's own value moves to Reply-To
        // as the poster wrote it (as it would have stayed in From).
        assert!(!header(&c, "From")[0].contains('\u{202e}'), "{from:?}: {c}");
    }
}
