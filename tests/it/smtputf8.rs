//! International addresses (RFC 6531/6532) end to end over real sockets.
//!
//! A list has members with a UTF-8 local part at an IDN domain (`jörg@münchen.test`), a CJK
//! address (`用户@例子.test`), an ASCII local part at an IDN domain (`info@bücher.test`), a
//! UTF-8 member and an ASCII member at a host that does not offer SMTPUTF8 (`legacy.test`); a
//! poster with a UTF-8 address posts with `MAIL FROM:<…> SMTPUTF8` and UTF-8 headers. Members
//! are added through the API (one in NFD, a duplicate in A-label form refused as the same
//! member), a CSV import and the CLI. Then:
//! - where SMTPUTF8 is offered the receiver sees the UTF-8 envelope (VERP return path included,
//!   `SMTPUTF8` on MAIL) and the UTF-8 header intact;
//! - `info@bücher.test` is delivered in A-label form to a host without SMTPUTF8;
//! - the UTF-8 member at the host without SMTPUTF8 is a permanent failure, `553 5.6.7` in the
//!   post's outcome and the delivery log, never sent, never retried;
//! - a bounce to the VERP address of `jörg@münchen.test` is scored against that member;
//! - the RFC 8058 one-click unsubscribe in `用户@例子.test`'s copy removes that member;
//! - a UTF-8 sender without `SMTPUTF8` gets `553 5.6.7`.

use crate::support;

use herald_api_types::MemberDetail;
use herald_sim::{Profile, World};
use serde_json::json;
use std::time::Duration;
use support::*;

const LIST: &str = "dev@lists.test";
const JOERG: &str = "jörg@münchen.test";
const JOERG_WIRE: &str = "jörg@xn--mnchen-3ya.test";
const CJK: &str = "用户@例子.test";
const CJK_WIRE: &str = "用户@xn--fsqu00a.test";
const IDN_ASCII: &str = "info@bücher.test";
const IDN_ASCII_WIRE: &str = "info@xn--bcher-kva.test";
const LEGACY_UTF8: &str = "jürgen@legacy.test";
const LEGACY_ASCII: &str = "bob@legacy.test";
const POSTER: &str = "zoë@münchen.test";

/// Four domains: two IDNs whose hosts offer SMTPUTF8, two whose hosts do not.
async fn start() -> (World, TestServer, tempfile::TempDir) {
    let mut cfg = world_config(&[const { Profile::Normal }; 4], true);
    let names = [
        ("xn--mnchen-3ya.test", true),
        ("xn--fsqu00a.test", true),
        ("xn--bcher-kva.test", false),
        ("legacy.test", false),
    ];
    for (d, (name, utf8)) in cfg.domains.iter_mut().zip(names) {
        d.name = name.to_string();
        d.extensions.smtputf8 = utf8;
    }
    let world = World::start(cfg).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    (world, server, dir)
}

/// Adds the members through every door: the API (NFD spelling), a CSV import, the CLI.
async fn add_everyone(api: &str) {
    // The API, with the NFD spelling of ö: stored as NFC.
    add_members(api, LIST, &["jo\u{308}rg@münchen.test", LEGACY_ASCII]).await;
    // The same mailbox in A-label form and NFC is the same member: not a second one.
    let (st, body) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/members"),
        Some(json!({ "address": JOERG_WIRE })),
    )
    .await;
    assert_eq!(st, 409, "one member, never two: {body}");
    // A CSV import.
    let csv = format!("email,name\n{CJK},Yònghù\n{LEGACY_UTF8},Jürgen\n");
    let (st, body) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        csv.into_bytes(),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    // The CLI.
    let api = api.to_string();
    let out = tokio::task::spawn_blocking(move || {
        herald_cli(&api, None, &["member", "add", LIST, IDN_ASCII])
    })
    .await
    .expect("cli");
    assert!(out.contains(IDN_ASCII_WIRE), "{out}");
}

fn copies_for(world: &World, rcpt: &str) -> Vec<herald_sim::CopyRecord> {
    let snap = world.recorder().snapshot();
    snap.copies_for(rcpt).into_iter().cloned().collect()
}

async fn post(server: &TestServer) -> String {
    let (mut c, _) = Smtp::connect(server.smtp).await;
    let r = c.cmd("EHLO front.münchen.test").await;
    assert!(r.starts_with("500 5.5.2"), "HELO names stay ASCII: {r}");
    let ehlo = c.cmd("EHLO front.test").await;
    assert!(ehlo.starts_with("250"), "{ehlo}");
    // Without SMTPUTF8 a UTF-8 reverse path is refused as RFC 6531 §3.5 says.
    let r = c.cmd(&format!("MAIL FROM:<{POSTER}>")).await;
    assert!(r.starts_with("553 5.6.7"), "{r}");
    assert!(c
        .cmd(&format!("MAIL FROM:<{POSTER}> SMTPUTF8 BODY=8BITMIME"))
        .await
        .starts_with("250"));
    assert!(c.cmd(&format!("RCPT TO:<{LIST}>")).await.starts_with("250"));
    assert!(c.cmd("DATA").await.starts_with("354"));
    let msg = format!(
        "From: Zoë <{POSTER}>\r\nTo: {LIST}\r\nSubject: Grüße aus München\r\n\
         Message-ID: <gruesse@xn--mnchen-3ya.test>\r\nMIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n\
         Hallo 用户, grüß dich.\r\n.\r\n"
    );
    c.send_raw(msg.as_bytes()).await;
    let r = c.reply().await;
    c.cmd("QUIT").await;
    queued_id(&r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn international_members_get_their_copies_where_the_receiver_can_take_them() {
    let (world, server, dir) = start().await;
    let api = server.api.clone();
    add_everyone(&api).await;
    let id = post(&server).await;
    let done = wait_complete(&api, &id, Duration::from_secs(60)).await;
    assert_eq!(
        (done.delivered, done.failed),
        (4, 1),
        "4 delivered, the UTF-8 member at the legacy host failed for good: {done:?}"
    );

    // SMTPUTF8 offered: the UTF-8 envelope arrives as such, VERP return path included, and
    // the header arrives intact (RFC 6532).
    for rcpt in [JOERG_WIRE, CJK_WIRE] {
        let copies = copies_for(&world, rcpt);
        assert_eq!(copies.len(), 1, "{rcpt}");
        let c = &copies[0];
        assert!(c.smtputf8, "{rcpt}: MAIL carried SMTPUTF8");
        let local = rcpt.split('@').next().expect("local");
        let domain = rcpt.split('@').nth(1).expect("domain");
        assert_eq!(
            &*c.sender,
            format!("dev-bounces+{local}={domain}@lists.test"),
            "{rcpt}"
        );
        let raw = String::from_utf8(c.message.as_ref().expect("kept").to_vec()).expect("utf-8");
        assert!(raw.contains(&format!("From: Zoë <{POSTER}>")), "{raw}");
        assert!(raw.contains("Subject: Grüße aus München"), "{raw}");
        assert!(raw.contains("Hallo 用户, grüß dich."), "{raw}");
    }
    // An ASCII local part at an IDN domain: A-label form, no SMTPUTF8 needed, delivered to a
    // host that does not offer it; likewise the ASCII member at the legacy host.
    for rcpt in [IDN_ASCII_WIRE, LEGACY_ASCII] {
        let copies = copies_for(&world, rcpt);
        assert_eq!(copies.len(), 1, "{rcpt}");
        assert!(!copies[0].smtputf8);
        assert!(copies[0].sender.is_ascii());
    }
    // The UTF-8 member at the legacy host: nothing sent, nothing refused by the host (Herald
    // never tried), a permanent failure with the reason.
    let snap = world.recorder().snapshot();
    assert!(snap
        .copies
        .iter()
        .all(|c| !c.recipient.starts_with("jürgen")));
    assert!(snap.rejections.is_empty(), "{:?}", snap.rejections);

    // A bounce to the VERP address of the UTF-8 member maps back to that member.
    let dsn = std::fs::read_to_string("crates/bounce/tests/corpus/postfix_hard.eml")
        .expect("corpus")
        .replace("dev-bounces+bob=d0.test@lists.example.org", "x@y.test")
        .replace("bob@d0.test", JOERG_WIRE);
    let verp = format!("dev-bounces+{}@lists.test", JOERG_WIRE.replace('@', "="));
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO mx.xn--mnchen-3ya.test").await;
    assert!(c.cmd("MAIL FROM:<> SMTPUTF8").await.starts_with("250"));
    let r = c.cmd(&format!("RCPT TO:<{verp}>")).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(c.cmd("DATA").await.starts_with("354"));
    let data = dsn.replace("\r\n", "\n").replace('\n', "\r\n");
    c.send_raw(format!("{}\r\n.\r\n", data.trim_end()).as_bytes())
        .await;
    assert!(c.reply().await.starts_with("250"));
    c.cmd("QUIT").await;
    let url = format!("{api}/api/v1/lists/{LIST}/members/{JOERG}/detail");
    let detail = eventually_some(Duration::from_secs(30), "the bounce recorded", || async {
        let (st, v) = http("GET", &url, None).await;
        assert_eq!(st, 200, "{v}");
        let d: MemberDetail = view("detail", &v);
        (!d.bounces.is_empty()).then_some(d)
    })
    .await;
    assert_eq!(detail.member.address, JOERG_WIRE);
    assert!(detail.bounce_score.is_some(), "{detail:?}");

    // The RFC 8058 one-click unsubscribe in the CJK member's copy works for that member.
    let link = wait_until_some("unsubscribe link", || {
        let copy = copies_for(&world, CJK_WIRE).pop()?;
        let msg = mail_parser::MessageParser::default().parse(copy.message.as_deref()?)?;
        let v = msg.header_raw("List-Unsubscribe")?.to_string();
        v.split(['<', '>'])
            .map(str::trim)
            .find(|u| u.starts_with("http"))
            .map(str::to_string)
    })
    .await;
    let resp = reqwest::Client::new()
        .post(&link)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .expect("one-click");
    assert_eq!(resp.status().as_u16(), 200, "{link}");
    let (st, _) = http(
        "GET",
        &format!("{api}/api/v1/lists/{LIST}/members/{CJK}"),
        None,
    )
    .await;
    assert_eq!(st, 404, "unsubscribed by the one-click POST");
    let (st, _) = http(
        "GET",
        &format!("{api}/api/v1/lists/{LIST}/members/{JOERG}"),
        None,
    )
    .await;
    assert_eq!(st, 200, "the others stay");

    server.stop().await;
    world.shutdown().await;
    // The delivery log says why, with the RFC 6531 status, once: no retry.
    let log = std::fs::read_to_string(dir.path().join("log/delivery.log")).expect("log");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("to=<jürgen@")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("dsn=5.6.7"), "{}", lines[0]);
    assert!(lines[0].contains("SMTPUTF8"), "{}", lines[0]);
}

/// One SMTPUTF8 transaction to `rcpt`; returns the reply to the end of DATA.
async fn send_utf8(server: &TestServer, from: &str, rcpt: &str, msg: &str) -> String {
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO front.test").await;
    assert!(c
        .cmd(&format!("MAIL FROM:<{from}> SMTPUTF8"))
        .await
        .starts_with("250"));
    let r = c.cmd(&format!("RCPT TO:<{rcpt}>")).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send_raw(format!("{msg}.\r\n").as_bytes()).await;
    let r = c.reply().await;
    c.cmd("QUIT").await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_international_address_subscribes_by_mail_command() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    let request = format!(
        "From: {CJK}\r\nTo: dev-request@lists.test\r\nSubject: subscribe\r\n\
         Message-ID: <sub@xn--fsqu00a.test>\r\n\r\nsubscribe\r\n"
    );
    let r = send_utf8(&server, CJK, "dev-request@lists.test", &request).await;
    assert!(r.starts_with("250"), "{r}");
    // The confirmation reaches the UTF-8 mailbox over SMTPUTF8, its token in the subject.
    let subject = wait_until_some("the confirmation", || {
        let copy = copies_for(&world, CJK_WIRE).pop()?;
        assert!(copy.smtputf8);
        let msg = mail_parser::MessageParser::default().parse(copy.message.as_deref()?)?;
        msg.subject().map(str::to_string)
    })
    .await;
    assert!(subject.starts_with("confirm "), "{subject}");
    let (st, _) = http(
        "GET",
        &format!("{api}/api/v1/lists/{LIST}/members/{CJK}"),
        None,
    )
    .await;
    assert_eq!(st, 404, "not a member before confirming");
    // The reply confirms.
    let reply = format!(
        "From: {CJK}\r\nTo: dev-request@lists.test\r\nSubject: Re: {subject}\r\n\
         Message-ID: <conf@xn--fsqu00a.test>\r\n\r\nyes\r\n"
    );
    let r = send_utf8(&server, CJK, "dev-request@lists.test", &reply).await;
    assert!(r.starts_with("250"), "{r}");
    let member = format!("{api}/api/v1/lists/{LIST}/members/{CJK}");
    let body = eventually_some(Duration::from_secs(30), "subscribed", || async {
        let (st, body) = http("GET", &member, None).await;
        (st == 200).then_some(body)
    })
    .await;
    assert!(body.to_string().contains(CJK_WIRE), "{body}");
    server.stop().await;
    world.shutdown().await;
}

/// A post whose MAIL did not say SMTPUTF8 but whose header block carries raw UTF-8 (an old mail
/// client's `Subject:` and display name): the copy a host without SMTPUTF8 receives has an
/// all-ASCII header block, with the text in RFC 2047 encoded words that read back the same. A
/// header Herald cannot encode (Latin-1 bytes, a non-ASCII Message-ID) is refused at DATA with
/// a reply that says why, and nothing is spooled. (Before, the raw bytes were relayed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_utf8_headers_without_smtputf8_reach_a_legacy_host_encoded() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    add_members(&api, LIST, &[LEGACY_ASCII]).await;
    let send = |body: Vec<u8>| {
        let smtp = server.smtp;
        async move {
            let (mut c, _) = Smtp::connect(smtp).await;
            c.cmd("EHLO old-client.test").await;
            let r = c.send_mail("ann@outside.test", &[LIST], &body).await;
            c.cmd("QUIT").await;
            r
        }
    };
    let good = "From: Jörg Müller <ann@outside.test>\r\nTo: dev@lists.test\r\n\
                Subject: Grüße aus München\r\nMessage-ID: <raw8@outside.test>\r\n\
                MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\
                Content-Transfer-Encoding: 8bit\r\n\r\nGrüß dich.\r\n";
    let id = queued_id(&send(good.as_bytes().to_vec()).await);
    wait_complete(&api, &id, Duration::from_secs(60)).await;
    let copy = wait_until_some("the legacy member's copy", || {
        copies_for(&world, LEGACY_ASCII).into_iter().next()
    })
    .await;
    let raw = copy.message.as_deref().expect("kept");
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("header block");
    assert!(
        raw[..end].is_ascii(),
        "{}",
        String::from_utf8_lossy(&raw[..end])
    );
    assert!(!copy.smtputf8);
    let parsed = mail_parser::MessageParser::default()
        .parse(raw)
        .expect("parses");
    assert!(
        parsed.subject().unwrap_or("").contains("Grüße aus München"),
        "{:?}",
        parsed.subject()
    );
    let from = parsed.from().and_then(|a| a.first()).expect("from");
    assert!(
        from.name().unwrap_or("").contains("Jörg Müller"),
        "{from:?}"
    );
    let latin1 = b"From: ann@outside.test\r\nTo: dev@lists.test\r\nSubject: Gr\xfc\xdfe\r\n\
                   Message-ID: <latin1@outside.test>\r\n\r\nbody\r\n"
        .to_vec();
    let r = send(latin1).await;
    assert!(r.starts_with("554 5.6.0"), "{r}");
    let r = send(
        "From: ann@outside.test\r\nTo: dev@lists.test\r\nSubject: x\r\n\
         Message-ID: <ü@outside.test>\r\n\r\nbody\r\n"
            .as_bytes()
            .to_vec(),
    )
    .await;
    assert!(r.starts_with("554 5.6.0"), "{r}");
}
