//! Lists end to end over real sockets and the simulated world: bounces by mail are scored
//! against the VERP member only; a retried post (same Message-ID) fans out once; a cross-post
//! reaches a member of both lists once; double opt-in by mail (the confirmation mail is
//! delivered to the simulated mailbox, the test takes the token from it and confirms by reply);
//! mailto unsubscribe with confirmation by link (GET shows, POST confirms); a non-member's post
//! is held, listed and approved; a moderator approves or rejects a held post by replying to the
//! moderation notice (forged tokens and non-moderators refused, the poster told of a
//! rejection); a member disabled by bounces is told when the list's `bounce_notify` is on; a
//! member flagged `moderated` is held until the flag is cleared.

use crate::support;

use herald_api_types::{BounceEvent, HeldView, MemberDetail};
use herald_sim::{Profile, World};
use herald_types::MemberStatus;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dev@lists.test";
const OTHER: &str = "ops@lists.test";

async fn add_member(api: &str, list: &str, address: &str) {
    let (st, body) = http(
        "POST",
        &format!("{api}/api/v1/lists/{list}/members"),
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

async fn start() -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    // Members post from d0.test and d1.test, whose SPF names the test client: their From:
    // counts on the members list only with that DMARC pass.
    authenticate_senders(&world, &["d0.test", "d1.test"]);
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
    wait_until_some("4 copies", || (rec.snapshot().accepted >= 4).then_some(())).await;
    wait_settled(&server.api, Duration::from_secs(30)).await;
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
    let url = format!("{api}/api/v1/lists/{LIST}/members/bob@d0.test/detail");
    let detail = wait_for_http(&url, |v| {
        view::<MemberDetail>("detail", v).bounces.len() >= 30
    })
    .await;
    let detail: MemberDetail = view("detail", &detail);
    assert_eq!(
        detail.bounce_score.map(|b| b.score),
        Some(1.0),
        "once per day: {detail:?}"
    );
    assert_eq!(detail.member.status, MemberStatus::Enabled);
    let carol = wait_for_http(
        &format!("{api}/api/v1/lists/{LIST}/members/carol@d1.test/detail"),
        |_| true,
    )
    .await;
    assert_eq!(view::<MemberDetail>("detail", &carol).bounce_score, None);
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
    let rep = wait_for_http(
        &format!("{api}/api/v1/bounces?list={LIST}&kind=policy"),
        |v| !view::<Vec<BounceEvent>>("bounces", v).is_empty(),
    )
    .await;
    let rep: Vec<BounceEvent> = view("bounces", &rep);
    assert_eq!(rep[0].address, "");
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
        let text = unfolded(c.message.as_ref()?);
        text.lines()
            .find_map(|l| l.strip_prefix("Subject: confirm "))
            .map(|t| t.trim().to_string())
    })
}

/// A list with `send_welcome` welcomes a member whose subscription is confirmed — once: the
/// same confirmation again (a second click) is spent and welcomes nobody twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_subscription_is_welcomed_once_when_the_list_asks() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    const CLUB: &str = "club@lists.test";
    create_list(
        &api,
        CLUB,
        json!({"display_name": "Club", "send_welcome": true,
               "welcome_message": "Hi {{email}}: read the rules first."}),
    )
    .await;
    let newbie = "newbie@d1.test";
    let req =
        format!("From: {newbie}\r\nTo: club-request@lists.test\r\nSubject: subscribe\r\n\r\n");
    assert!(send(&server, newbie, &["club-request@lists.test"], &req)
        .await
        .starts_with("250"));
    let token = wait_until_some("confirmation mail", || confirmation_token(&world, newbie)).await;
    let link = format!("{api}/confirm/{token}");
    let (st, _) = http("POST", &link, None).await;
    assert_eq!(st, 200);
    // A second click: the link is spent, the page says so (410 Gone), nothing happens again.
    let (st, page) = http("POST", &link, None).await;
    assert_eq!(st, 410, "{page}");
    assert!(page.to_string().contains("already used"), "{page}");
    let welcome = wait_until_some("the welcome", || {
        messages_for(&world, newbie)
            .into_iter()
            .find(|m| m.contains("Subject: Welcome to Club"))
    })
    .await;
    assert!(
        welcome.contains("Hi newbie@d1.test: read the rules first."),
        "{welcome}"
    );
    assert!(welcome.contains("club-request@lists.test"), "{welcome}");
    wait_settled(&api, Duration::from_secs(30)).await;
    let welcomes = messages_for(&world, newbie)
        .iter()
        .filter(|m| m.contains("Subject: Welcome to Club"))
        .count();
    assert_eq!(welcomes, 1, "welcomed once");
    // A list without send_welcome (the default) sends none.
    let req = format!("From: {newbie}\r\nTo: ops-request@lists.test\r\nSubject: subscribe\r\n\r\n");
    send(&server, newbie, &["ops-request@lists.test"], &req).await;
    let n = messages_for(&world, newbie).len();
    let token = wait_until_some("second confirmation", || {
        (messages_for(&world, newbie).len() > n)
            .then(|| confirmation_token(&world, newbie))
            .flatten()
    })
    .await;
    let (st, _) = http("POST", &format!("{api}/confirm/{token}"), None).await;
    assert_eq!(st, 200);
    wait_settled(&api, Duration::from_secs(30)).await;
    assert!(
        !messages_for(&world, newbie)
            .iter()
            .any(|m| m.contains("Subject: Welcome to") && !m.contains("Welcome to Club")),
        "no welcome from a list that does not send one"
    );
    server.stop().await;
    world.shutdown().await;
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
    let token = wait_until_some("confirmation mail", || confirmation_token(&world, newbie)).await;
    let member_url = format!("{api}/api/v1/lists/{LIST}/members/{newbie}");
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
    // The consent is recorded as a mail command by its sender.
    let detail = wait_for_http(&format!("{member_url}/detail"), |_| true).await;
    let consent = view::<MemberDetail>("detail", &detail)
        .consent
        .expect("consent recorded");
    assert_eq!(consent.source, "mail");
    assert_eq!(consent.client.as_deref(), Some(newbie));

    // mailto unsubscribe: a confirmation round trip, confirmed by the link (GET then POST).
    // So far newbie got the confirmation and the "done" reply.
    let rec = world.recorder();
    wait_until_some("the subscribe result mail", || {
        (rec.snapshot().copies_for(newbie).len() == 2).then_some(())
    })
    .await;
    let unsub = format!(
        "From: {newbie}\r\nTo: dev-request@lists.test\r\nSubject: hi\r\n\r\nunsubscribe\r\n"
    );
    send(&server, newbie, &["dev-request@lists.test"], &unsub).await;
    wait_until_some("unsubscribe confirmation", || {
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
    let held = wait_for_http(&format!("{api}/api/v1/held?list={LIST}"), |v| {
        view::<Vec<HeldView>>("held", v).len() == 1
    })
    .await;
    let id = view::<Vec<HeldView>>("held", &held)[0].post.to_string();
    // The poster is told.
    let rec = world.recorder();
    wait_until_some("held notice", || {
        (!rec.snapshot().copies_for("stranger@d1.test").is_empty()).then_some(())
    })
    .await;
    let (st, body) = http("POST", &format!("{api}/api/v1/held/{id}/approve"), None).await;
    assert_eq!(st, 200, "{body}");
    wait_until_some("approved post delivered", || {
        let s = rec.snapshot();
        ["bob@d0.test", "carol@d1.test", "dave@d0.test"]
            .iter()
            .all(|m| s.copies_for(m).len() == 1)
            .then_some(())
    })
    .await;
    let (_, after) = http("GET", &format!("{api}/api/v1/held"), None).await;
    assert_eq!(after, json!([]));
    server.stop().await;
    world.shutdown().await;
}

/// A member flagged `moderated` (the CLI, as an operator sets it, or an importer from
/// Mailman) is held with the reason, not refused; the flag shows in the member's details; once
/// cleared over the API the member's next post reaches the list — and the flagged member kept
/// receiving the list meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moderated_member_is_held_until_the_flag_is_cleared() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    let out = herald_cli(
        &api,
        None,
        &["member", "set", LIST, "bob@d0.test", "moderated=yes"],
    );
    assert!(out.contains("posts moderated"), "{out}");
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["member", "set", LIST, "bob@d0.test", "moderated=maybe"])
        .env("HERALD_SERVER", &api)
        .output()
        .expect("run herald");
    assert!(!refused.status.success(), "a bad value must be refused");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("moderated must be true or false"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let member_url = format!("{api}/api/v1/lists/{LIST}/members/bob@d0.test/detail");
    let (st, d) = http("GET", &member_url, None).await;
    assert_eq!(st, 200, "{d}");
    assert!(view::<MemberDetail>("detail", &d).moderated);

    let r = send(
        &server,
        "bob@d0.test",
        &[LIST],
        &post("bob@d0.test", LIST, "mod-1@d0.test"),
    )
    .await;
    assert!(
        r.starts_with("250"),
        "a moderated member is held, not refused: {r}"
    );
    let held = wait_for_http(&format!("{api}/api/v1/held?list={LIST}"), |v| {
        view::<Vec<HeldView>>("held", v).len() == 1
    })
    .await;
    let held = view::<Vec<HeldView>>("held", &held);
    assert_eq!(
        held[0].reason.as_deref(),
        Some("the member's posts are moderated")
    );
    // Another member's post goes through, to bob as well.
    let r = send(
        &server,
        "carol@d1.test",
        &[LIST],
        &post("carol@d1.test", LIST, "c-1@d1.test"),
    )
    .await;
    assert!(r.starts_with("250"), "{r}");
    let rec = world.recorder();
    wait_until_some("carol's post to bob", || {
        (!rec.snapshot().copies_for("bob@d0.test").is_empty()).then_some(())
    })
    .await;

    let (st, d) = http(
        "PATCH",
        &format!("{api}/api/v1/lists/{LIST}/members/bob@d0.test"),
        Some(json!({"moderated": false})),
    )
    .await;
    assert_eq!(st, 200, "{d}");
    assert!(!view::<MemberDetail>("detail", &d).moderated);
    let r = send(
        &server,
        "bob@d0.test",
        &[LIST],
        &post("bob@d0.test", LIST, "mod-2@d0.test"),
    )
    .await;
    assert!(r.starts_with("250"), "{r}");
    wait_until_some("bob's unmoderated post", || {
        let s = rec.snapshot();
        s.copies_for("dave@d0.test")
            .iter()
            .filter_map(|c| c.message.as_ref())
            .any(|m| String::from_utf8_lossy(m).contains("mod-2@d0.test"))
            .then_some(())
    })
    .await;
    let (_, still) = http("GET", &format!("{api}/api/v1/held?list={LIST}"), None).await;
    assert_eq!(
        view::<Vec<HeldView>>("held", &still).len(),
        1,
        "only the first stays held"
    );
    server.stop().await;
    world.shutdown().await;
}

const MODERATED: &str = "mod@lists.test";
const BOSS: &str = "boss@d0.test";
const STRANGER: &str = "stranger@d1.test";

/// The kept messages delivered to `rcpt`, as text, oldest first.
fn messages_for(world: &World, rcpt: &str) -> Vec<String> {
    let snap = world.recorder().snapshot();
    snap.copies_for(rcpt)
        .iter()
        .filter_map(|c| c.message.as_ref())
        .map(|m| unfolded(m))
        .collect()
}

/// A delivered message as text with its header unfolded (RFC 5322 §2.2.3: a CRLF followed by
/// white space is removed): generated mail folds long headers, so a `Subject: confirm <token>`
/// may arrive on two lines, and the tests read headers line by line.
fn unfolded(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let head = head.replace("\r\n ", " ").replace("\r\n\t", "\t");
    format!("{head}\r\n\r\n{body}")
}

/// Waits until `rcpt` has received `n` messages and returns them.
async fn wait_messages(world: &World, rcpt: &str, n: usize) -> Vec<String> {
    wait_until_some(&format!("{n} messages for {rcpt}"), || {
        let m = messages_for(world, rcpt);
        (m.len() >= n).then_some(m)
    })
    .await
}

/// The approve token (subject) and reject token (body line) of a moderation notice.
fn moderation_tokens(notice: &str) -> (String, String) {
    let approve = notice
        .lines()
        .find_map(|l| l.strip_prefix("Subject: approve "))
        .expect("approve token in the subject")
        .trim()
        .to_string();
    let reject = notice
        .lines()
        .find_map(|l| l.trim().strip_prefix("reject "))
        .expect("reject token in the body")
        .trim()
        .to_string();
    (approve, reject)
}

/// A request mail from `from` to the moderated list's -request address.
async fn request(server: &TestServer, from: &str, subject: &str, body: &str) {
    let to = "mod-request@lists.test";
    let msg = format!("From: {from}\r\nTo: {to}\r\nSubject: {subject}\r\n\r\n{body}\r\n");
    let r = send(server, from, &[to], &msg).await;
    assert!(r.starts_with("250"), "{r}");
}

/// A moderated list (members bob and carol, moderator boss) and one held post from a stranger;
/// returns the moderator's notice once delivered.
async fn hold_one(world: &World, server: &TestServer, mid: &str, notices: usize) -> String {
    let msg = post(STRANGER, MODERATED, mid);
    let r = send(server, STRANGER, &[MODERATED], &msg).await;
    assert!(r.starts_with("250"), "{r}");
    let all = wait_messages(world, BOSS, notices).await;
    all.into_iter()
        .rev()
        .find(|m| m.contains("Subject: approve "))
        .expect("a moderation notice")
}

async fn start_moderated() -> (World, TestServer, tempfile::TempDir) {
    let (world, server, dir) = start().await;
    create_list(
        &server.api,
        MODERATED,
        json!({"posting_policy": "members", "moderators": [BOSS]}),
    )
    .await;
    for m in ["bob@d0.test", "carol@d1.test"] {
        add_member(&server.api, MODERATED, m).await;
    }
    (world, server, dir)
}

async fn held_count(api: &str) -> usize {
    let (st, v) = http("GET", &format!("{api}/api/v1/held?list={MODERATED}"), None).await;
    assert_eq!(st, 200, "{v}");
    v.as_array().map_or(0, |a| a.len())
}

/// Copies of the post with this Message-ID delivered to `rcpt`.
fn post_copies(world: &World, rcpt: &str, mid: &str) -> usize {
    messages_for(world, rcpt)
        .iter()
        .filter(|m| m.contains(&format!("<{mid}>")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moderator_approves_by_replying_and_forgeries_are_refused() {
    let (world, server, _dir) = start_moderated().await;
    let api = server.api.clone();
    let notice = hold_one(&world, &server, "mod-1@d1.test", 1).await;
    assert!(notice.contains(STRANGER), "{notice}");
    let (approve, _) = moderation_tokens(&notice);
    assert_eq!(held_count(&api).await, 1);

    // An altered token (one payload character changed) from the moderator: refused.
    let mut forged = approve.clone().into_bytes();
    forged[0] = if forged[0] == b'Z' { b'Y' } else { b'Z' };
    let forged = String::from_utf8(forged).expect("ascii");
    request(&server, BOSS, &format!("Re: approve {forged}"), "").await;
    let boss = wait_messages(&world, BOSS, 2).await;
    assert!(boss[1].contains("not valid"), "{}", boss[1]);
    // The genuine token from a non-moderator (a member, even): refused.
    request(
        &server,
        "carol@d1.test",
        &format!("Re: approve {approve}"),
        "",
    )
    .await;
    let carol = wait_messages(&world, "carol@d1.test", 1).await;
    assert!(carol[0].contains("is not a moderator"), "{}", carol[0]);
    assert_eq!(held_count(&api).await, 1, "still held");

    // The moderator replies to the notice: approved, every member gets the post once.
    request(&server, BOSS, &format!("Re: approve {approve}"), "> quoted").await;
    wait_until_some("approved post delivered", || {
        ["bob@d0.test", "carol@d1.test"]
            .iter()
            .all(|m| post_copies(&world, m, "mod-1@d1.test") == 1)
            .then_some(())
    })
    .await;
    let boss = wait_messages(&world, BOSS, 3).await;
    assert!(boss[2].contains("Done: approve"), "{}", boss[2]);
    assert_eq!(held_count(&api).await, 0);
    // Replaying the reply does nothing more.
    request(&server, BOSS, &format!("Re: approve {approve}"), "").await;
    let boss = wait_messages(&world, BOSS, 4).await;
    assert!(boss[3].contains("already decided"), "{}", boss[3]);
    wait_settled(&api, Duration::from_secs(30)).await;
    for m in ["bob@d0.test", "carol@d1.test"] {
        assert_eq!(post_copies(&world, m, "mod-1@d1.test"), 1, "{m}");
    }
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reject_by_reply_tells_the_poster() {
    let (world, server, _dir) = start_moderated().await;
    let api = server.api.clone();
    let notice = hold_one(&world, &server, "mod-2@d1.test", 1).await;
    // The poster got the "held" notice.
    wait_messages(&world, STRANGER, 1).await;
    let (approve, reject) = moderation_tokens(&notice);
    // An approve token does not reject (bound to its action).
    request(&server, BOSS, "Re: held post", &format!("reject {approve}")).await;
    let boss = wait_messages(&world, BOSS, 2).await;
    assert!(boss[1].contains("not valid"), "{}", boss[1]);
    assert_eq!(held_count(&api).await, 1);
    request(&server, BOSS, "Re: held post", &format!("reject {reject}")).await;
    let poster = wait_messages(&world, STRANGER, 2).await;
    assert!(
        poster[1].contains("Subject: Your message was rejected"),
        "{}",
        poster[1]
    );
    assert_eq!(held_count(&api).await, 0);
    wait_settled(&api, Duration::from_secs(30)).await;
    for m in ["bob@d0.test", "carol@d1.test"] {
        assert_eq!(post_copies(&world, m, "mod-2@d1.test"), 0, "{m}");
    }

    // Rejecting through the API tells the poster too.
    hold_one(&world, &server, "mod-3@d1.test", 4).await;
    let held = wait_for_http(&format!("{api}/api/v1/held?list={MODERATED}"), |v| {
        view::<Vec<HeldView>>("held", v).len() == 1
    })
    .await;
    let id = view::<Vec<HeldView>>("held", &held)[0].post.to_string();
    let (st, body) = http("POST", &format!("{api}/api/v1/held/{id}/reject"), None).await;
    assert_eq!(st, 200, "{body}");
    // held notice + rejection for the first post, then the same for the second.
    let poster = wait_messages(&world, STRANGER, 4).await;
    assert!(
        poster
            .iter()
            .filter(|m| m.contains("Subject: Your message was rejected"))
            .count()
            == 2
    );
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_disabled_by_bounces_is_told_when_bounce_notify_is_on() {
    let (world, server, _dir) = start().await;
    let api = server.api.clone();
    let list = "notify@lists.test";
    create_list(
        &api,
        list,
        json!({"posting_policy": "members", "bounce_threshold": 1, "bounce_notify": true}),
    )
    .await;
    add_member(&api, list, "bob@d0.test").await;
    let dsn =
        std::fs::read_to_string("crates/bounce/tests/corpus/postfix_hard.eml").expect("corpus");
    let r = send(
        &server,
        "",
        &["notify-bounces+bob=d0.test@lists.test"],
        &dsn,
    )
    .await;
    assert!(r.starts_with("250"), "{r}");
    let notice = wait_until_some("the disabled notice", || {
        messages_for(&world, "bob@d0.test")
            .into_iter()
            .find(|m| m.contains("Subject: Your subscription to notify@lists.test is disabled"))
    })
    .await;
    assert!(notice.contains("bounce score"), "the reason: {notice}");
    assert!(notice.contains("notify-request@lists.test"), "{notice}");
    let detail = wait_for_http(
        &format!("{api}/api/v1/lists/{list}/members/bob@d0.test/detail"),
        |_| true,
    )
    .await;
    let detail: MemberDetail = view("detail", &detail);
    assert!(
        matches!(detail.member.status, MemberStatus::Disabled(_)),
        "{detail:?}"
    );
    server.stop().await;
    world.shutdown().await;
}
