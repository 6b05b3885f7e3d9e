//! DMARC-aware From handling end to end: posts arrive over SMTP (and HTTP injection), the
//! server looks up the From domain's `_dmarc` record on the simulated world's DNS server once
//! on arrival, records it in its Authentication-Results field, and fan-out rewrites From for
//! `p=reject` and `p=quarantine` only. Hostile input (malformed DMARC records and
//! DKIM-Signature fields, a forged Authentication-Results claiming our authserv-id) never
//! blocks a post and never decides the rewrite.

use crate::support;

use herald_sim::{Profile, World};
use herald_types::{FromRewrite, ListSettings, PostingPolicy};
use serde_json::json;
use std::time::{Duration, Instant};
use support::api::{changes, Api};
use support::*;

const LIST: &str = "dev@lists.test";
const MEMBER: &str = "bob@d0.test";
/// The From of a rewritten copy.
const REWRITTEN: &str = "\"Alice via Dev\" <dev@lists.test>";

async fn start() -> (World, TestServer, tempfile::TempDir) {
    start_with(|_, _| {}).await
}

/// Starts the world and a server whose configuration `adjust` may change (given the data dir).
async fn start_with(
    adjust: impl FnOnce(&mut herald_server::Config, &std::path::Path),
) -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    world
        .dns()
        .update_zone(|z| {
            z.add_txt(
                "_dmarc.reject.test",
                "v=DMARC1; p=reject; rua=mailto:d@reject.test",
            );
            z.add_txt("_dmarc.quar.test", "v=DMARC1; p=quarantine; pct=100");
            z.add_txt("_dmarc.none.test", "v=DMARC1; p=none");
            // Hostile: not a DMARC record at all, a broken one, and a huge one.
            z.add_txt("_dmarc.garbage.test", "v=DMARC1; p=banana; ;;; =x; sp");
            z.add_txt("_dmarc.junk.test", "\u{0}\u{1}not-dmarc p=reject");
            z.add_txt(
                "_dmarc.huge.test",
                &format!("v=DMARC1; p=reject; x={}", "a".repeat(200)),
            );
        })
        .expect("zone");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().join("data"));
    adjust(&mut config, dir.path());
    let server = TestServer::start(config).await;
    let api = Api::new(&server.api);
    let settings = ListSettings {
        posting_policy: PostingPolicy::Anyone,
        display_name: "Dev".into(),
        ..ListSettings::default()
    };
    api.create_list(LIST, settings).await;
    api.add_address(LIST, MEMBER).await;
    (world, server, dir)
}

fn post(from_domain: &str, mid: &str, extra: &str) -> String {
    format!(
        "{extra}From: Alice <alice@{from_domain}>\r\nTo: {LIST}\r\nSubject: hello\r\nMessage-ID: <{mid}@x.test>\r\n\r\nbody\r\n"
    )
}

async fn send(server: &TestServer, from: &str, msg: &str) -> String {
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO client.test").await;
    let r = c.send_mail(from, &[LIST], msg.as_bytes()).await;
    c.cmd("QUIT").await;
    r
}

/// The copy of the post with this Message-ID that the member received.
async fn copy_of(world: &World, mid: &str) -> String {
    let want = format!("{mid}@x.test");
    let start = Instant::now();
    loop {
        let snap = world.recorder().snapshot();
        let found = snap.copies_for(MEMBER).into_iter().find_map(|c| {
            let id = c.message_id.as_deref()?;
            let body = c.message.as_deref()?;
            (id.trim_matches(['<', '>']) == want)
                .then(|| String::from_utf8_lossy(body).into_owned())
        });
        if let Some(m) = found {
            return m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no copy of {mid}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn field<'a>(msg: &'a str, name: &str) -> Option<&'a str> {
    let head = msg.split("\r\n\r\n").next()?;
    head.split("\r\n").find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_policy_decides_from_rewriting() {
    let (world, server, _dir) = start().await;
    let cases = [
        ("reject.test", true),
        ("quar.test", true),
        ("none.test", false),
        ("absent.test", false),
        ("garbage.test", false),
        ("junk.test", false),
    ];
    for (i, (domain, rewritten)) in cases.iter().enumerate() {
        let mid = format!("p{i}");
        let r = send(&server, &format!("alice@{domain}"), &post(domain, &mid, "")).await;
        assert!(r.starts_with("250"), "{domain}: {r}");
        let copy = copy_of(&world, &mid).await;
        let from = field(&copy, "From").expect("From");
        if *rewritten {
            assert_eq!(from, REWRITTEN, "{domain}: {copy}");
            assert_eq!(
                field(&copy, "Reply-To"),
                Some(&*format!("Alice <alice@{domain}>"))
            );
        } else {
            assert_eq!(from, format!("Alice <alice@{domain}>"), "{domain}: {copy}");
            assert_eq!(field(&copy, "Reply-To"), None, "{domain}: {copy}");
        }
        // Our arrival results travel with the copy (the post was not signed: dkim=none).
        let ar = field(&copy, "Authentication-Results").expect("our results");
        assert!(ar.starts_with("herald.test;"), "{ar}");
        assert!(copy.contains("\r\n\tdkim=none;\r\n"), "{copy}");
    }
    // The lookup is cached by TTL (60 s here): a record withdrawn meanwhile still decides
    // the next post from that domain, without asking DNS again.
    world
        .dns()
        .update_zone(|z| {
            z.remove("_dmarc.reject.test");
        })
        .expect("zone");
    let r = send(
        &server,
        "alice@reject.test",
        &post("reject.test", "again", ""),
    )
    .await;
    assert!(r.starts_with("250"), "{r}");
    let copy = copy_of(&world, "again").await;
    assert_eq!(field(&copy, "From"), Some(REWRITTEN), "{copy}");
    server.stop().await;
    world.shutdown().await;
}

/// Our whole Authentication-Results field in a copy, unfolded.
fn our_results(copy: &str) -> String {
    let head = copy.split("\r\n\r\n").next().unwrap_or_default();
    let start = head
        .find("Authentication-Results: herald.test;")
        .unwrap_or_else(|| panic!("no results of ours in {head}"));
    let mut out = String::new();
    for (i, line) in head[start..].split("\r\n").enumerate() {
        if i > 0 && !line.starts_with([' ', '\t']) {
            break;
        }
        out.push_str(line.trim());
        out.push(' ');
    }
    out
}

/// Over LMTP the client is the MTA in front of Herald: SPF is checked against the client that
/// MTA recorded in its Received field (past loopback content-filter hops), never against the
/// MTA itself, and not at all when no such field can be read. DKIM and DMARC are always checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmtp_posts_are_spf_checked_against_the_client_the_front_mta_recorded() {
    let (world, server, _dir) = start().await;
    world
        .dns()
        .update_zone(|z| {
            z.add_txt("spf.test", "v=spf1 ip4:192.0.2.1 -all");
        })
        .expect("zone");
    // (Message-ID, trace fields the front MTA wrote, what SPF must say). The addresses in the
    // fields are text only: no socket goes to them.
    let front = "Received: from mail.spf.test (mail.spf.test [192.0.2.1])\r\n\tby mx.lists.test (Postfix) with ESMTPS id 1; Sat, 21 Nov 2026 07:00:00 +0000\r\n";
    let filter = "Received: from localhost (localhost [127.0.0.1])\r\n\tby mx.lists.test (Postfix) with ESMTP id 2; Sat, 21 Nov 2026 07:00:01 +0000\r\n";
    let cases = [
        ("l-none", String::new(), None),
        ("l-pass", front.to_string(), Some("spf=pass")),
        ("l-filter", format!("{filter}{front}"), Some("spf=pass")),
        (
            "l-fail",
            front.replace("192.0.2.1", "198.51.100.7"),
            Some("spf=fail"),
        ),
        // Unreadable: local submission, garbage, an oversized field.
        (
            "l-local",
            "Received: by mx.lists.test (Postfix, from userid 1000) id 3\r\n".into(),
            None,
        ),
        (
            "l-junk",
            "Received: from (([[[]]] by by by\r\n".into(),
            None,
        ),
        (
            "l-huge",
            format!(
                "Received: from a.test ({}[192.0.2.1]) by mx\r\n",
                "xxxxxxxxxx\r\n\t".repeat(500)
            ),
            None,
        ),
    ];
    for (mid, trace, want) in &cases {
        let (mut c, _) = Smtp::connect(server.lmtp).await;
        c.cmd("LHLO front.test").await;
        let r = c
            .send_mail(
                "alice@spf.test",
                &[LIST],
                post("reject.test", mid, trace).as_bytes(),
            )
            .await;
        assert!(r.starts_with("250"), "{mid}: {r}");
        let copy = copy_of(&world, mid).await;
        let ours = our_results(&copy);
        match want {
            Some(spf) => assert!(
                ours.contains(&format!("{spf} ")) && ours.contains("smtp.mailfrom=alice@spf.test"),
                "{mid}: {ours}"
            ),
            None => assert!(!ours.contains("spf="), "{mid}: {ours}"),
        }
        assert!(ours.contains("dmarc="), "{mid}: {ours}");
        assert_eq!(field(&copy, "From"), Some(REWRITTEN), "{mid}");
    }
    // Over SMTP the client itself is checked (127.0.0.1 here, with no SPF record).
    let r = send(&server, "alice@reject.test", &post("reject.test", "s0", "")).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(copy_of(&world, "s0").await.contains("spf=none"));
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_setting_can_turn_rewriting_off_and_on() {
    let (world, server, _dir) = start().await;
    let api = Api::new(&server.api);
    let changed = api
        .change_list(LIST, &changes(json!({"from_rewrite": "never"})))
        .await
        .expect("from_rewrite = never");
    assert_eq!(changed.settings.from_rewrite, FromRewrite::Never);
    assert_eq!(
        changed.settings.display_name, "Dev",
        "other settings are kept"
    );
    let r = send(&server, "alice@reject.test", &post("reject.test", "s1", "")).await;
    assert!(r.starts_with("250"), "{r}");
    let copy = copy_of(&world, "s1").await;
    assert_eq!(
        field(&copy, "From"),
        Some("Alice <alice@reject.test>"),
        "{copy}"
    );

    api.change_list(LIST, &changes(json!({"from_rewrite": "always"})))
        .await
        .expect("from_rewrite = always");
    let r = send(&server, "alice@none.test", &post("none.test", "s2", "")).await;
    assert!(r.starts_with("250"), "{r}");
    let copy = copy_of(&world, "s2").await;
    assert_eq!(field(&copy, "From"), Some(REWRITTEN));

    // Typos and bad values are refused, and change nothing.
    let typo = api
        .change_list(LIST, &changes(json!({"from_rewrit": "never"})))
        .await
        .expect_err("an unknown setting");
    assert_eq!(typo.status, 400, "{typo:?}");
    let bad = api
        .change_list(LIST, &changes(json!({"from_rewrite": "sometimes"})))
        .await
        .expect_err("an unknown value");
    assert_eq!(bad.status, 400, "{bad:?}");
    let list = api.list(LIST).await;
    assert_eq!(
        list.list.settings.from_rewrite,
        FromRewrite::Always,
        "{list:?}"
    );
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_authentication_fields_never_block_or_decide() {
    let (world, server, _dir) = start().await;
    // A forged Authentication-Results with our authserv-id claims p=reject for a domain
    // without a record: it is removed on arrival and does not cause a rewrite.
    let forged = "Authentication-Results: herald.test; dmarc=fail header.from=absent.test policy.dmarc=reject\r\n";
    let r = send(
        &server,
        "alice@absent.test",
        &post("absent.test", "f1", forged),
    )
    .await;
    assert!(r.starts_with("250"), "{r}");
    let copy = copy_of(&world, "f1").await;
    assert_eq!(
        field(&copy, "From"),
        Some("Alice <alice@absent.test>"),
        "{copy}"
    );
    assert_eq!(copy.matches("policy.dmarc=reject").count(), 0, "{copy}");

    // Malformed DKIM-Signature fields from a p=reject domain: the post still goes out,
    // rewritten, with the poster's signatures renamed.
    let bad_sigs = [
        "DKIM-Signature: v=1; a=rsa-sha256; d=reject.test; s=x; bh=!!!; b=\r\n",
        "DKIM-Signature: garbage without tags\r\n",
        "DKIM-Signature: v=1; a=ed25519-sha256; d=reject.test; s=nokey; h=from; bh=AAAA; b=AAAA\r\n",
        &format!("DKIM-Signature: v=1; d=reject.test; {}\r\n", "x=y; ".repeat(150)),
        "DKIM-Signature: v=1; a=rsa-sha256; l=99999999999999999999; d=reject.test\r\n",
    ]
    .concat();
    let r = send(
        &server,
        "alice@reject.test",
        &post("reject.test", "f2", &bad_sigs),
    )
    .await;
    assert!(r.starts_with("250"), "{r}");
    let copy = copy_of(&world, "f2").await;
    assert_eq!(field(&copy, "From"), Some(REWRITTEN));
    assert!(field(&copy, "DKIM-Signature").is_none(), "{copy}");
    assert_eq!(
        copy.matches("X-Original-DKIM-Signature:").count(),
        5,
        "{copy}"
    );

    // A post from a domain with an over-long record and one injected over HTTP.
    let r = send(&server, "alice@huge.test", &post("huge.test", "f3", "")).await;
    assert!(r.starts_with("250"), "{r}");
    assert!(copy_of(&world, "f3")
        .await
        .contains("From: \"Alice via Dev\""));
    let (st, body) = http_bytes(
        &format!("{}/api/v1/lists/{LIST}/posts", server.api),
        post("quar.test", "f4", "").into_bytes(),
    )
    .await;
    assert!(st == 200 || st == 202 || st == 201, "{st} {body}");
    let copy = copy_of(&world, "f4").await;
    assert_eq!(field(&copy, "From"), Some(REWRITTEN), "{copy}");
    server.stop().await;
    world.shutdown().await;
}

/// The whole point: a post From a p=reject domain, re-sent by a list with its own DKIM key,
/// reaches members as mail that passes DMARC (From rewritten to the list, signed by the list
/// domain) and carries an ARC set that verifies, vouching for what we saw on arrival.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_pass_dmarc_and_carry_a_verifying_arc_set() {
    let key = herald_auth::dkim::generate(herald_auth::DkimAlgorithm::Rsa).expect("key");
    let (world, server, _dir) = start_with(|config, dir| {
        let key_file = dir.join("lists.test.pem");
        std::fs::write(&key_file, &key.private_pem).expect("write key");
        config.dkim.insert(
            "lists.test".into(),
            herald_server::config::DkimDomainConfig {
                key: herald_server::config::DkimKeyConfig {
                    selector: "s1".into(),
                    key_file,
                    algorithm: herald_auth::DkimAlgorithm::Rsa,
                },
                arc: true,
                second: None,
            },
        );
    })
    .await;
    world
        .dns()
        .update_zone(|z| {
            z.add_txt("s1._domainkey.lists.test", &key.dns_txt);
            z.add_txt("_dmarc.lists.test", "v=DMARC1; p=reject");
        })
        .expect("zone");
    let r = send(&server, "alice@reject.test", &post("reject.test", "a1", "")).await;
    assert!(r.starts_with("250"), "{r}");
    let copy = copy_of(&world, "a1").await;
    assert_eq!(field(&copy, "From"), Some(REWRITTEN));

    // A receiver's view, through the same DNS.
    let receiver = herald_auth::Authenticator::new(
        &[world.dns_addr()],
        Duration::from_secs(2),
        2,
        "mx.d0.test",
    )
    .expect("authenticator");
    let dkim = receiver.verify_dkim(copy.as_bytes()).await;
    assert!(
        dkim.iter().any(|v| v.pass && v.domain == "lists.test"),
        "{dkim:?}\n{copy}"
    );
    receiver
        .verify_arc(copy.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("ARC: {e}\n{copy}"));
    assert!(copy.contains("ARC-Seal: i=1;"), "{copy}");
    let verdict = receiver.check_arrival(copy.as_bytes(), None, "", "").await;
    assert!(
        verdict
            .auth_results
            .contains("dmarc=pass header.from=lists.test"),
        "{}",
        verdict.auth_results
    );
    // The operator sees it too.
    let (_, metrics) = http("GET", &format!("{}/metrics", server.api), None).await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    for series in [
        "herald_copy_auth_total{step=\"dkim\",result=\"added\"} 1\n",
        "herald_copy_auth_total{step=\"arc\",result=\"added\"} 1\n",
        "herald_copy_auth_total{step=\"dkim\",result=\"failed\"} 0\n",
    ] {
        assert!(metrics.contains(series), "{series}{metrics}");
    }
    server.stop().await;
    world.shutdown().await;
}
