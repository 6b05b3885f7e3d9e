//! `herald serve` started as root, as an operator starts it to bind port 25: it drops to
//! `[server] user` before it opens a store or reads from the network (every thread of the
//! process, checked in `/proc`), then serves and delivers as that user; without a user it
//! refuses to run as root unless `allow_root` says so.
//!
//! Needs root, as CI has; elsewhere it says it did not run (and fails when `CI` is set, so it
//! is never skipped in CI).

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;
use support::binary::{free_port, herald_bin, BinaryServer};
use support::*;

fn can_run() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "privilege tests need root and CI runs as root"
    );
    eprintln!("privileges_e2e: not root, nothing to drop; not run");
    false
}

/// `nobody`'s uid and gid from the password database.
fn nobody() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let line = passwd
        .lines()
        .find(|l| l.starts_with("nobody:"))
        .expect("a nobody user");
    let f: Vec<&str> = line.split(':').collect();
    (f[2].parse().expect("uid"), f[3].parse().expect("gid"))
}

/// The real, effective, saved and file-system ids of every thread of `pid`, from `/proc`.
fn thread_ids(pid: u32, field: &str) -> Vec<Vec<u32>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    tasks
        .flatten()
        .map(|t| {
            let status = std::fs::read_to_string(t.path().join("status")).expect("status");
            let line = status
                .lines()
                .find(|l| l.starts_with(field))
                .expect("id line");
            line.split_whitespace()
                .skip(1)
                .map(|v| v.parse().expect("id"))
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_as_root_it_serves_and_delivers_as_the_configured_user() {
    if !can_run() {
        return;
    }
    let (uid, gid) = nobody();
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    // The user must reach its data directory; the server creates it, owned by the user.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let data = dir.path().join("data");
    let mut server = BinaryServer::configure(dir.path(), &data, &world, "");
    let toml = std::fs::read_to_string(&server.config).expect("config");
    let toml = toml.replace("[server]\nallow_root = true", "[server]\nuser = \"nobody\"");
    std::fs::write(&server.config, toml).expect("write config");
    server.start().await;

    let pid = server.pid().expect("pid");
    let uids = thread_ids(pid, "Uid:");
    assert!(uids.len() > 1, "a multi-threaded server: {uids:?}");
    for ids in &uids {
        assert_eq!(ids, &vec![uid; 4], "every thread's uids: {uids:?}");
    }
    for ids in thread_ids(pid, "Gid:") {
        assert_eq!(ids, vec![gid; 4], "every thread's gids");
    }
    assert_eq!(std::fs::metadata(&data).expect("data dir").uid(), uid);

    // It works as that user: a list, a member, a post over SMTP, a copy delivered.
    create_list(
        &server.api,
        "drop@lists.test",
        json!({"posting_policy": "anyone"}),
    )
    .await;
    let (status, body) = http(
        "POST",
        &format!("{}/api/v1/lists/drop@lists.test/members", server.api),
        Some(json!({"address": "m0@d0.test"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (mut smtp, _) = Smtp::connect(server.smtp).await;
    smtp.cmd("EHLO client.test").await;
    let msg = b"From: p@outside.test\r\nTo: drop@lists.test\r\nSubject: as nobody\r\nMessage-ID: <drop-1@outside.test>\r\n\r\nHi.\r\n";
    let reply = smtp
        .send_mail("p@outside.test", &["drop@lists.test"], msg)
        .await;
    assert!(reply.starts_with("250"), "{reply}");
    assert!(world.recorder().wait_for(1, Duration::from_secs(30)).await);
    for file in ["herald.db", "spool"] {
        let owner = std::fs::metadata(data.join(file)).expect(file).uid();
        assert_eq!(owner, uid, "{file} is the user's");
    }
    server.stop().await;
    world.shutdown().await;
}

#[test]
fn as_root_without_a_user_it_refuses_and_names_the_keys() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let config = dir.path().join("herald.toml");
    let toml = format!(
        "data_dir = \"{}\"\n[listen]\nsmtp = \"127.0.0.1:{}\"\nlmtp = \"127.0.0.1:{}\"\nhttp = \"127.0.0.1:{}\"\n",
        data.display(),
        free_port(),
        free_port(),
        free_port()
    );
    std::fs::write(&config, toml).expect("write config");
    let out = std::process::Command::new(herald_bin())
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .expect("run herald");
    assert!(
        !out.status.success(),
        "root without [server] user must not run"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[server] user") && err.contains("allow_root"),
        "{err}"
    );
    assert!(!data.exists(), "nothing was opened before refusing");
}
