//! Backup and restore as an operator does it: `herald backup <dir>` against
//! the real binary in the middle of a fan-out, the old machine dies (`kill -9`), `herald restore
//! <dir>` on a fresh data directory, `herald serve` there: lists and members are back, every
//! member gets the post, and duplicates stay within what the old machine delivered after the
//! cut plus what was in flight.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::{Duration, Instant};
use support::binary::{herald_with_config, BinaryServer};
use support::*;

const LIST: &str = "backup@lists.test";
const MEMBERS: usize = 3000;
const DOMAINS: usize = 8;
const CONNS_PER_DEST: usize = 2;
const BATCH: usize = 8;

fn scheduler() -> String {
    format!(
        "[scheduler]\nmax_connections_per_destination = {CONNS_PER_DEST}\n\
         max_copies_per_batch = {BATCH}\nretry_initial_secs = 1\nretry_max_secs = 2\n\
         destination_backoff_secs = 1\ntick_ms = 50\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_mid_fanout_restored_elsewhere_delivers_to_everyone() {
    let slow = Profile::Slow {
        delay: Duration::from_millis(3),
    };
    let mut world_cfg = world_config(&vec![slow; DOMAINS], false);
    world_cfg.receiver.check_mime_every = 0;
    let world = World::start(world_cfg).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let old_dir = dir.path().join("old");
    let new_dir = dir.path().join("new");
    std::fs::create_dir_all(&old_dir).expect("mkdir");
    std::fs::create_dir_all(&new_dir).expect("mkdir");
    let mut old = BinaryServer::configure(&old_dir, &old_dir.join("data"), &world, &scheduler());
    old.start().await;
    let api = old.api.clone();
    create_list(&api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        members_csv(MEMBERS, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let post = b"From: a@outside.test\r\nSubject: backup\r\nMessage-ID: <backup-1@outside.test>\r\n\r\nbody\r\n";
    let (status, r) = http_bytes(&format!("{api}/api/v1/lists/{LIST}/posts"), post.to_vec()).await;
    assert_eq!(status, 202, "{r}");
    let post_id = view::<herald_api_types::Injected>("inject", &r).post;
    assert!(
        world
            .recorder()
            .wait_for(MEMBERS as u64 / 5, Duration::from_secs(60))
            .await,
        "fan-out did not start"
    );

    // The backup, from the CLI, while the fan-out runs.
    let backup_dir = dir.path().join("backup");
    let before_cut = world.recorder().accepted();
    let started = Instant::now();
    let (api_for_cli, target) = (api.clone(), backup_dir.clone());
    let out = tokio::task::spawn_blocking(move || {
        herald_cli(
            &api_for_cli,
            None,
            &["backup", target.to_str().expect("utf-8")],
        )
    })
    .await
    .expect("join");
    let took = started.elapsed();
    assert!(out.contains("checked against the manifest"), "{out}");
    let at_kill = world.recorder().accepted();
    old.kill9();
    assert!(
        at_kill < MEMBERS as u64,
        "the fan-out finished before the old machine died ({at_kill}): make the world slower"
    );
    assert!(
        at_kill > before_cut,
        "delivery stopped during the backup ({before_cut} → {at_kill} in {took:?})"
    );

    // The new machine: its own config and an empty data directory.
    let mut new = BinaryServer::configure(&new_dir, &new_dir.join("data"), &world, &scheduler());
    let (ok, text) = herald_with_config(
        &new.config,
        &["restore", backup_dir.to_str().expect("utf-8")],
    );
    assert!(ok, "restore failed: {text}");
    assert!(text.contains("journal segment"), "{text}");
    // Restoring a second time over the restored data is refused.
    let (ok, text) = herald_with_config(
        &new.config,
        &["restore", backup_dir.to_str().expect("utf-8")],
    );
    assert!(!ok && text.contains("fresh"), "{text}");

    new.start().await;
    let new_api = new.api.clone();
    let list: herald_api_types::ListView =
        get_view(&format!("{new_api}/api/v1/lists/{LIST}")).await;
    assert_eq!(list.members.total, MEMBERS as u64, "{list:?}");
    let progress = wait_complete(&new_api, &post_id, Duration::from_secs(120)).await;

    let snap = world.recorder().snapshot();
    let mut missing = Vec::new();
    for i in 0..MEMBERS {
        let addr = format!("m{i}@d{}.test", i % DOMAINS);
        if snap.copies_for(&addr).is_empty() {
            missing.push(addr);
        }
    }
    assert!(missing.is_empty(), "lost recipients: {missing:?}");
    // What the old machine delivered after the cut goes out again, plus what was in flight at
    // the cut (delivered, not yet journaled): each worker waits for its batch's commit.
    let bound = (at_kill - before_cut) + (DOMAINS * CONNS_PER_DEST * BATCH) as u64;
    assert!(
        snap.duplicates <= bound,
        "{} duplicates, more than the {bound} the cut allows",
        snap.duplicates
    );
    eprintln!(
        "backup took {took:?}; {before_cut} copies before it, {at_kill} at the kill; restored: \
         {} accepted, {} duplicates (bound {bound}), progress {progress:?}",
        snap.accepted, snap.duplicates
    );
    new.stop().await;
    world.shutdown().await;
}

/// With `http.admin_token` set (as on any server administered remotely), the backup route is
/// refused without the token and streams with it: it carries the secret and the keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backup_route_needs_the_admin_token() {
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    const TOKEN: &str = "backup-test-token-0123456789abcdef";
    let mut server = BinaryServer::configure(
        dir.path(),
        &dir.path().join("data"),
        &world,
        &format!("[http]\nadmin_token = \"{TOKEN}\"\n"),
    );
    server.start().await;
    let refused = std::process::Command::new(support::binary::herald_bin())
        .args(["--server", &server.api, "backup"])
        .arg(dir.path().join("no-token"))
        .env_remove("HERALD_ADMIN_TOKEN")
        .output()
        .expect("run herald");
    assert!(!refused.status.success(), "a backup without the token");
    assert!(
        !dir.path().join("no-token").join("manifest.json").exists(),
        "nothing usable is written without the token"
    );
    let target = dir.path().join("with-token");
    let (api, t) = (server.api.clone(), target.clone());
    let out = tokio::task::spawn_blocking(move || {
        herald_cli(&api, Some(TOKEN), &["backup", t.to_str().expect("utf-8")])
    })
    .await
    .expect("join");
    assert!(out.contains("checked against the manifest"), "{out}");
    assert!(target.join("manifest.json").exists());
    server.stop().await;
    world.shutdown().await;
}
