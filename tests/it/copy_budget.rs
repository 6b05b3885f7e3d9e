//! The global byte budget for spliced copies (`scheduler.max_copy_bytes`), end
//! to end over real sockets: a post fanned out over many open connections to the simulated
//! world with a budget of a few copies. Every member gets exactly one copy, the bytes of copies
//! in memory at once (`herald_copy_bytes_in_flight_peak` on `/metrics`) never pass the budget
//! while more connections than the budget holds copies are open, and a copy larger than the
//! whole budget still goes — alone. A deadlock (a worker holding a connection waiting forever
//! for bytes) would show as a post that never completes.

use crate::support;

use herald_sim::{Profile, World};
use serde_json::json;
use std::time::Duration;
use support::*;

const LIST: &str = "budget@lists.test";

/// A plain-text post of about `kb` KB.
fn post(kb: usize, id: &str) -> Vec<u8> {
    let line = "A line of the post, long enough to fill it up quickly.........\r\n";
    let body = line.repeat(kb * 1024 / line.len() + 1);
    format!(
        "From: Poster <poster@outside.test>\r\nTo: {LIST}\r\nSubject: Budget\r\n\
         Message-ID: <{id}@outside.test>\r\nMIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=us-ascii\r\n\r\n{body}"
    )
    .into_bytes()
}

/// Starts a world of `domains` domains and a server with the given budget, creates the list
/// with `members` members spread over the domains, and injects a post of `kb` KB. Returns when
/// the post is complete, with the server and world still up for inspection.
async fn fan_out(
    domains: usize,
    members: usize,
    kb: usize,
    budget: usize,
    batch_bytes: usize,
) -> (World, TestServer, tempfile::TempDir) {
    let world = World::start(world_config(&vec![Profile::Normal; domains], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = server_config(&world, dir.path().to_path_buf());
    cfg.scheduler.max_copy_bytes = budget;
    cfg.scheduler.batch_bytes = batch_bytes;
    let server = TestServer::start(cfg).await;
    let api = server.api.clone();
    create_list(
        &api,
        LIST,
        json!({
            "posting_policy": "anyone",
            "footer": "--\nFor {{name}} <{{email}}>: {{unsubscribe_url}}\n",
            "personalize": true,
        }),
    )
    .await;
    let (status, report) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/import"),
        members_csv(members, domains).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let (status, r) = http_bytes(
        &format!("{api}/api/v1/lists/{LIST}/posts"),
        post(kb, &format!("budget-{kb}")),
    )
    .await;
    assert_eq!(status, 202, "{r}");
    let id = view::<herald_api_types::Injected>("inject", &r).post;
    let p = wait_complete(&api, &id, Duration::from_secs(120)).await;
    assert_eq!(p.recipients, Some(members as u64), "{p:?}");
    assert_eq!(p.delivered, members as u64, "{p:?}");
    assert_eq!(p.failed, 0, "{p:?}");
    (world, server, dir)
}

/// Every member has exactly one copy, and no copy went twice.
fn assert_each_member_once(world: &World, members: usize, domains: usize) {
    let snap = world.recorder().snapshot();
    assert_eq!(snap.accepted, members as u64);
    assert_eq!(snap.duplicates, 0);
    for i in 0..members {
        let addr = format!("m{i}@d{}.test", i % domains);
        assert_eq!(snap.copies_for(&addr).len(), 1, "{addr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_of_a_few_copies_over_many_connections_delivers_every_copy_once_within_it() {
    const DOMAINS: usize = 40;
    const MEMBERS: usize = 1200;
    const BUDGET: usize = 48 * 1024;
    // ~10 KB copies, one per batch (16 KiB batches): the budget holds four at once while up to
    // 40 connections (one per domain, more once they answer) each want one.
    let (world, server, _dir) = fan_out(DOMAINS, MEMBERS, 10, BUDGET, 16 * 1024).await;
    let api = &server.api;
    assert_each_member_once(&world, MEMBERS, DOMAINS);

    let peak = metric(api, "herald_copy_bytes_in_flight_peak").await as usize;
    assert!(peak <= BUDGET, "peak {peak} over the budget {BUDGET}");
    assert!(peak >= 10 * 1024, "at least one copy was counted: {peak}");
    assert_eq!(metric(api, "herald_copy_bytes_in_flight").await, 0);
    assert_eq!(
        metric(api, "herald_copy_bytes_budget").await as usize,
        BUDGET
    );
    // Workers waited for bytes (the budget, not the connections, bounded the copies) ...
    let waits = metric(api, "herald_stage_wait_seconds_count{stage=\"copy_bytes\"}").await;
    assert!(waits > 0, "no worker ever waited for the budget");
    // ... while more connections were open than the budget holds copies.
    let most_open = world
        .recorder()
        .peers()
        .values()
        .map(|p| p.max_open)
        .max()
        .unwrap_or(0);
    assert!(most_open > 4, "only {most_open} connections open at once");
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_larger_than_the_whole_budget_still_goes_alone() {
    const DOMAINS: usize = 6;
    const MEMBERS: usize = 60;
    const BUDGET: usize = 16 * 1024;
    // 64 KB copies against a 16 KiB budget: each takes the whole budget, one at a time.
    let (world, server, _dir) = fan_out(DOMAINS, MEMBERS, 64, BUDGET, BUDGET).await;
    let api = &server.api;
    assert_each_member_once(&world, MEMBERS, DOMAINS);

    let peak = metric(api, "herald_copy_bytes_in_flight_peak").await as usize;
    let copy = world
        .recorder()
        .snapshot()
        .copies
        .iter()
        .map(|c| c.size)
        .max()
        .unwrap_or(0);
    assert!(
        copy > BUDGET,
        "the copies ({copy} bytes) are over the budget"
    );
    // The gauge counts the real buffer (not the clamped share), and never two copies at once.
    assert!(
        peak > BUDGET,
        "peak {peak} shows the clamped share, not the copy"
    );
    assert!(peak < 2 * copy, "two copies were in memory at once: {peak}");
    assert_eq!(metric(api, "herald_copy_bytes_in_flight").await, 0);
    server.stop().await;
    world.shutdown().await;
}
