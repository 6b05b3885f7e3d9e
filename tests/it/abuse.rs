//! "Hard to abuse" against the running server on the simulated world: what Herald passes on to
//! members is strict. A NUL in DATA is refused and nothing reaches a
//! member; a post without `Date:` / `Message-ID:` reaches every member with both added, once.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dev@lists.test";
const MEMBERS: [&str; 2] = ["alice@d0.test", "bob@d1.test"];

async fn setup() -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    // Members post from d0.test and d1.test, whose SPF names the test client: on a members list
    // their From: counts only with that DMARC pass.
    authenticate_senders(&world, &["d0.test", "d1.test"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    add_members(&server.api, LIST, &MEMBERS).await;
    (world, server, dir)
}

/// The header block of `message` (up to the blank line).
fn header(message: &[u8]) -> String {
    let end = message
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(message.len());
    String::from_utf8_lossy(&message[..end]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_in_data_is_refused_and_a_post_without_date_or_message_id_gets_both() {
    let (world, server, _dir) = setup().await;
    let (mut s, _) = Smtp::connect(server.smtp).await;
    assert!(s.cmd("EHLO poster.test").await.starts_with("250"));

    // `\r\n\0.\r\n`: refused whole; the "command" after it is content, never run.
    assert!(s.cmd("MAIL FROM:<carol@d0.test>").await.starts_with("250"));
    assert!(s.cmd(&format!("RCPT TO:<{LIST}>")).await.starts_with("250"));
    assert!(s.cmd("DATA").await.starts_with("354"));
    s.send_raw(b"From: carol@d0.test\r\nSubject: nul\r\n\r\nhi\r\n\0.\r\nRSET\r\n.\r\n")
        .await;
    let r = s.reply().await;
    assert!(r.starts_with("550 5.6.0"), "{r}");

    // No Date:, no Message-ID: accepted, and completed on arrival.
    let r = s
        .send_mail(
            "carol@d0.test",
            &[LIST],
            b"From: carol@d0.test\r\nSubject: bare post\r\n\r\nhello\r\n",
        )
        .await;
    let post = queued_id(&r);
    s.cmd("QUIT").await;
    wait_complete(&server.api, &post, Duration::from_secs(30)).await;

    let started = Instant::now();
    let snap = loop {
        let snap = world.recorder().snapshot();
        if MEMBERS.iter().all(|m| !snap.copies_for(m).is_empty()) {
            break snap;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "copies missing"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        snap.copies.len(),
        2,
        "one copy per member; the NUL post none"
    );
    let mut ids = Vec::new();
    for c in &snap.copies {
        let msg = c.message.as_ref().expect("keep_messages");
        assert!(!msg.contains(&0), "no NUL reaches a member");
        let head = header(msg);
        assert!(head.contains("Subject: bare post"), "{head}");
        assert_eq!(head.matches("\r\nDate: ").count(), 1, "{head}");
        let id = c.message_id.as_deref().expect("a Message-ID was added");
        assert!(id.ends_with("@herald.test>"), "{id}");
        ids.push(id.to_string());
    }
    assert_eq!(ids[0], ids[1], "the same Message-ID in every copy");
    server.stop().await;
}

/// The post ids held for `list`, with their reasons.
async fn held(api: &str, list: &str) -> Vec<(u64, Option<String>)> {
    let views: Vec<herald_api_types::HeldView> =
        get_view(&format!("{api}/api/v1/held?list={list}")).await;
    views.into_iter().map(|h| (h.post, h.reason)).collect()
}

/// Loop guards: on a `reply_to = list` list a member's vacation reply, and one of the list's own
/// copies coming back, are held with their reason and counted, never fanned out; a member's
/// honest post still goes out. On a list that rejects, the sender over `max_posts_per_hour`
/// gets `550 5.7.1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vacation_replies_and_looping_copies_are_held_and_post_floods_refused() {
    let (world, server, _dir) = setup().await;
    let api = &server.api;
    let (status, body) = http(
        "PATCH",
        &format!("{api}/api/v1/lists/{LIST}"),
        Some(json!({"posting_policy": "members", "reply_to": {"kind": "list"}})),
    )
    .await;
    assert!(status == 200, "{status} {body}");
    let (mut s, _) = Smtp::connect(server.smtp).await;
    assert!(s.cmd("EHLO d0.test").await.starts_with("250"));
    let vacation =
        b"From: alice@d0.test\r\nTo: dev@lists.test\r\nSubject: Out of Office: hello\r\n\
Auto-Submitted: auto-replied\r\nMessage-ID: <oof1@d0.test>\r\n\r\nI am away.\r\n";
    let r = s.send_mail("", &[LIST], vacation).await;
    assert!(r.starts_with("250"), "held, not refused: {r}");
    let echo = b"From: bob@d1.test\r\nSubject: [dev] hi\r\nList-Id: <dev.lists.test>\r\n\
Message-ID: <echo1@d1.test>\r\n\r\nan old copy\r\n";
    let r = s.send_mail("bob@d1.test", &[LIST], echo).await;
    assert!(r.starts_with("250"), "{r}");
    let honest =
        b"From: bob@d1.test\r\nSubject: Vacation plans\r\nMessage-ID: <ok1@d1.test>\r\n\r\nhi\r\n";
    let post = queued_id(&s.send_mail("bob@d1.test", &[LIST], honest).await);
    wait_complete(api, &post, Duration::from_secs(30)).await;

    let mut reasons: Vec<String> = held(api, LIST)
        .await
        .into_iter()
        .filter_map(|(_, r)| r)
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "automatic mail (Auto-Submitted)",
            "mail loop: a copy from this list came back"
        ]
    );
    assert_eq!(
        metric(
            api,
            "herald_list_guard_trips_total{guard=\"auto_submitted\"}"
        )
        .await,
        1
    );
    assert_eq!(
        metric(api, "herald_list_guard_trips_total{guard=\"loop\"}").await,
        1
    );
    let snap = world.recorder().snapshot();
    let ids: Vec<&str> = snap
        .copies
        .iter()
        .filter_map(|c| c.message_id.as_deref())
        .collect();
    // (Herald's own held-post notice to bob may be among the copies; it has our Message-ID.)
    assert!(
        !ids.iter()
            .any(|id| id.contains("oof1") || id.contains("echo1")),
        "a guarded post reached a member: {ids:?}"
    );
    assert_eq!(
        ids.iter().filter(|id| id.contains("ok1")).count(),
        2,
        "one honest copy per member"
    );

    // Reject mode with a post rate of 2 an hour: the third post is refused at DATA.
    let (status, body) = http(
        "PATCH",
        &format!("{api}/api/v1/lists/{LIST}"),
        Some(json!({"guard_action": "reject", "max_posts_per_hour": 2})),
    )
    .await;
    assert!(status == 200, "{status} {body}");
    for i in 0..3 {
        let m = format!(
            "From: bob@d1.test\r\nSubject: n{i}\r\nMessage-ID: <rate{i}@d1.test>\r\n\r\nx\r\n"
        );
        let r = s.send_mail("bob@d1.test", &[LIST], m.as_bytes()).await;
        if i < 2 {
            assert!(r.starts_with("250"), "post {i}: {r}");
        } else {
            assert!(r.starts_with("550 5.7.1"), "post {i}: {r}");
            assert!(r.contains("max_posts_per_hour"), "{r}");
        }
    }
    assert_eq!(
        metric(api, "herald_list_guard_trips_total{guard=\"post_rate\"}").await,
        1
    );
    s.cmd("QUIT").await;
    server.stop().await;
}

/// A post from `boss@mod.test` to `announce@lists.test`, DKIM-signed by mod.test when `signer`
/// is given (the way a real poster's MTA signs: relaxed/relaxed over the header and body).
fn boss_post(mid: &str, signer: Option<&herald_auth::DkimSigner>) -> Vec<u8> {
    let header = format!(
        "From: Boss <boss@mod.test>\r\nTo: announce@lists.test\r\nSubject: announcement\r\n\
Date: Tue, 24 Nov 2026 12:00:00 +0000\r\nMessage-ID: <{mid}@mod.test>\r\n"
    );
    let body = b"Everybody: please read this.\r\n";
    let mut out = Vec::new();
    if let Some(signer) = signer {
        let mut hasher = herald_auth::dkim::BodyHasher::new();
        hasher.update(body);
        let field = signer
            .sign(header.as_bytes(), &hasher.finish(), 1_795_000_000)
            .expect("sign");
        out.extend_from_slice(&field);
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// Identity: on an announce-only list (`posting_policy = moderators`, so `require_aligned_from`
/// is on by default) a forged moderator `From:` is held as "unauthenticated sender" and never
/// reaches a member; the moderator's DKIM-signed post (DMARC pass on arrival) goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_moderator_is_held_and_the_signed_moderator_posts() {
    const ANNOUNCE: &str = "announce@lists.test";
    let key = herald_auth::dkim::generate(herald_auth::DkimAlgorithm::Rsa).expect("key");
    let (world, server, dir) = setup().await;
    world
        .dns()
        .update_zone(|z| {
            z.add_txt("s1._domainkey.mod.test", &key.dns_txt);
            z.add_txt("_dmarc.mod.test", "v=DMARC1; p=reject");
        })
        .expect("zone");
    let key_file = dir.path().join("mod.test.pem");
    std::fs::write(&key_file, &key.private_pem).expect("key file");
    let signer = herald_auth::dkim::DkimDomainConfig {
        key: herald_auth::dkim::DkimKeyConfig {
            selector: "s1".into(),
            key_file,
            algorithm: herald_auth::DkimAlgorithm::Rsa,
        },
        second: None,
        arc: false,
    }
    .signer("mod.test")
    .expect("signer");
    let api = &server.api;
    create_list(
        api,
        ANNOUNCE,
        json!({"posting_policy": "moderators", "moderators": ["boss@mod.test"]}),
    )
    .await;
    for m in MEMBERS {
        let (status, body) = http(
            "POST",
            &format!("{api}/api/v1/lists/{ANNOUNCE}/members"),
            Some(json!({ "address": m })),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let (mut s, _) = Smtp::connect(server.smtp).await;
    assert!(s.cmd("EHLO forger.test").await.starts_with("250"));
    let r = s
        .send_mail("boss@mod.test", &[ANNOUNCE], &boss_post("forged", None))
        .await;
    assert!(r.starts_with("250"), "held, not refused: {r}");
    let r = s
        .send_mail(
            "boss@mod.test",
            &[ANNOUNCE],
            &boss_post("genuine", Some(&signer)),
        )
        .await;
    let post = queued_id(&r);
    s.cmd("QUIT").await;
    wait_complete(api, &post, Duration::from_secs(30)).await;

    let held = held(api, ANNOUNCE).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].1.as_deref(), Some("unauthenticated sender"));
    assert_eq!(
        metric(
            api,
            "herald_list_guard_trips_total{guard=\"unauthenticated\"}"
        )
        .await,
        1
    );
    let started = Instant::now();
    let snap = loop {
        let snap = world.recorder().snapshot();
        if MEMBERS.iter().all(|m| !snap.copies_for(m).is_empty()) {
            break snap;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "copies missing"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ids: Vec<&str> = snap
        .copies
        .iter()
        .filter_map(|c| c.message_id.as_deref())
        .collect();
    assert!(!ids.iter().any(|id| id.contains("forged")), "{ids:?}");
    assert_eq!(
        ids.iter().filter(|id| id.contains("genuine")).count(),
        2,
        "{ids:?}"
    );
    server.stop().await;
}

/// Identity on `members` lists (the default policy): `herald list show` prints
/// `require_aligned_from` in effect; a member's post that passes DMARC (aligned SPF from the
/// test client) goes out, the same `From:` sent by a stranger's envelope is held as
/// "unauthenticated sender"; turned off, `list show` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_list_requires_an_aligned_from_by_default() {
    const TEAM: &str = "team@lists.test";
    let (world, server, _dir) = setup().await;
    let api = &server.api;
    create_list(api, TEAM, json!({})).await;
    add_members(api, TEAM, &MEMBERS).await;
    let shown = herald_cli(api, None, &["list", "show", TEAM]);
    let view: serde_json::Value = serde_json::from_str(&shown).expect("list show is JSON");
    assert_eq!(view["settings"]["posting_policy"], "members", "{shown}");
    assert_eq!(
        view["settings"]["require_aligned_from"],
        serde_json::Value::Null
    );
    assert_eq!(view["effective"]["require_aligned_from"], true, "{shown}");

    let (mut s, _) = Smtp::connect(server.smtp).await;
    assert!(s.cmd("EHLO d0.test").await.starts_with("250"));
    let forged = b"From: alice@d0.test\r\nSubject: pay this invoice\r\n\
Message-ID: <forged1@d0.test>\r\n\r\nurgent\r\n";
    let r = s.send_mail("mallory@evil.test", &[TEAM], forged).await;
    assert!(r.starts_with("250"), "held, not refused: {r}");
    let genuine =
        b"From: alice@d0.test\r\nSubject: notes\r\nMessage-ID: <genuine1@d0.test>\r\n\r\nhi\r\n";
    let post = queued_id(&s.send_mail("alice@d0.test", &[TEAM], genuine).await);
    s.cmd("QUIT").await;
    wait_complete(api, &post, Duration::from_secs(30)).await;
    let held = held(api, TEAM).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].1.as_deref(), Some("unauthenticated sender"));
    let started = Instant::now();
    loop {
        let snap = world.recorder().snapshot();
        let ids: Vec<&str> = snap
            .copies
            .iter()
            .filter_map(|c| c.message_id.as_deref())
            .collect();
        assert!(!ids.iter().any(|id| id.contains("forged1")), "{ids:?}");
        if ids.iter().filter(|id| id.contains("genuine1")).count() == MEMBERS.len() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "copies missing: {ids:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    herald_cli(
        api,
        None,
        &["list", "set", TEAM, "require_aligned_from=false"],
    );
    let shown = herald_cli(api, None, &["list", "show", TEAM]);
    let view: serde_json::Value = serde_json::from_str(&shown).expect("list show is JSON");
    assert_eq!(view["effective"]["require_aligned_from"], false, "{shown}");
    server.stop().await;
}
