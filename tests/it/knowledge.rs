//! Shared knowledge between cluster nodes, with the real binary as an
//! operator runs it: `herald serve` processes on 127.0.0.2/3/4 share one PostgreSQL
//! (`herald-pg-harness`); each sends from its own address (an egress source), so the simulated
//! world's receivers tell which node delivered each copy.
//!
//! - "A throttling provider sees the cluster's combined rate within its budget": three nodes
//!   fan one large post out (shared fan-out) to a provider whose three MX hosts share one rate
//!   budget; its receivers see the combined rate within the budget plus its one second of
//!   burst, refused-for-rate MAILs stay under 5 % of the copies, every member gets one copy;
//! - a host one node found down is skipped by another that never tried it;
//! - hostile rows in the shared tables (a rate of zero, below zero, NaN, absurd; a down host
//!   with no address) are ignored and counted, and the nodes go on delivering;
//! - a retry of a post at another node (same Message-ID, same list) is acknowledged and not
//!   fanned out again;
//! - a bounce for a copy one node sent, arriving at another node, moves the member's score
//!   once; the same report at both nodes still once.
//!
//! Margins: rates are measured on the world's clock (first to last accepted copy), so a loaded
//! machine slows the senders but not the yardstick.

use crate::support;

use herald_sim::config::{DomainConfig, ExtraMx};
use herald_sim::{Profile, World};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};
use support::cluster::{self, pg_exec, pg_rows, pg_url, start_nodes, Node, NodeOptions};
use support::*;

const LIST: &str = "big@lists.test";

/// The nodes of this file: each from its own address, knowledge exchanged every 500 ms;
/// `cluster` and `scheduler` are more keys of those sections.
fn options(cluster: &str, scheduler: &str) -> NodeOptions {
    NodeOptions {
        scheduler: scheduler.into(),
        cluster: format!("dead_after_intervals = 3\nknowledge_interval_ms = 500\n{cluster}"),
        rust_log: "warn,herald_scheduler=info,herald_knowledge=info".into(),
        ..NodeOptions::default()
    }
}

/// A provider (budget `provider.test`: `per_sec` messages a second over its three MX hosts,
/// `per_conn` per connection) hosting p1.test and p2.test with different MX pairs.
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

/// Starts nodes on `ips` (ids node-0, node-1, …) and makes the list through the first.
async fn cluster(
    dir: &Path,
    url: &str,
    world: &World,
    ips: &[&str],
    cluster: &str,
    scheduler: &str,
    csv: String,
) -> Vec<Node> {
    let nodes = start_nodes(dir, url, world, ips, &options(cluster, scheduler)).await;
    setup_personalized_list(&nodes[0].api(), LIST, csv).await;
    nodes
}

/// A post whose Message-ID is made from its subject (a retry of it is the same post).
async fn post(node: &Node, subject: &str) {
    let id = format!("{}@client.test", subject.replace(' ', "-"));
    cluster::post(node, LIST, subject, Some(&id)).await;
}

/// What the provider saw of one fan-out.
#[derive(Debug)]
struct ProviderView {
    accepted: u64,
    secs: f64,
    rate: f64,
    refused_rate: u64,
    refused_conn: u64,
    by_node: BTreeMap<IpAddr, u64>,
    duplicates: u64,
}

fn provider_view(world: &World) -> ProviderView {
    let snap = world.recorder().snapshot();
    let first = snap.copies.iter().map(|c| c.at_ms).min().unwrap_or(0);
    let last = snap.copies.iter().map(|c| c.at_ms).max().unwrap_or(0);
    let secs = (last.saturating_sub(first)) as f64 / 1000.0;
    let mut by_node = BTreeMap::new();
    for c in &snap.copies {
        if let Some(p) = c.peer {
            *by_node.entry(p).or_default() += 1;
        }
    }
    let code = |c: &str| snap.rejected_by_code.get(c).copied().unwrap_or(0);
    ProviderView {
        accepted: snap.accepted,
        secs,
        rate: snap.accepted as f64 / secs.max(0.001),
        refused_rate: code("451 4.7.28"),
        refused_conn: code("421 4.7.28"),
        by_node,
        duplicates: snap.duplicates,
    }
}

/// Three nodes, one post of `members` members fanned out in shards to the rate-limited
/// provider; `shared` turns the shared knowledge on or off. Returns what the provider saw.
async fn three_nodes_on_the_provider(
    members: usize,
    rate: u32,
    shared: bool,
) -> (ProviderView, Vec<Node>, String, tempfile::TempDir) {
    let url = pg_url().await;
    let world = World::start(provider_world(rate, 100))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster_keys = format!(
        "shared_fanout = true\nshard_members = 100\nlease_secs = 10\nshard_report_ms = 300\n\
         max_shards_per_node = 3\nshared_knowledge = {shared}\n"
    );
    let nodes = cluster(
        dir.path(),
        &url,
        &world,
        &["127.0.0.2", "127.0.0.3", "127.0.0.4"],
        &cluster_keys,
        "",
        spread_csv(members, &["p1.test", "p2.test"]),
    )
    .await;
    post(&nodes[1], "one large post").await;
    let all = world
        .recorder()
        .wait_for(members as u64, Duration::from_secs(180))
        .await;
    // Let any straggling duplicate arrive before counting.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let view = provider_view(&world);
    if std::env::var("KNOWLEDGE_DEBUG").is_ok() || !all {
        for (i, n) in nodes.iter().enumerate() {
            for l in n
                .log_lines("pace")
                .into_iter()
                .chain(n.log_lines("senders"))
            {
                eprintln!("node-{i}: {l}");
            }
        }
        let mut by_sec = BTreeMap::new();
        for c in &world.recorder().snapshot().copies {
            *by_sec.entry(c.at_ms / 1000).or_insert(0) += 1;
        }
        eprintln!("{by_sec:?}");
    }
    assert!(
        all,
        "not every member got the post: {} of {members}",
        world.recorder().unique_recipients()
    );
    world.shutdown().await;
    (view, nodes, url, dir)
}

/// The cluster's promise: "A throttling provider sees the cluster's combined rate within its
/// budget."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_provider_sees_the_clusters_combined_rate_within_its_budget() {
    const MEMBERS: usize = 900;
    const RATE: u32 = 50;
    let (v, nodes, url, _dir) = three_nodes_on_the_provider(MEMBERS, RATE, true).await;
    eprintln!("shared knowledge on: {v:?}");
    assert_eq!(v.accepted, MEMBERS as u64, "{v:?}");
    assert_eq!(v.duplicates, 0, "a member got two copies: {v:?}");
    assert!(v.by_node.len() >= 2, "the fan-out was not spread: {v:?}");
    // The provider's bucket holds one second of its rate: over the run, the combined rate is
    // within the budget plus that second.
    let ceiling = f64::from(RATE) * (1.0 + 1.0 / v.secs.max(1.0)) * 1.05;
    assert!(
        v.rate <= ceiling,
        "combined {:.1}/s over {:.1} s, budget {RATE}/s (ceiling {ceiling:.1})",
        v.rate,
        v.secs
    );
    let refused = v.refused_rate + v.refused_conn;
    assert!(
        refused as f64 <= 0.05 * MEMBERS as f64,
        "refused MAILs: {} for rate, {} per connection, of {MEMBERS}",
        v.refused_rate,
        v.refused_conn
    );
    // The cluster knows the provider's rate and who sends to it.
    let rows = pg_rows(
        &url,
        "SELECT rate_per_sec::TEXT, lowered_by FROM provider_budgets WHERE provider = 'provider.test'",
    )
    .await;
    assert_eq!(rows.len(), 1, "no shared rate: {rows:?}");
    let shared_rate: f64 = rows[0][0].as_deref().unwrap_or("0").parse().expect("rate");
    assert!(
        shared_rate > 0.0 && shared_rate <= 2.0 * f64::from(RATE),
        "{shared_rate}"
    );
    let senders = pg_rows(
        &url,
        "SELECT COUNT(*)::TEXT FROM provider_senders WHERE provider = 'provider.test'",
    )
    .await;
    assert!(
        senders[0][0]
            .as_deref()
            .unwrap_or("0")
            .parse::<u32>()
            .expect("n")
            >= 2,
        "{senders:?}"
    );
    for n in &nodes {
        assert!(metric(&n.api(), "herald_knowledge_exchanges_total").await > 0);
        assert_eq!(
            metric(&n.api(), "herald_knowledge_exchange_failures_total").await,
            0
        );
    }
    // Somebody followed somebody else's cut.
    let followed: usize = nodes
        .iter()
        .map(|n| {
            n.log_lines("share of the provider's rate in the cluster")
                .len()
        })
        .sum();
    assert!(followed > 0, "no node took a share of another's rate");
}

/// A host one node found down (its greeting never comes) is skipped by another node that
/// never tried it; hostile rows beside it are ignored and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_one_node_found_down_is_skipped_by_another() {
    const MEMBERS: usize = 20;
    let url = pg_url().await;
    let mut cfg = world_config(&[], false);
    cfg.domains.push(DomainConfig {
        name: "dead.test".into(),
        weight: 1.0,
        mx_host: "mx1.dead.test".into(),
        mx_addr: Ipv4Addr::new(127, 1, 30, 1),
        mx_preference: 10,
        extra_mx: vec![ExtraMx {
            host: "mx2.dead.test".into(),
            addr: Ipv4Addr::new(127, 1, 30, 2),
            preference: 20,
            profile: Some(Profile::Normal),
        }],
        profile: Profile::Hung,
        starttls: false,
        dane: Default::default(),
        extensions: Default::default(),
    });
    let world = World::start(cfg).await.expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = cluster(
        dir.path(),
        &url,
        &world,
        &["127.0.0.2", "127.0.0.3"],
        "",
        // One failed greeting marks the host down.
        "host_down_after_failures = 1",
        spread_csv(MEMBERS, &["dead.test"]),
    )
    .await;
    // Rows a broken node (or a hand edit) might leave: rates that are no rates, a down host
    // with no address, one at a host nobody uses.
    pg_exec(
        &url,
        "INSERT INTO provider_budgets VALUES ('dead.test', 'NaN', 0, 'evil'),
             ('rule:zero', 0, 0, 'evil'), ('rule:neg', -3, 0, 'evil'), ('rule:huge', 1e300, 0, 'evil');
         INSERT INTO provider_senders VALUES ('dead.test', 'evil', 0);
         INSERT INTO down_hosts VALUES ('mx9.nowhere.test', 'not an address', 9e15, 'x', 'evil'),
             ('mx8.nowhere.test', '127.1.99.8', 9e15, 'x', 'evil');",
    )
    .await;
    post(&nodes[0], "first").await;
    assert!(
        world
            .recorder()
            .wait_for(MEMBERS as u64, Duration::from_secs(60))
            .await,
        "node-0 did not deliver past the hung host"
    );
    let hung = |w: &World| {
        w.recorder()
            .snapshot()
            .hosts
            .get("mx1.dead.test")
            .map_or(0, |h| h.connections)
    };
    let tried = hung(&world);
    assert!(tried >= 1, "node-0 never tried the hung host");
    // node-0 told the cluster; node-1 hears of it (beside the stranger mx8: two).
    let start = Instant::now();
    loop {
        let rows = pg_rows(
            &url,
            "SELECT marked_by FROM down_hosts WHERE mx_host = 'mx1.dead.test'",
        )
        .await;
        if !rows.is_empty() {
            assert_eq!(rows, vec![vec![Some("node-0".to_string())]]);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "node-0 never told the cluster: {:?}",
            nodes[0].log_lines("host")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Applied at node-1's next exchange: its host table has both down (mx1, and the stranger).
    while metric(&nodes[1].api(), "herald_hosts_down").await < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "node-1 never took the down host: heard of {}",
            metric(
                &nodes[1].api(),
                "herald_knowledge_down_hosts_received_total"
            )
            .await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    post(&nodes[1], "second").await;
    assert!(
        world
            .recorder()
            .wait_for(2 * MEMBERS as u64, Duration::from_secs(60))
            .await,
        "node-1 did not deliver"
    );
    assert_eq!(
        hung(&world),
        tried,
        "node-1 tried the host node-0 found down"
    );
    let by_node = provider_view(&world).by_node;
    assert_eq!(by_node.get(&nodes[1].ip).copied(), Some(MEMBERS as u64));
    for n in &nodes {
        assert!(
            metric(&n.api(), "herald_knowledge_ignored_rows_total").await >= 1,
            "hostile rows not counted"
        );
    }
    assert!(!nodes[1]
        .log_lines("host down at another node")
        .iter()
        .any(|l| l.contains("mx9.nowhere.test")));
    world.shutdown().await;
}

/// A retry of a post sent to another node of the cluster (the sender lost the first 250; the
/// list domain has several MX hosts) is acknowledged, not fanned out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_id_one_node_took_is_a_duplicate_at_another() {
    const MEMBERS: usize = 5;
    let url = pg_url().await;
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = cluster(
        dir.path(),
        &url,
        &world,
        &["127.0.0.2", "127.0.0.3"],
        "",
        "",
        spread_csv(MEMBERS, &["d0.test"]),
    )
    .await;
    post(&nodes[0], "retried").await;
    assert!(
        world
            .recorder()
            .wait_for(MEMBERS as u64, Duration::from_secs(30))
            .await
    );
    // Recorded in the shared store (before the 250).
    let start = Instant::now();
    while pg_rows(&url, "SELECT origin_node FROM cluster_dedup")
        .await
        .is_empty()
    {
        assert!(start.elapsed() < Duration::from_secs(10), "never recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    post(&nodes[1], "retried").await;
    // A new post at node-1 goes out, so anything the retry would have sent is there first.
    post(&nodes[1], "new").await;
    assert!(
        world
            .recorder()
            .wait_for(2 * MEMBERS as u64, Duration::from_secs(30))
            .await
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let snap = world.recorder().snapshot();
    assert_eq!(snap.duplicates, 0, "the retry was fanned out again");
    assert_eq!(snap.accepted, 2 * MEMBERS as u64);
    let rows = pg_rows(
        &url,
        "SELECT origin_node FROM cluster_dedup ORDER BY message_id",
    )
    .await;
    assert_eq!(
        rows,
        vec![
            vec![Some("node-1".to_string())],
            vec![Some("node-0".to_string())]
        ],
        "one row per Message-ID, the first node's"
    );
    world.shutdown().await;
}

/// "A bounce arriving at node B for a copy node A sent is scored once" (a member must not
/// leave a list twice as fast because a cluster has two nodes). The bounce stage scores into
/// the shared directory under its write lock, and a member's score rises at most once a day,
/// so this holds already: this test proves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounce_at_another_node_is_scored_once() {
    let url = pg_url().await;
    let world = World::start(world_config(&[Profile::Normal], false))
        .await
        .expect("world");
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = cluster(
        dir.path(),
        &url,
        &world,
        &["127.0.0.2", "127.0.0.3"],
        "",
        "",
        spread_csv(3, &["d0.test"]),
    )
    .await;
    post(&nodes[0], "sent-by-node-0").await;
    assert!(world.recorder().wait_for(3, Duration::from_secs(30)).await);
    let snap = world.recorder().snapshot();
    let copy = snap.copies_for("u1@d0.test")[0].clone();
    assert_eq!(copy.peer, Some(nodes[0].ip), "node-0 sent it");
    let return_path = copy.sender.to_string();
    assert!(return_path.contains("+u1=d0.test@"), "{return_path}");
    let dsn = std::fs::read_to_string("crates/bounce/tests/corpus/postfix_hard.eml")
        .expect("corpus")
        .replace("\r\n", "\n")
        .replace('\n', "\r\n");
    let send_dsn = |n: &Node| {
        let (smtp, rp, dsn) = (n.smtp, return_path.clone(), dsn.clone());
        async move {
            let (mut c, _) = Smtp::connect(smtp).await;
            c.cmd("EHLO mailer-daemon.test").await;
            let r = c.send_mail("", &[&rp], dsn.as_bytes()).await;
            assert!(r.starts_with("250"), "{r}");
        }
    };
    let detail = |api: String| async move {
        let url = format!("{api}/api/v1/lists/{LIST}/members/u1@d0.test/detail");
        let (_, v) = http("GET", &url, None).await;
        view::<herald_api_types::MemberDetail>("detail", &v)
    };
    // The report comes back to node-1 (another MX of the list domain, in effect).
    send_dsn(&nodes[1]).await;
    let start = Instant::now();
    let d = loop {
        let d = detail(nodes[0].api()).await;
        if !d.bounces.is_empty() {
            break d;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never scored");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(d.bounce_score.map(|b| b.score), Some(1.0), "{d:?}");
    // The same report delivered to node-0 as well (both MX hosts got a copy): still once.
    send_dsn(&nodes[0]).await;
    let start = Instant::now();
    let d = loop {
        let d = detail(nodes[1].api()).await;
        if d.bounces.len() >= 2 {
            break d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "second not recorded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        d.bounce_score.map(|b| b.score),
        Some(1.0),
        "scored twice: {d:?}"
    );
    let counted = pg_rows(
        &url,
        "SELECT COUNT(*) FILTER (WHERE counted)::TEXT, COUNT(*)::TEXT FROM bounce_events WHERE address_key = 'u1@d0.test'",
    )
    .await;
    assert_eq!(
        counted,
        vec![vec![Some("1".to_string()), Some("2".to_string())]]
    );
    // Nobody else was touched.
    assert_eq!(
        detail(nodes[0].api()).await.member.status,
        herald_types::MemberStatus::Enabled
    );
    world.shutdown().await;
}

/// Measurements for BENCHMARKS.md (not a check; run by hand):
/// `cargo test --test it -- --ignored --nocapture knowledge::measure`. Three nodes fan one post
/// of 1,500 members out to the rate-limited provider (60/s), with shared knowledge off, then
/// on; for each: the provider's combined rate, refused MAILs, seconds; with sharing on, the
/// shared tables' statements per node per second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement for BENCHMARKS.md: 2 × 1,500 copies at 60/s, about a minute"]
async fn measure_sharing_off_and_on() {
    const MEMBERS: usize = 1500;
    const RATE: u32 = 60;
    for shared in [false, true] {
        let t = Instant::now();
        let (v, nodes, _url, _dir) = three_nodes_on_the_provider(MEMBERS, RATE, shared).await;
        let wall = t.elapsed().as_secs_f64();
        let mut per_node = Vec::new();
        for n in &nodes {
            let st = metric(&n.api(), "herald_knowledge_statements_total").await;
            let ex = metric(&n.api(), "herald_knowledge_exchanges_total").await;
            per_node.push((st, ex));
        }
        eprintln!(
            "shared knowledge {}: {} copies in {:.1} s at the provider ({:.1}/s, budget {RATE}/s), \
             refused {} for rate + {} per connection ({:.1} % of copies), by node {:?}, \
             duplicates {}; statements/exchanges per node {:?} over {wall:.0} s",
            if shared { "on" } else { "off" },
            v.accepted,
            v.secs,
            v.rate,
            v.refused_rate,
            v.refused_conn,
            100.0 * (v.refused_rate + v.refused_conn) as f64 / v.accepted.max(1) as f64,
            v.by_node,
            v.duplicates,
            per_node,
        );
    }
}
