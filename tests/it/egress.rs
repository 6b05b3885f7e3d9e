//! Egress IP pools, end to end over real sockets: Herald binds each
//! connection to a source address of a pool (127.0.0.5, 127.0.0.6, 127.0.0.7), and the
//! simulated receivers record the peer address of every connection and copy.
//!
//! - copies of a list in the default two-address pool spread over both addresses, and no
//!   address ever has more connections open at once than its `max_connections` (the receivers
//!   count open connections per client address across the world);
//! - a list bound to a one-address pool leaves only from that address;
//! - an address warming up sends its day's cap and no more: the rest are deferred (not failed)
//!   with a delivery-log line saying why, the delivery log names the source address of each
//!   delivered copy, and a restart does not reset the count (`egress-warmup.json`).

use crate::support;

use herald_egress::{EgressPoolConfig, EgressSource};
use herald_sim::{Profile, World};
use serde_json::json;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;
use support::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn egress_config(config: &mut herald_server::config::Config) {
    let src = |name: &str, addr: &str, max: usize, warmup: Vec<u64>| EgressSource {
        name: name.into(),
        source: ip(addr),
        max_connections: Some(max),
        warmup,
    };
    config.delivery.egress = vec![
        src("a", "127.0.0.5", 1, vec![]),
        src("b", "127.0.0.6", 1, vec![]),
        src("new", "127.0.0.7", 2, vec![3, 10]),
    ];
    let pool = |name: &str, sources: &[&str]| EgressPoolConfig {
        name: name.into(),
        sources: sources.iter().map(|s| s.to_string()).collect(),
        domains: vec![],
    };
    config.delivery.egress_pool = vec![
        pool("main", &["a", "b"]),
        pool("solo", &["b"]),
        pool("warm", &["new"]),
    ];
    config.delivery.default_egress_pool = Some("main".into());
}

async fn post(server: &TestServer, list: &str) {
    let (mut c, _) = Smtp::connect(server.smtp).await;
    c.cmd("EHLO client.test").await;
    let msg = format!("From: alice@client.test\r\nTo: {list}\r\nSubject: hi\r\n\r\nhello\r\n");
    let r = c
        .send_mail("alice@client.test", &[list], msg.as_bytes())
        .await;
    assert!(r.starts_with("250"), "{r}");
    c.cmd("QUIT").await;
}

/// Source addresses of the copies received for recipients whose address starts with `prefix`.
fn peers_of(world: &World, prefix: &str) -> Vec<IpAddr> {
    world
        .recorder()
        .snapshot()
        .copies
        .iter()
        .filter(|c| c.recipient.starts_with(prefix))
        .map(|c| c.peer.expect("receiver recorded the peer"))
        .collect()
}

fn log_lines(data: &Path, needle: &str) -> Vec<String> {
    std::fs::read_to_string(data.join("log/delivery.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_spread_limit_bind_per_list_and_warm_up() {
    let profiles = vec![Profile::Normal; 4];
    let world = World::start(world_config(&profiles, false))
        .await
        .expect("world");
    let data = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(&world, data.path().to_path_buf());
    egress_config(&mut config);
    let server = TestServer::start(config.clone()).await;

    // The default pool: 4 destinations want connections at once; each address allows one.
    create_list(
        &server.api,
        "team@lists.test",
        json!({"posting_policy": "anyone"}),
    )
    .await;
    let team: Vec<String> = (0..20).map(|i| format!("t{i}@d{}.test", i % 4)).collect();
    add_members(
        &server.api,
        "team@lists.test",
        &team.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    post(&server, "team@lists.test").await;
    assert!(
        world.recorder().wait_for(20, Duration::from_secs(30)).await,
        "team delivered"
    );
    let used: BTreeSet<IpAddr> = peers_of(&world, "t").into_iter().collect();
    assert_eq!(
        used,
        BTreeSet::from([ip("127.0.0.5"), ip("127.0.0.6")]),
        "spread over the pool"
    );
    let peers = world.recorder().peers();
    for a in ["127.0.0.5", "127.0.0.6"] {
        let p = peers[&ip(a)];
        assert_eq!(p.max_open, 1, "{a}: max_connections = 1 held: {p:?}");
    }
    assert!(
        !peers.contains_key(&ip("127.0.0.1")),
        "nothing left from the default address"
    );

    // A list bound to the one-address pool.
    create_list(
        &server.api,
        "solo@lists.test",
        json!({"posting_policy": "anyone", "egress_pool": "solo"}),
    )
    .await;
    let solo: Vec<String> = (0..6).map(|i| format!("s{i}@d{}.test", i % 2)).collect();
    add_members(
        &server.api,
        "solo@lists.test",
        &solo.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    post(&server, "solo@lists.test").await;
    assert!(
        world.recorder().wait_for(26, Duration::from_secs(30)).await,
        "solo delivered"
    );
    let solo_peers = peers_of(&world, "s");
    assert_eq!(solo_peers.len(), 6);
    assert!(
        solo_peers.iter().all(|p| *p == ip("127.0.0.6")),
        "{solo_peers:?}"
    );

    // A new address warming up: 3 copies today, the other 2 deferred with the reason.
    create_list(
        &server.api,
        "warm@lists.test",
        json!({"posting_policy": "anyone", "egress_pool": "warm"}),
    )
    .await;
    let warm: Vec<String> = (0..5).map(|i| format!("w{i}@d0.test")).collect();
    add_members(
        &server.api,
        "warm@lists.test",
        &warm.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    post(&server, "warm@lists.test").await;
    let capped = "every source address reached its warm-up cap";
    wait_until_some("the warm-up deferrals", || {
        (log_lines(data.path(), capped).len() >= 2).then_some(())
    })
    .await;
    let warm_peers = peers_of(&world, "w");
    assert_eq!(
        warm_peers,
        vec![ip("127.0.0.7"); 3],
        "the day's cap, from the new address"
    );
    let deferred = log_lines(data.path(), capped);
    assert!(
        deferred.iter().all(|l| l.contains("status=deferred")),
        "{deferred:?}"
    );
    assert!(
        deferred.iter().all(|l| l.contains("egress pool warm")),
        "{deferred:?}"
    );
    // The log names the source address of every delivered copy.
    let sent = log_lines(data.path(), "status=sent");
    assert_eq!(sent.len(), 29, "{sent:#?}");
    for l in &sent {
        let from_team_or_solo = l.contains("src=127.0.0.5") || l.contains("src=127.0.0.6");
        assert!(from_team_or_solo || l.contains("src=127.0.0.7"), "{l}");
    }
    assert_eq!(
        sent.iter().filter(|l| l.contains("src=127.0.0.7")).count(),
        3
    );
    assert_eq!(
        metric(
            &server.api,
            "herald_egress_sent_today{source=\"127.0.0.7\"}"
        )
        .await,
        3
    );

    // A restart keeps today's count: the two copies are tried again and deferred again.
    server.stop().await;
    let ledger = std::fs::read_to_string(data.path().join("egress-warmup.json")).expect("ledger");
    assert!(ledger.contains("127.0.0.7"), "{ledger}");
    let before = log_lines(data.path(), capped).len();
    let server = TestServer::start(config).await;
    wait_until_some("deferrals after the restart", || {
        (log_lines(data.path(), capped).len() >= before + 2).then_some(())
    })
    .await;
    assert_eq!(
        peers_of(&world, "w").len(),
        3,
        "no copy beyond the cap after a restart"
    );
    assert_eq!(
        metric(
            &server.api,
            "herald_egress_sent_today{source=\"127.0.0.7\"}"
        )
        .await,
        3
    );
    server.stop().await;
    world.shutdown().await;
}
