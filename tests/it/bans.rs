//! Against the running server on the simulated world: bans and the suppression
//! list, administered with the `herald` CLI and the HTTP API as an operator would.
//! A banned envelope sender is refused at RCPT (`550 5.7.1` naming the ban), a banned `From:`
//! at the end of DATA; a banned or suppressed address cannot come in by any subscribe path
//! (API add, API subscribe request, mail to `-request`, CSV import); a suppressed member gets
//! no copy of a post and no notice of any kind.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::{Duration, Instant};
use support::*;

const LIST: &str = "dev@lists.test";
const REQUEST: &str = "dev-request@lists.test";
const MEMBERS: [&str; 2] = ["alice@d0.test", "bob@d1.test"];

async fn setup() -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    add_members(&server.api, LIST, &MEMBERS).await;
    (world, server, dir)
}

/// Copies `recipient` (any case) received so far.
fn count_for(world: &World, recipient: &str) -> usize {
    world
        .recorder()
        .snapshot()
        .copies
        .iter()
        .filter(|c| c.recipient.eq_ignore_ascii_case(recipient))
        .count()
}

/// Waits until `recipient` has `want` copies (fails after 30 s).
async fn wait_copies(world: &World, recipient: &str, want: usize) {
    let started = Instant::now();
    while count_for(world, recipient) < want {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{recipient}: fewer than {want} copies"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn post(from: &str, subject: &str) -> Vec<u8> {
    format!("From: {from}\r\nTo: {LIST}\r\nSubject: {subject}\r\n\r\nhello\r\n").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn banned_senders_are_refused_at_rcpt_or_by_from_and_cannot_subscribe() {
    let (world, server, _dir) = setup().await;
    let api = &server.api;
    let out = herald_cli(api, None, &["ban", "add", "--list", LIST, "@Evil.TEST"]);
    assert!(out.contains("banned @evil.test on dev@lists.test"), "{out}");
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/bans"),
        Some(json!({"pattern": "^spam[0-9]+@"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // A hostile pattern is refused with its reason, over the API and the CLI alike.
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/bans"),
        Some(json!({"pattern": "^(\\w{100}){100}{100}"})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string().contains("not a usable regular expression"),
        "{body}"
    );

    let (mut s, _) = Smtp::connect(server.smtp).await;
    assert!(s.cmd("EHLO d0.test").await.starts_with("250"));
    // Envelope sender banned (any case): refused at RCPT, for posts and requests alike.
    assert!(s.cmd("MAIL FROM:<Eve@EVIL.test>").await.starts_with("250"));
    let r = s.cmd(&format!("RCPT TO:<{LIST}>")).await;
    assert!(r.starts_with("550 5.7.1"), "{r}");
    assert!(
        r.contains("banned from dev@lists.test (list ban @evil.test)"),
        "{r}"
    );
    let r = s.cmd(&format!("RCPT TO:<{REQUEST}>")).await;
    assert!(r.starts_with("550 5.7.1"), "{r}");
    assert!(s.cmd("RSET").await.starts_with("250"));
    // A global regex ban reaches this list too.
    assert!(s.cmd("MAIL FROM:<spam12@d0.test>").await.starts_with("250"));
    let r = s.cmd(&format!("RCPT TO:<{LIST}>")).await;
    assert!(r.contains("(global ban ^spam[0-9]+@)"), "{r}");
    assert!(s.cmd("RSET").await.starts_with("250"));
    // Only the header tells: refused at the end of DATA.
    let r = s
        .send_mail("carol@d0.test", &[LIST], &post("eve@evil.test", "sneaky"))
        .await;
    assert!(r.starts_with("550 5.7.1"), "{r}");
    assert!(
        r.contains("<eve@evil.test> is banned from dev@lists.test"),
        "{r}"
    );
    // An honest post goes out to both members; nothing banned went anywhere.
    let r = s
        .send_mail("carol@d0.test", &[LIST], &post("carol@d0.test", "honest"))
        .await;
    wait_complete(api, &queued_id(&r), Duration::from_secs(30)).await;
    for m in MEMBERS {
        wait_copies(&world, m, 1).await;
    }
    assert_eq!(world.recorder().snapshot().copies.len(), 2);
    let trips = "herald_list_guard_trips_total{guard=\"banned\"}";
    assert_eq!(metric(api, trips).await, 4);

    // No way in for a banned address: API add (403), subscribe request (409), CSV import.
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/members"),
        Some(json!({"address": "eve@evil.test"})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.to_string()
            .contains("banned by this list's ban @evil.test"),
        "{body}"
    );
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/subscribe"),
        Some(json!({"address": "spam7@x.test"})),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("global ban"), "{body}");
    let (status, body) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        b"email\nok@d0.test\nmallory@evil.test\n".to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let report: herald_api_types::ImportReport = view("import", &body);
    assert_eq!((report.added, report.rejected_total), (1, 1), "{body}");
    assert_eq!(report.rejected[0].line, 3);
    assert!(report.rejected[0].reason.contains("banned"), "{body}");

    // The operator's view, and lifting the ban lets the sender in again.
    let out = herald_cli(api, None, &["ban", "ls", "--list", LIST]);
    assert!(
        out.contains("@evil.test") && out.contains("1 bans on dev@lists.test"),
        "{out}"
    );
    let out = herald_cli(api, None, &["ban", "ls"]);
    assert!(
        out.contains("^spam[0-9]+@") && out.contains("1 bans on (global)"),
        "{out}"
    );
    herald_cli(api, None, &["ban", "rm", "--list", LIST, "@evil.test"]);
    assert!(s.cmd("MAIL FROM:<eve@evil.test>").await.starts_with("250"));
    let r = s.cmd(&format!("RCPT TO:<{LIST}>")).await;
    assert!(r.starts_with("250"), "{r}");
    s.cmd("QUIT").await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suppressed_address_gets_no_copy_no_notice_and_cannot_come_back() {
    let (world, server, _dir) = setup().await;
    let api = &server.api;
    let out = herald_cli(
        api,
        None,
        &[
            "suppress",
            "add",
            "Alice@d0.test",
            "--reason",
            "erasure request #7",
            "--source",
            "erasure",
        ],
    );
    assert!(out.contains("suppressed Alice@d0.test on (global) (erasure: erasure request #7); 1 member(s) disabled"), "{out}");

    // A post reaches bob only.
    let (mut s, _) = Smtp::connect(server.smtp).await;
    assert!(s.cmd("EHLO d1.test").await.starts_with("250"));
    let r = s
        .send_mail("bob@d1.test", &[LIST], &post("bob@d1.test", "after"))
        .await;
    wait_complete(api, &queued_id(&r), Duration::from_secs(30)).await;
    wait_copies(&world, "bob@d1.test", 1).await;

    // Every way back is refused, with the reason.
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/members/alice@d0.test/enable"),
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.to_string()
            .contains("global suppression list (erasure: erasure request #7)"),
        "{body}"
    );
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/subscribe"),
        Some(json!({"address": "alice@d0.test"})),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        b"email\nALICE@d0.test\n".to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let report: herald_api_types::ImportReport = view("import", &body);
    assert_eq!((report.added, report.rejected_total), (0, 1), "{body}");
    // By mail: no confirmation, and not even the refusal is mailed to a suppressed address.
    let r = s
        .send_mail(
            "alice@d0.test",
            &[REQUEST],
            b"From: alice@d0.test\r\nSubject: subscribe\r\n\r\nsubscribe\r\n",
        )
        .await;
    assert!(r.starts_with("250"), "{r}");
    // An honest request from someone else is answered (the proof the request runner ran).
    let r = s
        .send_mail(
            "carol@d1.test",
            &[REQUEST],
            b"From: carol@d1.test\r\nSubject: help\r\n\r\nhelp\r\n",
        )
        .await;
    assert!(r.starts_with("250"), "{r}");
    wait_copies(&world, "carol@d1.test", 1).await;
    wait_settled(api, Duration::from_secs(30)).await;
    assert_eq!(
        count_for(&world, "alice@d0.test"),
        0,
        "nothing ever mailed to alice"
    );

    let out = herald_cli(api, None, &["suppress", "ls"]);
    assert!(
        out.contains("Alice@d0.test") && out.contains("erasure"),
        "{out}"
    );
    assert!(out.contains("1 suppressed on (global)"), "{out}");
    herald_cli(api, None, &["suppress", "rm", "alice@d0.test"]);
    let out = herald_cli(api, None, &["suppress", "ls"]);
    assert!(out.contains("0 suppressed"), "{out}");
    // Lifted: nobody is re-enabled by it, but the administrator may now.
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/members/alice@d0.test/enable"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    s.cmd("QUIT").await;
    server.stop().await;
}
