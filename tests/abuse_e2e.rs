//! Issue 18 ("hard to abuse") against the running server on the simulated world: what Herald
//! passes on to members is strict (item 7). A NUL in DATA is refused and nothing reaches a
//! member; a post without `Date:` / `Message-ID:` reaches every member with both added, once.

mod support;

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
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(server_config(&world, dir.path().to_path_buf())).await;
    create_list(&server.api, LIST, json!({"posting_policy": "anyone"})).await;
    for m in MEMBERS {
        let (status, body) = http(
            "POST",
            &format!("{}/api/lists/{LIST}/members", server.api),
            Some(json!({ "address": m })),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
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
