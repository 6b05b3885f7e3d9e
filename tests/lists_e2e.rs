//! Issue 5 end to end over real sockets and the simulated world: bounces by mail are scored
//! against the VERP member only; a retried post (same Message-ID) fans out once; a cross-post
//! reaches a member of both lists once; double opt-in by mail (the confirmation mail is
//! delivered to the simulated mailbox, the test takes the token from it and confirms by reply);
//! mailto unsubscribe with confirmation by link (GET shows, POST confirms); a non-member's post
//! is held, listed and approved.

mod support;

use herald_sim::{Profile, World};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dev@lists.test";
const OTHER: &str = "ops@lists.test";

async fn add_member(api: &str, list: &str, address: &str) {
    let (st, body) = http(
        "POST",
        &format!("{api}/api/lists/{list}/members"),
        Some(json!({ "address": address })),
    )
    .await;
    assert_eq!(st, 201, "add member: {body}");
}

async fn send(server: &TestServer, from: &str, rcpts: &[&str], msg: &str) -> String {
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO client.test").await;
    let r = c.send_mail(from, rcpts, msg.as_bytes()).await;
    c.cmd("QUIT").await;
    r
}

/// Polls `check` until it returns Some, or fails after `limit`.
async fn wait_for<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn start() -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    create_list(&server.api, LIST, json!({"posting_policy": "members"})).await;
    create_list(&server.api, OTHER, json!({"posting_policy": "anyone"})).await;
    for m in ["bob@d0.test", "carol@d1.test", "dave@d0.test"] {
        add_member(&server.api, LIST, m).await;
    }
    for m in ["bob@d0.test", "erin@d1.test"] {
        add_member(&server.api, OTHER, m).await;
    }
    (world, server, dir)
}

fn post(from: &str, to: &str, mid: &str) -> String {
    format!("From: {from}\r\nTo: {to}\r\nSubject: hello\r\nMessage-ID: <{mid}>\r\n\r\nbody\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_and_cross_posts_reach_each_member_once() {
    let (world, server, _dir) = start().await;
    let msg = post("bob@d0.test", &format!("{LIST}, {OTHER}"), "x1@d0.test");
    let first = send(&server, "bob@d0.test", &[LIST, OTHER], &msg).await;
    assert!(first.starts_with("250"), "{first}");
    // The sending MTA lost our 250 and retries: acknowledged with the same id, not fanned out.
    let retry = send(&server, "bob@d0.test", &[LIST], &msg).await;
    assert_eq!(queued_id(&retry), queued_id(&first));
    // dev: bob, carol, dave; ops: bob (skipped, on dev), erin → 4 copies, bob once.
    let rec = world.recorder();
    wait_for(Duration::from_secs(30), "4 copies", || {
        (rec.snapshot().accepted >= 4).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let snap = rec.snapshot();
    assert_eq!(
        snap.accepted,
        4,
        "copies: {:?}",
        snap.copies.iter().map(|c| &c.recipient).collect::<Vec<_>>()
    );
    assert_eq!(snap.copies_for("bob@d0.test").len(), 1);
    assert_eq!(snap.duplicates, 0);
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounces_by_mail_score_only_the_verp_member() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    let dsn =
        std::fs::read_to_string("crates/bounce/tests/corpus/postfix_hard.eml").expect("corpus");
    // A bounce bomb: 30 bounces for bob through the -bounces+VERP address.
    for _ in 0..30 {
        let r = send(&server, "", &["dev-bounces+bob=d0.test@lists.test"], &dsn).await;
        assert!(r.starts_with("250"), "{r}");
    }
    let url = format!("{api}/api/lists/{LIST}/members/bob@d0.test/detail");
    let detail = wait_for_http(&url, |v| {
        v["bounces"].as_array().is_some_and(|b| b.len() >= 30)
    })
    .await;
    assert_eq!(
        detail["bounce_score"]["score"],
        json!(1.0),
        "once per day: {detail}"
    );
    assert_eq!(detail["member"]["status"]["state"], "enabled");
    let carol = wait_for_http(
        &format!("{api}/api/lists/{LIST}/members/carol@d1.test/detail"),
        |_| true,
    )
    .await;
    assert_eq!(carol["bounce_score"], Value::Null);
    // A spam-block rejection is recorded against the list, not the member.
    let policy =
        std::fs::read_to_string("crates/bounce/tests/corpus/gmail_policy.eml").expect("corpus");
    send(
        &server,
        "",
        &["dev-bounces+carol=d1.test@lists.test"],
        &policy,
    )
    .await;
    let rep = wait_for_http(&format!("{api}/api/bounces?list={LIST}&kind=policy"), |v| {
        v.as_array().is_some_and(|a| !a.is_empty())
    })
    .await;
    assert_eq!(rep[0]["address"], "");
    // Nothing stays in the spool but what must (recognized bounces are completed).
    server.stop().await;
    world.shutdown().await;
}

async fn wait_for_http(url: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (st, v) = http("GET", url, None).await;
        if st == 200 && ok(&v) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out on {url}: {st} {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The newest kept message delivered to `rcpt` whose Subject starts with "confirm ".
fn confirmation_token(world: &World, rcpt: &str) -> Option<String> {
    let snap = world.recorder().snapshot();
    snap.copies_for(rcpt).iter().rev().find_map(|c| {
        let msg = c.message.as_ref()?;
        let text = String::from_utf8_lossy(msg);
        text.lines()
            .find_map(|l| l.strip_prefix("Subject: confirm "))
            .map(|t| t.trim().to_string())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_opt_in_by_mail_and_mailto_unsubscribe_round_trip() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    let newbie = "newbie@d1.test";
    let req = format!("From: {newbie}\r\nTo: dev-request@lists.test\r\nSubject: subscribe\r\n\r\n");
    assert!(send(&server, newbie, &["dev-request@lists.test"], &req)
        .await
        .starts_with("250"));
    let token = wait_for(Duration::from_secs(30), "confirmation mail", || {
        confirmation_token(&world, newbie)
    })
    .await;
    let member_url = format!("{api}/api/lists/{LIST}/members/{newbie}");
    assert_eq!(
        http("GET", &member_url, None).await.0,
        404,
        "not before confirming"
    );
    // Confirm by replying to the confirmation mail.
    let reply = format!(
        "From: {newbie}\r\nTo: dev-request@lists.test\r\nSubject: Re: confirm {token}\r\n\r\n> quoted\r\n"
    );
    send(&server, newbie, &["dev-request@lists.test"], &reply).await;
    wait_for_http(&member_url, |_| true).await;

    // mailto unsubscribe: a confirmation round trip, confirmed by the link (GET then POST).
    // So far newbie got the confirmation and the "done" reply.
    let rec = world.recorder();
    wait_for(Duration::from_secs(30), "the subscribe result mail", || {
        (rec.snapshot().copies_for(newbie).len() == 2).then_some(())
    })
    .await;
    let unsub = format!(
        "From: {newbie}\r\nTo: dev-request@lists.test\r\nSubject: hi\r\n\r\nunsubscribe\r\n"
    );
    send(&server, newbie, &["dev-request@lists.test"], &unsub).await;
    wait_for(Duration::from_secs(30), "unsubscribe confirmation", || {
        (rec.snapshot().copies_for(newbie).len() == 3).then_some(())
    })
    .await;
    let token = confirmation_token(&world, newbie).expect("token");
    let link = format!("{api}/confirm/{token}");
    let (st, page) = http("GET", &link, None).await;
    assert_eq!(st, 200, "{page}");
    assert_eq!(
        http("GET", &member_url, None).await.0,
        200,
        "GET never acts"
    );
    let (st, _) = http("POST", &link, None).await;
    assert_eq!(st, 200);
    assert_eq!(http("GET", &member_url, None).await.0, 404, "unsubscribed");
    let (st, _) = http("POST", &format!("{api}/confirm/{token}x"), None).await;
    assert_eq!(st, 403, "an altered token is refused");
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_member_post_is_held_listed_and_approved() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    let msg = post("stranger@d1.test", LIST, "held-1@d1.test");
    let r = send(&server, "stranger@d1.test", &[LIST], &msg).await;
    assert!(r.starts_with("250"), "{r}");
    let held = wait_for_http(&format!("{api}/api/held?list={LIST}"), |v| {
        v.as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    let id = held[0]["post"].to_string();
    // The poster is told.
    let rec = world.recorder();
    wait_for(Duration::from_secs(30), "held notice", || {
        (!rec.snapshot().copies_for("stranger@d1.test").is_empty()).then_some(())
    })
    .await;
    let (st, body) = http("POST", &format!("{api}/api/held/{id}/approve"), None).await;
    assert_eq!(st, 200, "{body}");
    wait_for(Duration::from_secs(30), "approved post delivered", || {
        let s = rec.snapshot();
        ["bob@d0.test", "carol@d1.test", "dave@d0.test"]
            .iter()
            .all(|m| s.copies_for(m).len() == 1)
            .then_some(())
    })
    .await;
    let (_, after) = http("GET", &format!("{api}/api/held"), None).await;
    assert_eq!(after, json!([]));
    server.stop().await;
    world.shutdown().await;
}
