//! Signals as an operator's tools send them to `herald serve`: logrotate renames the delivery
//! log and sends SIGHUP (no `copytruncate`); every line before the signal is in the renamed
//! file and every line after it in a new file at the configured path.

mod support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use support::binary::BinaryServer;
use support::*;

async fn post(server: &BinaryServer, n: u32) {
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.test").await;
    let msg = format!(
        "From: p@outside.test\r\nTo: rot@lists.test\r\nSubject: post {n}\r\nMessage-ID: <rot-{n}@outside.test>\r\n\r\nHi.\r\n"
    );
    let reply = smtp
        .send_mail("p@outside.test", &["rot@lists.test"], msg.as_bytes())
        .await;
    assert!(reply.starts_with("250"), "{reply}");
}

/// Waits until `path` holds `count` lines that say a copy was sent.
async fn wait_sent_lines(path: &Path, count: usize) -> String {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.matches("status=sent").count() >= count {
            return text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} never had {count} sent lines:\n{text}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reopens_the_delivery_log_after_logrotate_renamed_it() {
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = BinaryServer::configure(dir.path(), &data, &world, "");
    server.start().await;
    create_list(
        &server.api,
        "rot@lists.test",
        json!({"posting_policy": "anyone"}),
    )
    .await;
    let (status, body) = http(
        "POST",
        &format!("{}/api/lists/rot@lists.test/members", server.api),
        Some(json!({"address": "m0@d0.test"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    let log = data.join("log").join("delivery.log");
    post(&server, 1).await;
    wait_sent_lines(&log, 1).await;
    let rotated = data.join("log").join("delivery.log.1");
    std::fs::rename(&log, &rotated).expect("rotate");
    let pid = server.pid().expect("pid");
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .expect("kill -HUP");
    assert!(sent.success());
    // The reopen creates the file at the configured path.
    let started = Instant::now();
    while !log.exists() {
        assert!(started.elapsed() < Duration::from_secs(10), "no new log");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    post(&server, 2).await;
    wait_sent_lines(&log, 1).await;
    server.stop().await;
    let old = std::fs::read_to_string(&rotated).expect("rotated log");
    let new = std::fs::read_to_string(&log).expect("new log");
    assert_eq!(old.matches("status=sent").count(), 1, "old:\n{old}");
    assert_eq!(new.matches("status=sent").count(), 1, "new:\n{new}");
    world.shutdown().await;
}
