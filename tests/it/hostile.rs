//! Hostile input against the running server, each with its expected reply and nothing lost or
//! fanned out by mistake: relay attempts, smuggling, oversize and over-long input, pipelined
//! garbage, header injection through member data, a broken CSV, moderation of non-members, and
//! the CLI talking to a server that is not there.

use crate::support;

use herald_api_types::{ImportReport, Status};
use herald_sim::{Profile, World};
use serde_json::json;
use std::time::Duration;
use support::*;

const LIST: &str = "dev@lists.test";

async fn setup() -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&[Profile::Normal, Profile::Normal], true))
        .await
        .expect("world");
    // The member alice posts from d0.test, whose SPF names the test client (a members list
    // takes her From: only with a DMARC pass).
    authenticate_senders(&world, &["d0.test"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = server_config(&world, dir.path().to_path_buf());
    cfg.smtp_in.limits.max_message_octets = 64 * 1024;
    cfg.smtp_in.limits.max_errors = 5;
    let server = TestServer::start(cfg).await;
    create_list(&server.api, LIST, json!({"posting_policy": "members"})).await;
    let (status, body) = http(
        "POST",
        &format!("{}/api/v1/lists/{LIST}/members", server.api),
        Some(json!({"address": "alice@d0.test", "name": "Alice"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    (world, server, dir)
}

fn message(from: &str, id: &str) -> Vec<u8> {
    format!("From: {from}\r\nSubject: hi\r\nMessage-ID: <{id}@x.test>\r\n\r\nhello\r\n")
        .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_refuses_hostile_sessions_and_keeps_what_it_accepts() {
    let (world, server, _dir) = setup().await;
    let (mut s, _) = Smtp::connect(server.smtp).await;
    assert!(s.cmd("EHLO evil.test").await.starts_with("250"));
    // Never an open relay.
    let r = s
        .send_mail("x@evil.test", &["victim@elsewhere.test"], b"x\r\n")
        .await;
    assert!(r.starts_with("550 5.1.1"), "{r}");
    // Bounces and requests are accepted and kept, not fanned out.
    let r = s
        .send_mail(
            "",
            &["dev-bounces+alice=d0.test@lists.test"],
            &message("mailer-daemon@d0.test", "b1"),
        )
        .await;
    assert!(r.starts_with("250"), "{r}");
    let r = s
        .send_mail(
            "bob@d1.test",
            &["dev-request@lists.test"],
            &message("bob@d1.test", "r1"),
        )
        .await;
    assert!(r.starts_with("250"), "{r}");
    // A non-member's post is accepted and held for moderation; a member's post goes out.
    let r = s
        .send_mail(
            "mallory@d1.test",
            &[LIST],
            &message("mallory@d1.test", "held1"),
        )
        .await;
    assert!(r.starts_with("250"), "{r}");
    let r = s
        .send_mail(
            "alice@d0.test",
            &[LIST],
            &message("Alice <alice@d0.test>", "ok1"),
        )
        .await;
    let post = queued_id(&r);
    // SMTP smuggling: a bare LF before the dot must not end the message nor inject a command.
    assert!(s.cmd("MAIL FROM:<alice@d0.test>").await.starts_with("250"));
    assert!(s.cmd(&format!("RCPT TO:<{LIST}>")).await.starts_with("250"));
    assert!(s.cmd("DATA").await.starts_with("354"));
    s.send_raw(b"From: alice@d0.test\r\n\r\nhi\n.\nMAIL FROM:<x@evil.test>\r\n.\r\n")
        .await;
    let r = s.reply().await;
    assert!(r.starts_with("550 5.6.0"), "{r}");
    // Oversize (the limit is 64 KiB here).
    let line = format!("{}\r\n", "x".repeat(98));
    let big = [
        message("alice@d0.test", "big"),
        line.repeat(720).into_bytes(),
    ]
    .concat();
    let r = s.send_mail("alice@d0.test", &[LIST], &big).await;
    assert!(r.starts_with("552 5.3.4"), "{r}");
    // An over-long command line.
    let r = s.cmd(&format!("NOOP {}", "a".repeat(2000))).await;
    assert!(r.starts_with("500 5.5.2"), "{r}");
    s.cmd("QUIT").await;

    wait_complete(&server.api, &post, Duration::from_secs(30)).await;
    // The request is answered (help, to bob) and the held post's sender is told (to
    // mallory); list members get only the member's post.
    let started = std::time::Instant::now();
    let snap = loop {
        let snap = world.recorder().snapshot();
        let told = |a: &str| snap.copies_for(a).len() == 1;
        if told("bob@d1.test") && told("mallory@d1.test") {
            break snap;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "generated mail not delivered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let list_copies = snap
        .copies
        .iter()
        .filter(|c| c.message_id.as_deref().is_some_and(|m| m.contains("ok1")))
        .count();
    assert_eq!(list_copies, 1, "only the member's post reached a member");
    assert_eq!(
        snap.accepted, 3,
        "the post, the help reply and the held notice"
    );
    assert_eq!(snap.copies_for("alice@d0.test").len(), 1);
    let started = std::time::Instant::now();
    loop {
        let status: Status = get_view(&format!("{}/api/v1/status", server.api)).await;
        if status.spool.live_posts == 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the unrecognized bounce (kept for an administrator) and the held post stay: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_garbage_is_cut_off() {
    let (world, server, _dir) = setup().await;
    let (mut s, _) = Smtp::connect(server.smtp).await;
    s.send_raw(b"EHLO x\r\n").await;
    s.reply().await;
    let garbage: Vec<u8> = (0..50)
        .flat_map(|i| format!("GARBAGE {i} \x01\x02\r\n").into_bytes())
        .collect();
    s.send_raw(&garbage).await;
    let mut last = String::new();
    for _ in 0..60 {
        last = s.reply().await;
        if last.starts_with("421") || last == "<closed>" {
            break;
        }
    }
    assert!(last.starts_with("421 4.7.0"), "{last}");
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_data_cannot_inject_headers_and_broken_csv_rows_are_reported() {
    let (world, server, _dir) = setup().await;
    let api = &server.api;
    let (status, body) = http(
        "POST",
        &format!("{api}/api/v1/lists/{LIST}/members"),
        Some(json!({"address": "eve@d1.test", "name": "Eve\r\nBcc: victim@x.test"})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = http(
        "GET",
        &format!("{api}/api/v1/lists/{LIST}/members/eve@d1.test"),
        None,
    )
    .await;
    assert_eq!(status, 404, "nothing stored");

    let csv = "email,name\n\
               good1@d0.test,Good One\n\
               not-an-address,Bad\n\
               ,Missing\n\
               good2@d1.test,\"Quoted, Name\"\n\
               bad@d0.test,\"Evil\rX-Injected: 1\"\n\
               good3@d0.test,Three\n";
    let (status, report) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        csv.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let imported: ImportReport = view("import", &report);
    assert_eq!(imported.added, 3, "{report}");
    let lines: Vec<u64> = imported.rejected.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![3, 4, 6], "{report}");
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_click_unsubscribe_needs_a_post_and_a_valid_token() {
    let (world, server, _dir) = setup().await;
    let api = &server.api;
    let list = herald_types::Address::parse(LIST).expect("list");
    let alice = herald_types::Address::parse("alice@d0.test").expect("alice");
    let token = herald_fanout::unsubscribe_token(SECRET.as_bytes(), &list, &alice);
    let url = herald_fanout::unsubscribe_url(api, &list, &alice, &token);
    let client = reqwest::Client::new();
    // GET shows a page and changes nothing (link scanners follow GETs).
    let page = client.get(&url).send().await.expect("get");
    assert_eq!(page.status().as_u16(), 200);
    let (status, _) = http(
        "GET",
        &format!("{api}/api/v1/lists/{LIST}/members/alice@d0.test"),
        None,
    )
    .await;
    assert_eq!(status, 200, "still a member after GET");
    // A forged token is refused.
    let forged = url.replace(&token, "AAAAAAAAAAAAAAAAAAAAAA");
    let r = client
        .post(&forged)
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 403);
    // The real one-click POST unsubscribes at once.
    let r = client
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 200);
    let (status, _) = http(
        "GET",
        &format!("{api}/api/v1/lists/{LIST}/members/alice@d0.test"),
        None,
    )
    .await;
    assert_eq!(status, 404, "unsubscribed");
    server.stop().await;
    world.shutdown().await;
}

#[test]
fn the_cli_says_clearly_when_no_server_is_running() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["--server", &format!("http://127.0.0.1:{port}"), "status"])
        .output()
        .expect("run herald");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no Herald server is answering"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_take_every_smtp_session_and_refusals_show_in_metrics() {
    let world = World::start(world_config(&[Profile::Normal], true))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = server_config(&world, dir.path().to_path_buf());
    cfg.smtp_in.max_sessions_per_client = 2;
    let server = TestServer::start(cfg).await;
    let mut open = Vec::new();
    for _ in 0..2 {
        let (s, banner) = Smtp::connect(server.smtp).await;
        assert!(banner.starts_with("220"), "{banner}");
        open.push(s);
    }
    let (mut refused, banner) = Smtp::connect(server.smtp).await;
    assert!(banner.starts_with("421 4.7.0"), "{banner}");
    assert_eq!(refused.reply().await, "<closed>");
    // LMTP comes from the front MTA's one address: never limited per client.
    let mut lmtp = Vec::new();
    for _ in 0..4 {
        let (s, banner) = Smtp::connect(server.lmtp).await;
        assert!(banner.starts_with("220"), "{banner}");
        lmtp.push(s);
    }
    // A slot given back is usable again.
    let mut leaving = open.pop().expect("two open");
    assert!(leaving.cmd("QUIT").await.starts_with("221"));
    assert_eq!(leaving.reply().await, "<closed>");
    let mut admitted = false;
    for _ in 0..100 {
        let (_s, banner) = Smtp::connect(server.smtp).await;
        if banner.starts_with("220") {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(admitted, "the closed session's slot was released");
    let (_, metrics) = http("GET", &format!("{}/metrics", server.api), None).await;
    let metrics = metrics.as_str().expect("text").to_string();
    assert!(
        !metrics.contains("herald_inbound_refusals_total{reason=\"per_client_limit\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("herald_inbound_refusals_total{reason=\"buffer_budget\"} 0"));
    drop((open, lmtp));
    server.stop().await;
    drop(world);
}
