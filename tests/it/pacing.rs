//! Pacing on the simulated world, through the real server: a large provider that limits the
//! rate over all its MX hosts is paced to what it accepts (its members within 1.3× members ÷
//! rate, refused MAILs ≤ 1 % of its copies); receivers that drop each recipient's first attempt
//! mid-DATA get the copy again at once on a new connection, without the host going down; and a
//! greylisting host's interval is learned, so a later post waits it out once.
//!
//! Margins: the rate test measures on the world's own clock (first to last accepted copy of the
//! provider), not the test's, so a loaded machine slows the sender but not the yardstick.

use crate::support;

use herald_sim::config::{DomainConfig, ExtraMx};
use herald_sim::{Profile, World};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;
use support::*;

const LIST: &str = "big@lists.test";

fn config(world: &World, dir: PathBuf) -> herald_server::Config {
    let mut c = server_config(world, dir);
    c.delivery.command_timeout = Duration::from_secs(3);
    c.delivery.data_timeout = Duration::from_secs(3);
    c
}

/// A provider with two domains published with different MX pairs out of three hosts, all three
/// sharing one budget of `per_sec` messages a second and `per_conn` messages per connection.
fn provider_world(per_sec: u32, per_conn: u32) -> herald_sim::WorldConfig {
    let mut cfg = world_config(&[], false);
    let profile = Profile::RateLimited {
        budget: "provider.test".into(),
        msgs_per_sec: per_sec,
        max_msgs_per_conn: Some(per_conn),
    };
    let host = |k: u8| (format!("mx{k}.provider.test"), Ipv4Addr::new(127, 1, 20, k));
    for (name, a, b) in [("p1.test", 1, 2), ("p2.test", 2, 3)] {
        let ((mx_host, mx_addr), (second, second_addr)) = (host(a), host(b));
        cfg.domains.push(DomainConfig {
            name: name.into(),
            weight: 1.0,
            mx_host,
            mx_addr,
            mx_preference: 10,
            extra_mx: vec![ExtraMx {
                host: second,
                addr: second_addr,
                preference: 20,
                profile: None,
            }],
            profile: profile.clone(),
            starttls: false,
            dane: Default::default(),
            extensions: Default::default(),
        });
    }
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_provider_is_paced_to_what_it_accepts() {
    const MEMBERS: usize = 600;
    const RATE: u32 = 50;
    let world = World::start(provider_world(RATE, 100))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = TestServer::start(config(&world, dir.path().to_path_buf())).await;
    setup_personalized_list(
        &server.api,
        LIST,
        spread_csv(MEMBERS, &["p1.test", "p2.test"]),
    )
    .await;
    let id = inject_post(&server.api, LIST, "paced").await;
    let p = wait_complete(&server.api, &id, Duration::from_secs(90)).await;
    assert_eq!(p.delivered as usize, MEMBERS, "{p:?}");
    assert_eq!(p.failed, 0, "{p:?}");
    let snap = world.recorder().snapshot();
    if std::env::var("PACING_DEBUG").is_ok() {
        let log = std::fs::read_to_string(dir.path().join("log/delivery.log")).unwrap_or_default();
        for l in log.lines().filter(|l| !l.contains("status=sent")).take(80) {
            eprintln!("{l}");
        }
        eprintln!("{:?}", snap.rejected_by_code);
        let mut by_sec = std::collections::BTreeMap::new();
        for c in &snap.copies {
            *by_sec.entry(c.at_ms / 1000).or_insert(0) += 1;
        }
        eprintln!("{by_sec:?}");
    }
    assert_eq!(snap.duplicates, 0);
    let first = snap.copies.iter().map(|c| c.at_ms).min().unwrap_or(0);
    let last = snap.copies.iter().map(|c| c.at_ms).max().unwrap_or(0);
    let secs = (last - first) as f64 / 1000.0;
    let ideal = MEMBERS as f64 / f64::from(RATE);
    // The provider's first second of budget is spent at once: the rest takes (MEMBERS - RATE)
    // / RATE at best; the goal is 1.3× members ÷ rate.
    assert!(
        secs <= 1.3 * ideal,
        "{MEMBERS} copies at {RATE}/s took {secs:.1} s (goal ≤ {:.1} s)",
        1.3 * ideal
    );
    let rate_refused = snap
        .rejected_by_code
        .get("451 4.7.28")
        .copied()
        .unwrap_or(0);
    let conn_refused = snap
        .rejected_by_code
        .get("421 4.7.28")
        .copied()
        .unwrap_or(0);
    let refused = rate_refused + conn_refused;
    assert!(
        refused as f64 <= 0.01 * MEMBERS as f64,
        "refused MAILs: {rate_refused} for rate, {conn_refused} per connection ({:?})",
        snap.rejected_by_code
    );
    server.stop().await;
    let log = std::fs::read_to_string(dir.path().join("log/delivery.log")).expect("log");
    // One budget for both domains' MX pairs: the provider was shaped under one name.
    assert!(log.contains("provider.test"), "the pace is logged");
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_mid_data_is_retried_at_once_on_a_new_connection() {
    const MEMBERS: usize = 120;
    let world = World::start(world_config(
        &[Profile::DropFirstAttempt, Profile::Normal],
        false,
    ))
    .await
    .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(&world, dir.path().to_path_buf());
    // The retry schedule is long here: only the immediate retry can deliver within the limit.
    cfg.scheduler.retry_initial_secs = 600;
    cfg.scheduler.retry_max_secs = 600;
    let server = TestServer::start(cfg).await;
    setup_personalized_list(
        &server.api,
        LIST,
        spread_csv(MEMBERS, &["d0.test", "d1.test"]),
    )
    .await;
    let id = inject_post(&server.api, LIST, "drops").await;
    let p = wait_complete(&server.api, &id, Duration::from_secs(60)).await;
    assert_eq!(p.delivered as usize, MEMBERS, "{p:?}");
    let snap = world.recorder().snapshot();
    assert_eq!(snap.duplicates, 0);
    let drops = snap.hosts["mx.d0.test"].dropped_mid_data;
    assert_eq!(
        drops,
        (MEMBERS / 2) as u64,
        "one drop per recipient, each retried"
    );
    let (_, text) = http("GET", &format!("{}/metrics", server.api), None).await;
    let text = text.as_str().unwrap_or_default().to_string();
    let down: f64 = text
        .lines()
        .find(|l| l.starts_with("herald_hosts_down "))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert_eq!(down, 0.0, "a passing drop does not count against the host");
    server.stop().await;
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greylisting_interval_is_learned_for_the_next_post() {
    const MEMBERS: usize = 20;
    // Says nothing of its interval (3 s); the first retry (1 s, 2.1 s with its margin) is too
    // early.
    let grey = Profile::Greylist {
        retry_after: Duration::from_secs(3),
        announce: false,
    };
    let world = World::start(world_config(&[grey], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(&world, dir.path().to_path_buf());
    cfg.scheduler.greylist_first_retry_secs = 1;
    cfg.scheduler.greylist_retry_secs = 60;
    let server = TestServer::start(cfg).await;
    setup_personalized_list(&server.api, LIST, spread_csv(MEMBERS, &["d0.test"])).await;
    let first = inject_post(&server.api, LIST, "grey-1").await;
    let p = wait_complete(&server.api, &first, Duration::from_secs(60)).await;
    assert_eq!(p.delivered as usize, MEMBERS, "{p:?}");
    let after_first = world.recorder().snapshot().rejected_by_code["451 4.7.1"];
    // The short first retry is greylisted again, then the backed-off one gets through.
    assert!(
        (MEMBERS as u64 + 1..=2 * MEMBERS as u64).contains(&after_first),
        "greylistings of the first post: {after_first}"
    );
    // New members (their sender/recipient pairs are new to the greylist; the old ones pass).
    let (status, report) = http_bytes(
        &format!("{}/api/v1/lists/{LIST}/import", server.api),
        spread_csv_range(MEMBERS..2 * MEMBERS, &["d0.test"]).into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let second = inject_post(&server.api, LIST, "grey-2").await;
    let p = wait_complete(&server.api, &second, Duration::from_secs(60)).await;
    assert_eq!(p.delivered as usize, 2 * MEMBERS, "{p:?}");
    let second_only = world.recorder().snapshot().rejected_by_code["451 4.7.1"] - after_first;
    assert_eq!(
        second_only, MEMBERS as u64,
        "the learned interval: one greylisting per new member's copy, none retried too early"
    );
    server.stop().await;
    world.shutdown().await;
}
