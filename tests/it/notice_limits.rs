//! Against the running server on the simulated world: mail Herald sends on
//! others' behalf is limited (`[notice_limits]`). A forged `subscribe` flood for one victim,
//! by mail to `-request` and through the HTTP API, sends the victim at most the configured
//! confirmations and counts the rest as dropped; one SMTP client asking for many addresses is
//! stopped by its client limit; a vacation auto-reply held by the guard draws no held-post
//! notice, while a person's held post still does.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dev@lists.test";
const REQUEST: &str = "dev-request@lists.test";
const VICTIM: &str = "victim@d0.test";

async fn setup(per_client_per_hour: u32) -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, dir.path().to_path_buf());
    config.notice_limits.per_client_per_hour = per_client_per_hour;
    let server = TestServer::start(config).await;
    create_list(
        &server.api,
        LIST,
        json!({"posting_policy": "members", "reply_to": {"kind": "list"}}),
    )
    .await;
    (world, server, dir)
}

/// Copies `recipient` (any case) received.
fn count_for(world: &World, recipient: &str) -> usize {
    let snap = world.recorder().snapshot();
    snap.copies
        .iter()
        .filter(|c| c.recipient.eq_ignore_ascii_case(recipient))
        .count()
}

/// Waits until `recipient` has `want` copies, then a little longer to see no more arrive.
async fn copies_settle(world: &World, recipient: &str, want: usize) -> usize {
    let started = Instant::now();
    while count_for(world, recipient) < want {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{recipient}: fewer than {want} copies"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    count_for(world, recipient)
}

/// A subscribe request by mail naming `who` in `From:`, from the forger's envelope.
fn subscribe_mail(who: &str, i: usize) -> Vec<u8> {
    format!(
        "From: {who}\r\nTo: {REQUEST}\r\nSubject: subscribe\r\nMessage-ID: <sub{i}@evil.test>\r\n\r\nsubscribe\r\n"
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_subscribe_flood_sends_the_victim_three_confirmations() {
    let (world, server, _dir) = setup(8).await;
    let api = &server.api;
    let (mut s, _) = Smtp::connect(server.smtp).await;
    assert!(s.cmd("EHLO evil.test").await.starts_with("250"));
    // 12 by mail (case variants included: one mailbox, one budget) and 8 through the API.
    for i in 0..12 {
        let who = if i % 2 == 0 { VICTIM } else { "Victim@D0.test" };
        let r = s
            .send_mail("forger@evil.test", &[REQUEST], &subscribe_mail(who, i))
            .await;
        assert!(r.starts_with("250"), "request {i}: {r}");
    }
    for i in 0..8 {
        let (status, body) = http(
            "POST",
            &format!("{api}/api/v1/lists/{LIST}/subscribe"),
            Some(json!({ "address": VICTIM })),
        )
        .await;
        assert_eq!(status, 202, "api request {i}: {body}");
    }
    let dropped = "herald_notices_dropped_total{kind=\"confirmation\",limit=\"recipient\"}";
    wait_metric(api, dropped, 17).await;
    // Both spellings are one mailbox: counted together.
    assert_eq!(
        copies_settle(&world, VICTIM, 3).await,
        3,
        "the victim gets the configured 3 confirmations"
    );

    // One client asking for many addresses: 3 of its 8 an hour are spent (the dropped ones
    // spent nothing), so 5 of 10 fresh addresses get a confirmation and 5 are dropped.
    for i in 0..10 {
        let who = format!("fresh{i}@d1.test");
        let r = s
            .send_mail(
                "forger@evil.test",
                &[REQUEST],
                &subscribe_mail(&who, 100 + i),
            )
            .await;
        assert!(r.starts_with("250"), "{r}");
    }
    s.cmd("QUIT").await;
    wait_metric(
        api,
        "herald_notices_dropped_total{kind=\"confirmation\",limit=\"client\"}",
        5,
    )
    .await;
    let started = Instant::now();
    let fresh = loop {
        let snap = world.recorder().snapshot();
        let n = (0..10)
            .filter(|i| !snap.copies_for(&format!("fresh{i}@d1.test")).is_empty())
            .count();
        if n >= 5 || started.elapsed() > Duration::from_secs(30) {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(fresh, 5, "the client's other 5 requests got confirmations");
    // Nobody subscribed: nothing happens until a mailbox holder confirms.
    let members: serde_json::Value = get_view(&format!("{api}/api/v1/lists/{LIST}/members")).await;
    assert_eq!(members.as_array().map(Vec::len), Some(0), "{members}");
    // The flood is not queued anywhere: no live post is left once the copies are out.
    let started = Instant::now();
    loop {
        let snap = world.recorder().snapshot();
        let all = snap.copies.len();
        tokio::time::sleep(Duration::from_millis(500)).await;
        if world.recorder().snapshot().copies.len() == all {
            assert_eq!(all, 3 + 5, "only the admitted confirmations were sent");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30));
    }
    server.stop().await;
}

/// The subjects of the copies `recipient` received.
fn subjects(world: &World, recipient: &str) -> Vec<String> {
    world
        .recorder()
        .snapshot()
        .copies_for(recipient)
        .iter()
        .filter_map(|c| c.message.as_ref())
        .filter_map(|m| {
            let text = String::from_utf8_lossy(m);
            text.lines()
                .find_map(|l| l.strip_prefix("Subject: ").map(str::to_string))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vacation_reply_held_by_the_guard_gets_no_notice() {
    let (world, server, _dir) = setup(30).await;
    let api = &server.api;
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/members"),
        Some(json!({ "address": "alice@d0.test" })),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (mut s, _) = Smtp::connect(server.smtp).await;
    assert!(s.cmd("EHLO d0.test").await.starts_with("250"));
    // A member's vacation reply from her own (non-null) envelope sender: held by the guard.
    let vacation =
        b"From: alice@d0.test\r\nTo: dev@lists.test\r\nSubject: Out of Office: hello\r\n\
Auto-Submitted: auto-replied\r\nMessage-ID: <oof2@d0.test>\r\n\r\nI am away.\r\n";
    let r = s.send_mail("alice@d0.test", &[LIST], vacation).await;
    assert!(r.starts_with("250"), "held, not refused: {r}");
    // A non-member's post, held for moderation: its sender is told (the notice path works).
    let person =
        b"From: carol@d1.test\r\nSubject: a question\r\nMessage-ID: <q1@d1.test>\r\n\r\nhi\r\n";
    let r = s.send_mail("carol@d1.test", &[LIST], person).await;
    assert!(r.starts_with("250"), "{r}");
    s.cmd("QUIT").await;

    wait_metric(api, "herald_held_notices_suppressed_total", 1).await;
    assert_eq!(copies_settle(&world, "carol@d1.test", 1).await, 1);
    assert_eq!(
        subjects(&world, "carol@d1.test"),
        ["Your message is held for moderation"]
    );
    assert_eq!(
        world
            .recorder()
            .snapshot()
            .copies_for("alice@d0.test")
            .len(),
        0,
        "no notice answers the auto-reply, and it was not fanned out"
    );
    let held: Vec<herald_api_types::HeldView> =
        get_view(&format!("{api}/api/v1/held?list={LIST}")).await;
    assert_eq!(held.len(), 2, "both posts wait for a moderator");
    server.stop().await;
}
