//! No loss on crash: the real `herald` binary is killed with SIGKILL in the middle of a fan-out,
//! started again on the same data directory, and must deliver to every member that had not yet
//! received the post; duplicates are bounded by the copies that were in flight.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::Duration;
use support::binary::BinaryServer;
use support::*;

const LIST: &str = "crash@lists.test";
const MEMBERS: usize = 4000;
const DOMAINS: usize = 8;
const CONNS_PER_DEST: usize = 2;
const BATCH: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_fanout_loses_no_recipient() {
    // Slow receivers so the fan-out is still running when the server is killed.
    let slow = Profile::Slow {
        delay: Duration::from_millis(3),
    };
    let mut world_cfg = world_config(&vec![slow; DOMAINS], false);
    world_cfg.receiver.check_mime_every = 0;
    let world = World::start(world_cfg).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let scheduler = format!(
        "[scheduler]\nmax_connections_per_destination = {CONNS_PER_DEST}\n\
         max_copies_per_batch = {BATCH}\nretry_initial_secs = 1\nretry_max_secs = 2\n\
         destination_backoff_secs = 1\ntick_ms = 50\n"
    );
    let mut server =
        BinaryServer::configure(dir.path(), &dir.path().join("data"), &world, &scheduler);
    let api = server.api.clone();
    server.start().await;
    create_list(&api, LIST, json!({"posting_policy": "anyone"})).await;
    let (status, report) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        members_csv(MEMBERS, DOMAINS).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let post = b"From: a@outside.test\r\nSubject: crash\r\nMessage-ID: <crash-1@outside.test>\r\n\r\nbody\r\n";
    let (status, r) = http_bytes(&format!("{api}/api/v1/lists/{LIST}/posts"), post.to_vec()).await;
    assert_eq!(status, 202, "{r}");
    let post_id = view::<herald_api_types::Injected>("inject", &r).post;

    // Kill it hard once a fifth of the copies are out.
    assert!(
        world
            .recorder()
            .wait_for(MEMBERS as u64 / 5, Duration::from_secs(60))
            .await,
        "fan-out did not start"
    );
    server.kill9();
    let at_kill = world.recorder().accepted();
    assert!(
        at_kill < MEMBERS as u64,
        "the fan-out finished before the kill ({at_kill} copies): make the world slower"
    );

    server.start().await;
    let progress = wait_complete(&api, &post_id, Duration::from_secs(120)).await;
    let snap = world.recorder().snapshot();
    let mut missing = Vec::new();
    for i in 0..MEMBERS {
        let addr = format!("m{i}@d{}.test", i % DOMAINS);
        if snap.copies_for(&addr).is_empty() {
            missing.push(addr);
        }
    }
    assert!(missing.is_empty(), "lost recipients: {missing:?}");
    // Copies delivered but not yet journaled when the process died can go out twice; each
    // worker waits for its batch's commit before taking more, so there are at most
    // connections × batch of them.
    let in_flight_bound = (DOMAINS * CONNS_PER_DEST * BATCH) as u64;
    assert!(
        snap.duplicates <= in_flight_bound,
        "{} duplicates, more than the {in_flight_bound} that can be in flight",
        snap.duplicates
    );
    assert_eq!(snap.unique_recipients, MEMBERS as u64, "{progress:?}");
    eprintln!(
        "killed at {at_kill} copies; after restart: {} accepted, {} duplicates, progress {progress:?}",
        snap.accepted, snap.duplicates
    );
    server.stop().await;
    world.shutdown().await;
}
